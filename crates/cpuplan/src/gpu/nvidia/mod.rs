//! NVIDIA: the driver's char major 195, its listing in `/proc/driver/nvidia/gpus`, the NVIDIA
//! container toolkit's `NVIDIA_VISIBLE_DEVICES` forms (indices, `GPU-` uuids, PCI bus ids,
//! `all`/`none`/`void`, MIG's `MIG-<uuid>`, `MIG-GPU-<uuid>/<gi>/<ci>` and `<gpu>:<mig>`),
//! and the host's NVIDIA PCI functions.
//!
//! `/dev/nvidiaN` is `195:N`, where N is a GPU's `Device Minor` in the driver's `information`
//! file; `/dev/nvidia-modeset` (195:254) and `/dev/nvidiactl` (195:255) name no GPU. Indices
//! and PCI ids are resolved from the names of the driver's directories alone; the
//! `information` files are read only for uuids and minors. A bare `MIG-<uuid>` cannot be
//! placed from files (the driver lists no MIG uuids): it counts through the container's
//! `/dev/nvidiaN`.

mod driver;
mod visible;

use std::path::Path;

pub use driver::{
    nvidia_gpu_addresses, nvidia_gpus, parse_information, NvidiaGpu, NVIDIA_GPUS_DIR,
};
pub use visible::{parse_visible_devices, DeviceId, VisibleDevices, VISIBLE_DEVICES};

use super::{CharDevice, DeviceError, Named, Vendor};
use crate::error::Result;
use crate::gpus::{is_like, pci_devices_dir, scan, HostGpu};

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
}

impl Driver {
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

    /// The GPUs `NVIDIA_VISIBLE_DEVICES` names ([`super::Inventory::visible`]).
    pub(crate) fn visible(
        &mut self,
        root: &Path,
        value: Option<&str>,
        parent_named: bool,
    ) -> Result<Vec<String>, DeviceError> {
        match parse_visible_devices(value)? {
            VisibleDevices::Unset | VisibleDevices::None => return Ok(Vec::new()),
            VisibleDevices::All => return Ok(self.addresses(root)?.to_vec()),
            VisibleDevices::List(_) => {}
        }
        let value = value.unwrap_or_default();
        let mut found = Vec::new();
        for (entry, id) in visible::entries(value)? {
            let unknown = |why: String| DeviceError::VisibleUnknown {
                value: value.to_string(),
                entry: entry.to_string(),
                why,
            };
            let address = match &id {
                DeviceId::Index(i) => {
                    let all = self.addresses(root)?;
                    all.get(*i as usize)
                        .ok_or_else(|| unknown(format!("the host has {} NVIDIA GPUs", all.len())))?
                        .clone()
                }
                DeviceId::Uuid(uuid) => self
                    .gpus(root)?
                    .iter()
                    .find(|g| g.uuid.as_deref() == Some(uuid.as_str()))
                    .ok_or_else(|| unknown(listed_by_driver(root, "GPU UUID")))?
                    .address
                    .clone(),
                DeviceId::Pci(address) => self
                    .addresses(root)?
                    .iter()
                    .find(|a| *a == address)
                    .ok_or_else(|| unknown(listed_by_driver(root, "PCI address")))?
                    .clone(),
                DeviceId::Mig(_) if parent_named => continue, // its parent came with a device
                DeviceId::Mig(_) => {
                    return Err(DeviceError::BareMig {
                        value: value.to_string(),
                        entry: entry.to_string(),
                    })
                }
            };
            found.push(address);
        }
        Ok(found)
    }
}

/// Why an id matched nothing: no GPU the driver lists under the topology root has it.
fn listed_by_driver(root: &Path, what: &str) -> String {
    format!(
        "no GPU in {} has that {what}",
        root.join(NVIDIA_GPUS_DIR).display()
    )
}
