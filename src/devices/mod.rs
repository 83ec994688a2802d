//! Which GPUs a container has: its `linux.devices` and its `NVIDIA_VISIBLE_DEVICES`.

pub mod chardev;
pub mod nvidia;
pub mod pci;
pub mod visible;

use std::path::{Path, PathBuf};

pub use chardev::char_device_pci;
pub use nvidia::{nvidia_gpus, NvidiaGpu};
pub use pci::{normalize_pci, pci_sort_key};
pub use visible::{parse_visible_devices, DeviceId, VisibleDevices};

/// The NVIDIA driver's char device major (`/dev/nvidia<minor>`, minors 0–254 are GPUs).
pub const NVIDIA_MAJOR: i64 = 195;

/// A char device the container is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CharDevice {
    /// Major number.
    pub major: i64,
    /// Minor number.
    pub minor: i64,
}

/// A GPU id or device file that cannot be used, naming its source and value.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// An NVIDIA information file without a usable `Device Minor`.
    #[error("{}: {message}", path.display())]
    Info {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// `NVIDIA_VISIBLE_DEVICES` does not parse.
    #[error("NVIDIA_VISIBLE_DEVICES {value:?}: {message}")]
    Visible {
        /// The whole value.
        value: String,
        /// What is wrong with which id.
        message: String,
    },
    /// A GPU the container names is not on the host.
    #[error("{origin}: {id:?} matches no GPU on this host")]
    NotFound {
        /// Where the id came from.
        origin: String,
        /// The id.
        id: String,
    },
}

/// The container's GPUs' PCI addresses in address order, each counted once.
pub fn container_gpus(
    topology_root: &Path,
    devices: &[CharDevice],
    visible: Option<&str>,
) -> Result<Vec<String>, DeviceError> {
    let wanted = parse_visible_devices(visible)?;
    let needs_nvidia = devices.iter().any(|d| d.major == NVIDIA_MAJOR)
        || matches!(wanted, VisibleDevices::All | VisibleDevices::List(_));
    let host = if needs_nvidia {
        nvidia_gpus(topology_root)?
    } else {
        Vec::new()
    };
    let mut out: Vec<String> = Vec::new();
    let mut from_devices_nvidia = false;
    for d in devices {
        if d.major == NVIDIA_MAJOR {
            if !(0..=254).contains(&d.minor) {
                continue; // nvidiactl (255) and the like
            }
            let gpu = host
                .iter()
                .find(|g| g.minor == Some(d.minor as u32))
                .ok_or_else(|| DeviceError::NotFound {
                    origin: "linux.devices".into(),
                    id: format!("/dev/nvidia{} ({}:{})", d.minor, d.major, d.minor),
                })?;
            from_devices_nvidia = true;
            out.push(gpu.address.clone());
        } else if let Some(addr) = char_device_pci(topology_root, d.major, d.minor)? {
            out.push(addr);
        }
    }
    match wanted {
        VisibleDevices::Unset | VisibleDevices::None => {}
        VisibleDevices::All => out.extend(host.iter().map(|g| g.address.clone())),
        VisibleDevices::List(ids) => {
            for id in ids {
                let not_found = |shown: String| DeviceError::NotFound {
                    origin: "NVIDIA_VISIBLE_DEVICES".into(),
                    id: shown,
                };
                let addr = match &id {
                    DeviceId::Index(i) => host
                        .get(*i)
                        .map(|g| g.address.clone())
                        .ok_or_else(|| not_found(i.to_string()))?,
                    DeviceId::Uuid(u) => host
                        .iter()
                        .find(|g| g.uuid.as_deref().is_some_and(|h| h.eq_ignore_ascii_case(u)))
                        .map(|g| g.address.clone())
                        .ok_or_else(|| not_found(u.clone()))?,
                    DeviceId::Pci(p) => host
                        .iter()
                        .find(|g| &g.address == p)
                        .map(|g| g.address.clone())
                        .ok_or_else(|| not_found(p.clone()))?,
                    DeviceId::Mig(m) => {
                        // The driver lists no MIG UUIDs in procfs: the parent comes from linux.devices.
                        if from_devices_nvidia {
                            continue;
                        }
                        return Err(not_found(format!(
                            "{m} (a MIG UUID is resolved through the container's /dev/nvidiaN devices, and it has none)"
                        )));
                    }
                };
                out.push(addr);
            }
        }
    }
    out.sort_by_key(|a| pci_sort_key(a));
    out.dedup();
    Ok(out)
}
