//! Which NRI a runtime speaks, and so which events it accepts in a subscription: NRI v0.6 to
//! v0.9 reject any bit above `RemoveContainer` ("invalid plugin events", and the plugin is not
//! registered); v0.10 added `UpdatePodSandbox`, `PostUpdatePodSandbox` and
//! `ValidateContainerAdjustment`. A runtime of NRI v0.12 or later says its version at
//! `Configure`; for an older one it is inferred from the runtime's name and version, as NRI's
//! own stub does.

use crate::api::ConfigureRequest;
use crate::events::EventMask;

/// The NRI API revision this crate speaks, sent at registration.
pub const NRI_VERSION: &str = "v0.12.2";

/// A `major.minor` version.
type MajorMinor = (u32, u32);

/// The `major.minor` that starts `text` (`v1.7.24`, `2.1.9~ds1`, `1.34.0-dev`), if any.
pub fn major_minor(text: &str) -> Option<MajorMinor> {
    let t = text.trim().trim_start_matches('v');
    let mut parts = t.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// The NRI version the runtime of `req` speaks: its own word, else inferred from the runtime
/// (`containerd` 2.2 and later, `cri-o` 1.34 and later speak v0.10 or newer); `None` when
/// neither tells.
pub fn runtime_nri(req: &ConfigureRequest) -> Option<MajorMinor> {
    if let Some(v) = major_minor(&req.nri_version) {
        return Some(v);
    }
    let runtime = major_minor(&req.runtime_version)?;
    let (first_newer, nri_of_older) = match req.runtime_name.as_str() {
        "containerd" => ((2, 2), (0, 8)),
        "cri-o" => ((1, 34), (0, 9)),
        _ => return None,
    };
    Some(if runtime >= first_newer {
        (0, 10)
    } else {
        nri_of_older
    })
}

/// The events the runtime of `req` accepts in a subscription (the older set when unknown).
pub fn accepted_events(req: &ConfigureRequest) -> EventMask {
    match runtime_nri(req) {
        Some(v) if v >= (0, 10) => EventMask::FROM_V0_10,
        _ => EventMask::UP_TO_V0_9,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(name: &str, version: &str, nri: &str) -> ConfigureRequest {
        ConfigureRequest {
            runtime_name: name.into(),
            runtime_version: version.into(),
            nri_version: nri.into(),
            ..Default::default()
        }
    }

    #[test]
    fn versions_parse() {
        assert_eq!(major_minor("v1.7.24"), Some((1, 7)));
        assert_eq!(major_minor("2.1.9~ds1"), Some((2, 1)));
        assert_eq!(major_minor("1.34.0-dev"), Some((1, 34)));
        assert_eq!(major_minor("v0.12.2"), Some((0, 12)));
        assert_eq!(major_minor(""), None);
        assert_eq!(major_minor("unknown"), None);
        assert_eq!(major_minor("0.0.0-unknown"), Some((0, 0)));
    }

    #[test]
    fn each_runtime_gets_only_events_it_accepts() {
        let old = EventMask::UP_TO_V0_9;
        let new = EventMask::FROM_V0_10;
        for (name, version, nri, want) in [
            ("containerd", "1.7.24~ds1", "", old),
            ("containerd", "v2.1.9", "", old),
            ("containerd", "v2.2.1", "", new),
            ("containerd", "v2.3.4", "v0.12.1", new),
            ("cri-o", "1.33.2", "", old),
            ("cri-o", "1.35.0", "", new),
            ("podman", "5.0", "", old),
            ("", "", "", old),
            ("containerd", "v2.9.0", "v0.9.0", old),
        ] {
            assert_eq!(
                accepted_events(&req(name, version, nri)),
                want,
                "{name} {version} {nri}"
            );
        }
    }
}
