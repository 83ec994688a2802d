//! `NVIDIA_VISIBLE_DEVICES`: which NVIDIA GPUs a container asks for by name.

use crate::devices::pci::normalize_pci;
use crate::devices::DeviceError;

/// One id in `NVIDIA_VISIBLE_DEVICES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceId {
    /// The i-th NVIDIA GPU in PCI address order.
    Index(usize),
    /// `GPU-<uuid>`.
    Uuid(String),
    /// A PCI bus id, normalized.
    Pci(String),
    /// `MIG-<uuid>`: a MIG instance whose parent only the container's devices can name.
    Mig(String),
}

/// What `NVIDIA_VISIBLE_DEVICES` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VisibleDevices {
    /// Not set.
    Unset,
    /// `none`, `void` or empty.
    None,
    /// `all`.
    All,
    /// A list of ids (MIG forms already reduced to the parent GPU where they name it).
    List(Vec<DeviceId>),
}

/// The highest index accepted (a host has far fewer GPUs).
const MAX_INDEX: usize = 4096;

/// The value of `NVIDIA_VISIBLE_DEVICES` parsed; junk is an error quoting the value.
pub fn parse_visible_devices(value: Option<&str>) -> Result<VisibleDevices, DeviceError> {
    let Some(raw) = value else {
        return Ok(VisibleDevices::Unset);
    };
    let v = raw.trim();
    match v {
        "" | "none" | "void" => return Ok(VisibleDevices::None),
        "all" => return Ok(VisibleDevices::All),
        _ => {}
    }
    let bad = |why: String| DeviceError::Visible {
        value: raw.to_string(),
        message: why,
    };
    let mut ids = Vec::new();
    for item in v.split(',') {
        let item = item.trim();
        let id = parse_one(item).map_err(|m| bad(format!("{item:?}: {m}")))?;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(VisibleDevices::List(ids))
}

fn parse_one(item: &str) -> Result<DeviceId, String> {
    if item.is_empty() {
        return Err("empty id".into());
    }
    if let Some(rest) = item.strip_prefix("MIG-") {
        // MIG-GPU-<uuid>/<gi>/<ci> (older drivers) names its parent; MIG-<uuid> does not.
        if let Some(parent) = rest.strip_prefix("GPU-") {
            let uuid = parent.split('/').next().unwrap_or_default();
            return uuid_id(&format!("GPU-{uuid}"));
        }
        if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
            return Err("not a MIG UUID".into());
        }
        return Ok(DeviceId::Mig(item.to_string()));
    }
    // <gpu>:<mig>: the parent GPU by index or UUID.
    if let Some((gpu, mig)) = item.rsplit_once(':').filter(|_| !item.contains('.')) {
        if !mig.is_empty() && mig.bytes().all(|b| b.is_ascii_digit()) {
            return parse_one(gpu).and_then(|id| match id {
                DeviceId::Index(_) | DeviceId::Uuid(_) => Ok(id),
                _ => Err("not <gpu>:<mig>".into()),
            });
        }
    }
    if item.starts_with("GPU-") {
        return uuid_id(item);
    }
    if item.bytes().all(|b| b.is_ascii_digit()) {
        return item
            .parse::<usize>()
            .ok()
            .filter(|i| *i <= MAX_INDEX)
            .map(DeviceId::Index)
            .ok_or_else(|| "index out of range".into());
    }
    if let Some(pci) = normalize_pci(item).filter(|_| item.contains('.')) {
        return Ok(DeviceId::Pci(pci));
    }
    Err("neither an index, a GPU-/MIG- UUID nor a PCI bus id".into())
}

fn uuid_id(item: &str) -> Result<DeviceId, String> {
    let body = &item[4..];
    if body.is_empty() || !body.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
        return Err("not a GPU UUID".into());
    }
    Ok(DeviceId::Uuid(item.to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(v: &str) -> Vec<DeviceId> {
        match parse_visible_devices(Some(v)).unwrap() {
            VisibleDevices::List(l) => l,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_form() {
        assert_eq!(parse_visible_devices(None).unwrap(), VisibleDevices::Unset);
        for none in ["", "none", "void", " "] {
            assert_eq!(
                parse_visible_devices(Some(none)).unwrap(),
                VisibleDevices::None
            );
        }
        assert_eq!(
            parse_visible_devices(Some("all")).unwrap(),
            VisibleDevices::All
        );
        assert_eq!(list("0,2"), vec![DeviceId::Index(0), DeviceId::Index(2)]);
        assert_eq!(
            list("1,1"),
            vec![DeviceId::Index(1)],
            "duplicates count once"
        );
        assert_eq!(list("GPU-AbC-1"), vec![DeviceId::Uuid("gpu-abc-1".into())]);
        assert_eq!(
            list("00000000:2A:00.0"),
            vec![DeviceId::Pci("0000:2a:00.0".into())]
        );
        assert_eq!(list("MIG-0f-1"), vec![DeviceId::Mig("MIG-0f-1".into())]);
        assert_eq!(
            list("MIG-GPU-ab12/1/0"),
            vec![DeviceId::Uuid("gpu-ab12".into())]
        );
        assert_eq!(list("3:1"), vec![DeviceId::Index(3)]);
        assert_eq!(list("GPU-ab:0"), vec![DeviceId::Uuid("gpu-ab".into())]);
    }

    #[test]
    fn junk_is_an_error_quoting_the_value() {
        for bad in [
            "x",
            "-1",
            "99999",
            "1,,2",
            "GPU-",
            "GPU-zz",
            "MIG-",
            "0000:zz:00.0",
            "1:x",
        ] {
            let e = parse_visible_devices(Some(bad)).unwrap_err().to_string();
            assert!(
                e.contains("NVIDIA_VISIBLE_DEVICES") && e.contains(&format!("{bad:?}")),
                "{bad}: {e}"
            );
        }
    }
}
