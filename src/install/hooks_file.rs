//! The oci-hooks 1.0.0 file that podman and CRI-O read from their hooks directories: one OCI
//! hook (oci-spec's [`Hook`]), when it applies and at which stages. One format, one module:
//! install writes it, reads back whose it is, and the package's `hooks/oci/*.json` are checked
//! against it.

use std::path::{Path, PathBuf};

use oci_spec::runtime::{Hook, HookBuilder};
use serde::{Deserialize, Serialize};

/// The oci-hooks schema version written.
pub const VERSION: &str = "1.0.0";

/// The `PATH` the hook runs with (a runtime gives a hook no environment of its own).
const HOOK_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// An oci-hooks file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HooksFile {
    /// The schema version ([`VERSION`]).
    pub version: String,
    /// The hook to run.
    pub hook: Hook,
    /// When it applies (install writes `always`).
    pub when: When,
    /// The OCI stages it runs at.
    pub stages: Vec<String>,
}

/// An oci-hooks file's `when` (oci-hooks(5)): the hook applies to a container when *all* the
/// conditions set match. install writes `always`; the package's opt-in registration
/// (`hooks/oci/cpuplan-annotated.json`) sets `annotations` only.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct When {
    /// Whether the hook applies to every container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub always: Option<bool>,
    /// Key regex to value regex: matches when, for each pair, one of the container's
    /// annotations matches both (unanchored, as Go's `regexp.MatchString`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<std::collections::BTreeMap<String, String>>,
    /// Regexes of `process.args[0]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commands: Option<Vec<String>>,
    /// Whether the caller asked for host bind mounts.
    #[serde(
        default,
        rename = "hasBindMounts",
        skip_serializing_if = "Option::is_none"
    )]
    pub has_bind_mounts: Option<bool>,
}

/// The hook that runs `binary` as `cpuplan-hook --config CONFIG ARGS…`.
pub fn hook(binary: &Path, config: &Path, args: &[&str]) -> Hook {
    let mut argv = vec![
        "cpuplan-hook".to_string(),
        "--config".to_string(),
        config.display().to_string(),
    ];
    argv.extend(args.iter().map(|a| a.to_string()));
    HookBuilder::default()
        .path(PathBuf::from(binary))
        .args(argv)
        .env(vec![HOOK_PATH.to_string()])
        .timeout(crate::config::HOOK_TIMEOUT_S as i64)
        .build()
        .expect("a hook with a path is complete")
}

impl HooksFile {
    /// A file running `hook` at `stages` for every container.
    pub fn always(hook: Hook, stages: &[&str]) -> HooksFile {
        HooksFile {
            version: VERSION.into(),
            hook,
            when: When {
                always: Some(true),
                ..When::default()
            },
            stages: stages.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// The file in `bytes`, if it is one.
    pub fn parse(bytes: &[u8]) -> Option<HooksFile> {
        serde_json::from_slice(bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_round_trips_and_a_foreign_when_still_reads() {
        let h = hook(Path::new("/opt/bin/h"), Path::new("/etc/c.json"), &["hook"]);
        let f = HooksFile::always(h, &["createRuntime", "poststop"]);
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["version"], "1.0.0");
        assert_eq!(v["hook"]["path"], "/opt/bin/h");
        assert_eq!(
            v["hook"]["args"],
            serde_json::json!(["cpuplan-hook", "--config", "/etc/c.json", "hook"])
        );
        assert_eq!(v["hook"]["timeout"], 10);
        assert_eq!(v["when"], serde_json::json!({"always": true}));
        assert_eq!(HooksFile::parse(&serde_json::to_vec(&f).unwrap()), Some(f));
        let other = br#"{"version":"1.0.0","hook":{"path":"/x"},"when":{"annotations":{"a":"b"}},"stages":["prestart"]}"#;
        let o = HooksFile::parse(other).unwrap();
        assert_eq!(o.hook.path(), Path::new("/x"));
        assert_eq!(o.when.always, None);
        assert_eq!(
            o.when.annotations,
            Some([("a".to_string(), "b".to_string())].into())
        );
        assert_eq!(HooksFile::parse(b"{\"hook\": 1}"), None);
    }

    #[test]
    fn the_annotated_registration_is_the_default_one_but_for_when() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("hooks/oci");
        let read = |n: &str| HooksFile::parse(&std::fs::read(dir.join(n)).unwrap()).unwrap();
        let (always, annotated) = (read("cpuplan.json"), read("cpuplan-annotated.json"));
        assert_eq!(annotated.hook, always.hook);
        assert_eq!(annotated.stages, always.stages);
        assert_eq!(annotated.version, VERSION);
        let when = annotated.when;
        assert_eq!(
            (when.always, &when.commands, when.has_bind_mounts),
            (None, &None, None)
        );
        assert_eq!(
            when.annotations,
            Some(
                [(
                    r"^(cdi\.k8s\.io/.+|cpuplan\..+)$".to_string(),
                    ".*".to_string()
                )]
                .into()
            )
        );
    }

    #[test]
    fn the_package_s_hooks_files_are_oci_hooks_files() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("hooks/oci");
        for (name, stages) in [
            ("cpuplan.json", vec!["createRuntime", "poststop"]),
            ("cpuplan-precreate.json", vec!["precreate"]),
        ] {
            let f = HooksFile::parse(&std::fs::read(dir.join(name)).unwrap())
                .unwrap_or_else(|| panic!("{name} is no oci-hooks file"));
            assert_eq!(f.version, VERSION, "{name}");
            assert_eq!(
                f.hook.path(),
                Path::new("/usr/libexec/cpuplan/cpuplan-hook")
            );
            assert_eq!(
                f.when,
                HooksFile::always(f.hook.clone(), &[]).when,
                "{name}"
            );
            assert_eq!(f.stages, stages, "{name}");
            // The bound check-config puts on claim_wait_ms is derived from this timeout.
            assert_eq!(
                f.hook.timeout(),
                Some(crate::config::HOOK_TIMEOUT_S as i64),
                "{name}"
            );
        }
    }
}
