//! `NVIDIA_VISIBLE_DEVICES`: the GPUs the NVIDIA runtime gives a container.

use super::driver::{gpu_uuid, strip_prefix_ignore_case};
use crate::gpu::DeviceError;
use crate::pci::PciAddress;

/// The variable's name, as errors quote it.
pub const VISIBLE_DEVICES: &str = "NVIDIA_VISIBLE_DEVICES";

/// What `NVIDIA_VISIBLE_DEVICES` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VisibleDevices {
    /// The variable is not set: no GPU.
    Unset,
    /// `none`, `void` or empty: no GPU.
    None,
    /// `all`: every NVIDIA GPU of the host.
    All,
    /// A comma list of GPUs, in the order given (duplicates kept).
    List(Vec<DeviceId>),
}

/// One GPU named in `NVIDIA_VISIBLE_DEVICES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceId {
    /// The i-th NVIDIA GPU of the host in PCI address order (also the parent of `<i>:<mig>`).
    Index(u32),
    /// A GPU by `GPU-<uuid>` with lowercase hex (also the parent of `MIG-GPU-<uuid>/<gi>/<ci>` and `GPU-<uuid>:<mig>`).
    Uuid(String),
    /// A GPU by PCI bus id, normalized to `0000:2a:00.0`.
    Pci(String),
    /// A MIG device by its own `MIG-<uuid>` (lowercase hex), which procfs cannot place on a GPU.
    Mig(String),
}

/// `NVIDIA_VISIBLE_DEVICES` (`None` when unset) parsed; a junk entry is an error quoting it.
pub fn parse_visible_devices(value: Option<&str>) -> Result<VisibleDevices, DeviceError> {
    let Some(raw) = value else {
        return Ok(VisibleDevices::Unset);
    };
    match raw.trim() {
        "" | "none" | "void" => Ok(VisibleDevices::None),
        "all" => Ok(VisibleDevices::All),
        _ => Ok(VisibleDevices::List(
            entries(raw)?.into_iter().map(|(_, id)| id).collect(),
        )),
    }
}

/// Each comma-separated entry of a list value (trimmed) with the id it names.
pub(crate) fn entries(raw: &str) -> Result<Vec<(&str, DeviceId)>, DeviceError> {
    raw.split(',')
        .map(str::trim)
        .map(|entry| {
            parse_id(entry)
                .map(|id| (entry, id))
                .ok_or_else(|| DeviceError::VisibleJunk {
                    value: raw.to_string(),
                    entry: entry.to_string(),
                })
        })
        .collect()
}

/// One entry: an index, `GPU-<uuid>`, a PCI bus id, `MIG-GPU-<uuid>/<gi>/<ci>`, `MIG-<uuid>` or `<gpu>:<mig>`.
pub fn parse_id(entry: &str) -> Option<DeviceId> {
    if let Some(pci) = PciAddress::canonical(entry) {
        return Some(DeviceId::Pci(pci));
    }
    if let Some(rest) = strip_prefix_ignore_case(entry, "MIG-") {
        if strip_prefix_ignore_case(rest, "GPU-").is_some() {
            // MIG-GPU-<uuid>/<gi>/<ci>: the instance of the GPU with that uuid.
            let mut parts = rest.split('/');
            let (Some(gpu), Some(gi), Some(ci), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return None;
            };
            return (number(gi).is_some() && number(ci).is_some())
                .then(|| gpu_uuid(gpu).map(DeviceId::Uuid))
                .flatten();
        }
        let ok = !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
        return ok.then(|| DeviceId::Mig(format!("MIG-{}", rest.to_ascii_lowercase())));
    }
    if let Some((gpu, mig)) = entry.split_once(':') {
        // <gpu>:<mig>: the parent GPU by index or uuid.
        number(mig)?;
        return parent(gpu);
    }
    parent(entry)
}

/// A whole GPU by index or `GPU-<uuid>`.
fn parent(s: &str) -> Option<DeviceId> {
    match number(s) {
        Some(i) => Some(DeviceId::Index(i)),
        None => gpu_uuid(s).map(DeviceId::Uuid),
    }
}

/// Decimal digits only (no sign) that fit a u32.
fn number(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(value: &str) -> Vec<DeviceId> {
        match parse_visible_devices(Some(value)).unwrap() {
            VisibleDevices::List(ids) => ids,
            other => panic!("{value:?} gave {other:?}"),
        }
    }

    proptest::proptest! {
        #[test]
        fn any_value_parses_or_is_refused_without_panic(s in "\\PC*") {
            if let Err(e) = parse_visible_devices(Some(&s)) {
                proptest::prop_assert!(e.to_string().contains("NVIDIA_VISIBLE_DEVICES="));
            }
        }
    }

    #[test]
    fn the_keywords() {
        assert_eq!(parse_visible_devices(None).unwrap(), VisibleDevices::Unset);
        for none in ["", "  ", "none", "void", " none\n"] {
            assert_eq!(
                parse_visible_devices(Some(none)).unwrap(),
                VisibleDevices::None,
                "{none:?}"
            );
        }
        assert_eq!(
            parse_visible_devices(Some("all")).unwrap(),
            VisibleDevices::All
        );
    }

    #[test]
    fn every_form_of_id() {
        let uuid = "GPU-5d8a1b2c-3e4f-5061-7283-94a5b6c7d8e9";
        assert_eq!(
            ids("0, 3,GPU-5D8A1B2C-3E4F-5061-7283-94A5B6C7D8E9,00000000:2A:00.0,2a:00.0,0000:18:00.0"),
            [
                DeviceId::Index(0),
                DeviceId::Index(3),
                DeviceId::Uuid(uuid.into()),
                DeviceId::Pci("0000:2a:00.0".into()),
                DeviceId::Pci("0000:2a:00.0".into()),
                DeviceId::Pci("0000:18:00.0".into()),
            ]
        );
        assert_eq!(
            ids(&format!(
                "MIG-{uuid}/1/0,1:0,{uuid}:2,MIG-AB12cd34-0000-1111-2222-333344445555"
            )),
            [
                DeviceId::Uuid(uuid.into()),
                DeviceId::Index(1),
                DeviceId::Uuid(uuid.into()),
                DeviceId::Mig("MIG-ab12cd34-0000-1111-2222-333344445555".into()),
            ]
        );
        assert_eq!(ids("99999"), [DeviceId::Index(99999)]);
    }

    #[test]
    fn junk_quotes_the_variable_and_the_entry() {
        for (value, entry) in [
            ("-1", "-1"),
            ("0,,1", ""),
            ("0,", ""),
            ("gpu0", "gpu0"),
            ("4294967296", "4294967296"),
            ("+1", "+1"),
            ("0,all", "all"),
            ("GPU-", "GPU-"),
            ("GPU-xyz", "GPU-xyz"),
            ("MIG-", "MIG-"),
            ("MIG-GPU-5d8a/1", "MIG-GPU-5d8a/1"),
            ("MIG-GPU-5d8a/1/x", "MIG-GPU-5d8a/1/x"),
            ("1:x", "1:x"),
            ("1:-1", "1:-1"),
            ("x:1", "x:1"),
            ("../0", "../0"),
        ] {
            let e = parse_visible_devices(Some(value)).unwrap_err();
            assert!(
                matches!(e, DeviceError::VisibleJunk { .. }),
                "{value:?}: {e:?}"
            );
            let text = e.to_string();
            assert!(
                text.contains(&format!("NVIDIA_VISIBLE_DEVICES={value:?}"))
                    && text.contains(&format!("{entry:?} is not")),
                "{text}"
            );
        }
    }
}
