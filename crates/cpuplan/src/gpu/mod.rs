//! Which GPU a device node or an environment variable names: the GPU-vendor seam.
//!
//! A reader hands every char device it finds (in a spec's `linux.devices`, in a container's
//! `/dev`) and the container's `NVIDIA_VISIBLE_DEVICES` to one [`Inventory`], which asks the
//! vendor module that knows the device: [`nvidia`] (the driver's major 195, its procfs
//! listing, the toolkit's env forms, MIG) or [`drm`] (AMD and Intel: DRM card and render
//! nodes, `/dev/kfd`, and any char device sysfs places on a PCI function). Each answers
//! with the GPU's PCI address, the address every other part of cpuplan uses. A new vendor, or
//! a new way a vendor names its GPUs, is one module here; the reader does not change.
//! Every host file is read under a topology root (`/` on a real host).

pub mod drm;
mod error;
pub mod nvidia;
mod sysfs_char;

use std::path::{Path, PathBuf};

pub use error::DeviceError;
pub use sysfs_char::{char_device_function, char_device_pci, PciFunction};

/// A char device as a spec or a container's `/dev` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CharDevice {
    /// Major number.
    pub major: i64,
    /// Minor number.
    pub minor: i64,
    /// Where the container sees it (`/dev/nvidia0`), as the spec says.
    pub path: String,
}

/// The vendor module that named a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vendor {
    /// NVIDIA's driver ([`nvidia`]).
    Nvidia,
    /// A DRM or other PCI-placed device ([`drm`]: AMD, Intel).
    Drm,
}

/// What one char device names.
#[derive(Debug)]
pub enum Named {
    /// A GPU: its PCI address (lowercase `0000:2a:00.0`), and the vendor module that knows it.
    Gpu {
        /// The GPU's PCI address.
        address: String,
        /// Who named it.
        vendor: Vendor,
    },
    /// A device of a PCI function that is no GPU (a NIC's RDMA device beside a GPU).
    NotGpu {
        /// The function's address.
        address: String,
        /// Its PCI base class, where sysfs gives one.
        class: Option<u8>,
    },
    /// No GPU by itself: `/dev/nvidiactl`, `/dev/nvidia-modeset`, `/dev/kfd`, a device sysfs
    /// places on no PCI function.
    Nothing,
    /// A GPU node whose GPU the vendor's driver does not list: an error where the operator's
    /// spec gives the device, a note where a container's `/dev` holds it.
    Unlisted(DeviceError),
}

/// The host's GPUs as each vendor's driver and sysfs show them, read under one topology root;
/// what a vendor's driver lists is read at most once over the life of the inventory (a
/// long-running planner keeps one, and drops it when the host may have changed).
#[derive(Debug, Clone)]
pub struct Inventory {
    root: PathBuf,
    nvidia: nvidia::Driver,
}

impl Inventory {
    /// The GPUs under `topology_root`, nothing read yet.
    pub fn new(topology_root: &Path) -> Inventory {
        Inventory {
            root: topology_root.to_path_buf(),
            nvidia: nvidia::Driver::default(),
        }
    }

    /// The topology root it reads under.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// What the char device `d` names, asked of the vendor module of its major.
    pub fn device(&mut self, d: &CharDevice) -> Result<Named, DeviceError> {
        if d.major == nvidia::NVIDIA_MAJOR {
            return self.nvidia.device(&self.root, d);
        }
        drm::device(&self.root, d)
    }

    /// The GPUs `NVIDIA_VISIBLE_DEVICES` (`value`, `None` when unset) names, in the order
    /// given; `parent_named`: whether an NVIDIA device of the container already names the
    /// parent GPU of a bare `MIG-<uuid>` (which the driver's files cannot place).
    pub fn visible(
        &mut self,
        value: Option<&str>,
        parent_named: bool,
    ) -> Result<Vec<String>, DeviceError> {
        self.nvidia.visible(&self.root, value, parent_named)
    }

    /// The host's NVIDIA GPUs as the driver lists them, with their minors and uuids.
    pub fn nvidia_gpus(&mut self) -> Result<&[nvidia::NvidiaGpu], DeviceError> {
        self.nvidia.gpus(&self.root)
    }

    /// Whether an entry `name` of a container's `/dev` may be a GPU node, by its name alone
    /// (what is worth a `stat`): `/dev/nvidiaN`.
    pub fn is_gpu_node_name(name: &str) -> bool {
        nvidia::is_node_name(name)
    }

    /// Whether a char device `/dev/<name>` of major `major` is a GPU node to ask about.
    pub fn is_gpu_node(name: &str, major: i64) -> bool {
        nvidia::is_node(name, major)
    }
}
