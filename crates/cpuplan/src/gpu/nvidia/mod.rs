//! NVIDIA: the driver's char major 195, its listing in `/proc/driver/nvidia/gpus`, the NVIDIA
//! container toolkit's `NVIDIA_VISIBLE_DEVICES` forms (indices, `GPU-` uuids, PCI bus ids,
//! `all`/`none`/`void`, MIG's `MIG-<uuid>`, `MIG-GPU-<uuid>/<gi>/<ci>` and `<gpu>:<mig>`),
//! MIG instances' capability nodes ([`mig`]), and the host's NVIDIA PCI functions.
//!
//! `/dev/nvidiaN` is `195:N`, where N is a GPU's `Device Minor` in the driver's `information`
//! file; `/dev/nvidia-modeset` (195:254) and `/dev/nvidiactl` (195:255) name no GPU. Indices
//! and PCI ids are resolved from the names of the driver's directories alone; the
//! `information` files are read only for uuids and minors. A bare `MIG-<uuid>` cannot be
//! placed from files (the driver lists no MIG uuids): it counts through the container's
//! `/dev/nvidiaN`, and is a note where the container has none. Time-slicing's replica ids
//! (`<uuid>::<n>`) never reach a container: the device plugin strips them.

mod driver;
pub mod mig;
mod seen;
mod visible;

use std::path::Path;

pub use driver::{
    nvidia_gpu_addresses, nvidia_gpus, parse_information, NvidiaGpu, NVIDIA_GPUS_DIR,
};
pub use seen::cuda_gpus;
pub use visible::{parse_id, parse_visible_devices, DeviceId, VisibleDevices, VISIBLE_DEVICES};

use super::{CharDevice, DeviceError, Named, Resolved, Vendor};
use crate::error::Result;
use crate::gpus::{is_like, pci_devices_dir, scan, HostGpu};
use crate::quote::quoted;

/// The NVIDIA driver's char major: `/dev/nvidiaN` is `195:N`, `/dev/nvidia-modeset` `195:254`, `/dev/nvidiactl` `195:255`.
pub const NVIDIA_MAJOR: i64 = 195;

/// The minor of `/dev/nvidia-modeset`, which names no GPU unless the driver lists a GPU with it.
const MODESET_MINOR: i64 = 254;

/// NVIDIA's PCI vendor id.
pub const NVIDIA_VENDOR: u32 = 0x10de;

/// Whether `/dev/<name>` is named as an NVIDIA GPU node: `nvidia` and 1 to 3 digits.
pub fn is_node_name(name: &str) -> bool {
    name.strip_prefix("nvidia")
        .is_some_and(|n| !n.is_empty() && n.len() <= 3 && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether a char device `/dev/<name>` of major `major` is an NVIDIA GPU node.
pub fn is_node(name: &str, major: i64) -> bool {
    major == NVIDIA_MAJOR && is_node_name(name)
}

/// The host's NVIDIA GPUs in PCI address order: the functions with NVIDIA's vendor id and the
/// display (VGA `0x0300`) or 3D controller (`0x0302`) class, whatever GPU a container was given.
pub fn nvidia_host_gpus(root: &Path) -> Result<Vec<HostGpu>> {
    let devices = pci_devices_dir(root);
    if !devices.is_dir() {
        return Ok(Vec::new());
    }
    scan(&devices, |dir| {
        Ok(is_like(dir, NVIDIA_VENDOR, 0x0300)? || is_like(dir, NVIDIA_VENDOR, 0x0302)?)
    })
}

/// What the NVIDIA driver lists, read at most once over the life of the value.
#[derive(Debug, Clone, Default)]
pub(crate) struct Driver {
    /// The driver's GPUs with their minors and UUIDs (its `information` files).
    gpus: Option<Vec<NvidiaGpu>>,
    /// Their addresses alone (its directory names): what indices and PCI ids need.
    addresses: Option<Vec<String>>,
    /// The `nvidia-caps` char major, where `/proc/devices` lists one.
    caps_major: Option<Option<i64>>,
    /// The capability minors the driver lists, with what each is.
    capabilities: Option<Vec<(u32, mig::Capability)>>,
}

impl Driver {
    /// What the driver lists, already read: its GPUs and the `nvidia-caps` major.
    pub(crate) fn seeded(gpus: Vec<NvidiaGpu>, caps_major: Option<i64>) -> Driver {
        Driver {
            addresses: Some(gpus.iter().map(|g| g.address.clone()).collect()),
            gpus: Some(gpus),
            caps_major: Some(caps_major),
            capabilities: None,
        }
    }

    /// The driver's GPUs, read the first time.
    pub(crate) fn gpus(&mut self, root: &Path) -> Result<&[NvidiaGpu], DeviceError> {
        if self.gpus.is_none() {
            self.gpus = Some(nvidia_gpus(root)?);
        }
        Ok(self.gpus.as_deref().unwrap_or_default())
    }

    /// The driver's GPU addresses: from the GPUs already read, else its directory names.
    fn addresses(&mut self, root: &Path) -> Result<&[String], DeviceError> {
        if self.addresses.is_none() {
            self.addresses = Some(match &self.gpus {
                Some(gpus) => gpus.iter().map(|g| g.address.clone()).collect(),
                None => nvidia_gpu_addresses(root)?,
            });
        }
        Ok(self.addresses.as_deref().unwrap_or_default())
    }

    /// What `d`, of NVIDIA's major, names.
    pub(crate) fn device(&mut self, root: &Path, d: &CharDevice) -> Result<Named, DeviceError> {
        if !(0..MODESET_MINOR + 1).contains(&d.minor) {
            if d.minor == MODESET_MINOR + 1 {
                return Ok(Named::Nothing); // /dev/nvidiactl
            }
            return Err(DeviceError::Device {
                major: d.major,
                minor: d.minor,
                why: "not an NVIDIA device minor (0 to 255)".into(),
            });
        }
        let gpus = self.gpus(root)?;
        Ok(
            match gpus
                .iter()
                .find(|g| g.minor.map(i64::from) == Some(d.minor))
            {
                Some(g) => Named::Gpu {
                    address: g.address.clone(),
                    vendor: Vendor::Nvidia,
                },
                None if d.minor == MODESET_MINOR => Named::Nothing, // /dev/nvidia-modeset
                None => Named::Unlisted(DeviceError::Device {
                    major: d.major,
                    minor: d.minor,
                    why: format!(
                        "no GPU in {} has Device Minor {}",
                        root.join(NVIDIA_GPUS_DIR).display(),
                        d.minor
                    ),
                }),
            },
        )
    }

    /// Whether char major `major` is the `nvidia-caps` one of `/proc/devices` (read once).
    pub(crate) fn is_caps_major(&mut self, root: &Path, major: i64) -> Result<bool, DeviceError> {
        if self.caps_major.is_none() {
            self.caps_major = Some(mig::char_major(root, mig::CAPS_DEVICE)?);
        }
        Ok(self.caps_major.flatten() == Some(major))
    }

    /// What `d`, a capability node (`/dev/nvidia-caps/nvidia-cap<M>`), names: the GPU of the MIG
    /// instance it belongs to, nothing for a node-wide capability, or a note where the driver's
    /// capability files or GPUs do not place it.
    pub(crate) fn cap_device(&mut self, root: &Path, d: &CharDevice) -> Result<Named, DeviceError> {
        if self.capabilities.is_none() {
            self.capabilities = Some(mig::capabilities(root)?);
        }
        let node = format!("{} ({}:{})", quoted(&d.path), d.major, d.minor);
        let found = self
            .capabilities
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|(minor, _)| i64::from(*minor) == d.minor)
            .map(|(_, c)| c.clone());
        let capability = match found {
            None => {
                return Ok(Named::Unplaced(format!(
                    "{node} is an nvidia-caps node whose minor no MIG instance in {} has: not placed on a GPU",
                    root.join(mig::CAPABILITIES_DIR).display()
                )))
            }
            Some(mig::Capability::NodeWide(_)) => return Ok(Named::Nothing),
            Some(c) => c,
        };
        let mig::Capability::Instance { gpu, .. } = capability else {
            return Ok(Named::Nothing);
        };
        let parent = self
            .gpus(root)?
            .iter()
            .find(|g| g.minor == Some(gpu))
            .map(|g| g.address.clone());
        Ok(match parent {
            Some(address) => Named::Part {
                address,
                vendor: Vendor::Nvidia,
                part: format!("MIG instance {capability}"),
            },
            None => Named::Unplaced(format!(
                "{node} is MIG instance {capability}, but no GPU in {} has Device Minor {gpu}: not placed on a GPU",
                root.join(NVIDIA_GPUS_DIR).display()
            )),
        })
    }

    /// The GPUs `NVIDIA_VISIBLE_DEVICES` names ([`super::Inventory::visible`]).
    pub(crate) fn visible(
        &mut self,
        root: &Path,
        value: Option<&str>,
        parent_named: bool,
    ) -> Result<Resolved, DeviceError> {
        let mut out = Resolved::default();
        let Some(raw) = value else {
            return Ok(out);
        };
        let var = format!("{VISIBLE_DEVICES}={}", quoted(raw));
        match raw.trim() {
            "all" => out.gpus = self.addresses(root)?.to_vec(),
            "" | "none" | "void" => out.notes.push(format!("{var}: no GPU")),
            v if is_volume_mounts_path(v) => out.notes.push(format!(
                "{var} is the volume-mounts strategy's path: the GPUs are the /dev/null mounts under it"
            )),
            _ => {
                for entry in raw.split(',').map(str::trim) {
                    match self.entry(root, entry, parent_named)? {
                        Ok(Some(address)) => out.gpus.push(address),
                        Ok(None) => {}
                        Err(why) => out
                            .notes
                            .push(format!("{var}: {} {why}: ignored", quoted(entry))),
                    }
                }
            }
        }
        Ok(out)
    }

    /// The GPU one id names ([`super::Inventory::gpu_id`]).
    pub(crate) fn entry(
        &mut self,
        root: &Path,
        entry: &str,
        parent_named: bool,
    ) -> Result<Result<Option<String>, String>, DeviceError> {
        let Some(id) = visible::parse_id(entry) else {
            return Ok(Err(
                "is not a GPU index, GPU-/MIG- uuid, PCI bus id or <gpu>:<mig>".into(),
            ));
        };
        let unknown = |why: String| Ok(Err(format!("matches no GPU on this host ({why})")));
        let address = match &id {
            DeviceId::Index(i) => {
                let all = self.addresses(root)?;
                match all.get(*i as usize) {
                    Some(a) => a.clone(),
                    None => return unknown(format!("the host has {} NVIDIA GPUs", all.len())),
                }
            }
            DeviceId::Uuid(uuid) => {
                match self
                    .gpus(root)?
                    .iter()
                    .find(|g| g.uuid.as_deref() == Some(uuid.as_str()))
                {
                    Some(g) => g.address.clone(),
                    None => return unknown(listed_by_driver(root, "GPU UUID")),
                }
            }
            DeviceId::Pci(address) => match self.addresses(root)?.iter().find(|a| *a == address) {
                Some(a) => a.clone(),
                None => return unknown(listed_by_driver(root, "PCI address")),
            },
            DeviceId::Mig(_) if parent_named => return Ok(Ok(None)), // its parent came with a device
            DeviceId::Mig(_) => return Ok(Err(
                "is a MIG uuid, which /proc/driver/nvidia does not list, and no NVIDIA device of the container names its GPU".into(),
            )),
        };
        Ok(Ok(Some(address)))
    }
}

/// The directory the NVIDIA device plugin's volume-mounts strategy mounts `/dev/null` under,
/// one mount per GPU id (`/var/run/nvidia-container-devices/GPU-<uuid>`), and sets
/// `NVIDIA_VISIBLE_DEVICES` to.
pub const VOLUME_MOUNTS_DIR: &str = "/var/run/nvidia-container-devices";

/// Whether `value` is the volume-mounts strategy's path (`/var/run/nvidia-container-devices`,
/// with or without a trailing slash).
pub fn is_volume_mounts_path(value: &str) -> bool {
    value.trim_end_matches('/') == VOLUME_MOUNTS_DIR
}

/// Why an id matched nothing: no GPU the driver lists under the topology root has it.
fn listed_by_driver(root: &Path, what: &str) -> String {
    format!(
        "no GPU in {} has that {what}",
        root.join(NVIDIA_GPUS_DIR).display()
    )
}
