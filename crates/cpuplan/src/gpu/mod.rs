//! Which GPU a device node, a GPU id or an environment variable names: the GPU-vendor seam.
//!
//! A reader hands every char device it finds (in a spec's `linux.devices`, in a container's
//! `/dev`), the container's `NVIDIA_VISIBLE_DEVICES` and the GPU ids of the volume-mounts
//! strategy to one [`Inventory`], which asks the vendor module that knows the device:
//! [`nvidia`] (the driver's major 195, its procfs listing, the toolkit's id forms, MIG
//! instances and their `nvidia-caps` nodes) or [`drm`] (AMD and Intel: DRM card and render
//! nodes, `/dev/kfd`, any char device sysfs places on a PCI function, and AMD's
//! `amdgpu_xcp` partitions through the [`kfd`] topology). Each answers with the GPU's PCI
//! address, the address every other part of cpuplan uses. A new vendor, or a new way a vendor
//! names its GPUs, is one module here; the reader does not change. Every host file is read
//! under a topology root (`/` on a real host).
//!
//! What does not resolve is never an error of the whole read: an id that names no GPU is a note
//! on that id ([`Resolved::notes`]), a node of a GPU's part whose GPU cannot be found is
//! [`Named::Unplaced`]. Only a host file that cannot be read or holds what the driver never
//! writes is a [`DeviceError`].

pub mod drm;
mod error;
pub mod kfd;
pub mod nvidia;
mod sysfs_char;

use std::path::{Path, PathBuf};

pub use error::DeviceError;
pub use sysfs_char::{char_device_function, char_device_parent, char_device_pci, PciFunction};

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
    /// A part of a GPU: a MIG instance's capability node (`/dev/nvidia-caps/nvidia-cap<M>`) or
    /// a DRM node of an AMD partition (`amdgpu_xcp_<n>`), placed on the GPU it is part of.
    Part {
        /// The PCI address of the GPU it is part of.
        address: String,
        /// Who named it.
        vendor: Vendor,
        /// Which part, in words (`MIG instance gpu0/gi1/ci0`, `partition amdgpu_xcp_3`).
        part: String,
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
    /// A node of a GPU's part whose GPU cannot be found (a MIG capability minor the driver's
    /// capability files do not list, an AMD partition no kfd topology node places): a note
    /// that names it, never an error and never silence.
    Unplaced(String),
}

/// What a list of GPU ids names (`NVIDIA_VISIBLE_DEVICES`, the ids of the volume-mounts
/// strategy): the GPUs of the ids that resolve, in the order given, and a note on each id that
/// does not (junk, an unknown uuid or index, a bare MIG uuid whose parent is unknown, `void`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolved {
    /// The PCI addresses of the GPUs named, in the order given (duplicates kept).
    pub gpus: Vec<String>,
    /// One line for each id that names no GPU, quoting it and saying why.
    pub notes: Vec<String>,
}

/// The host's GPUs as each vendor's driver and sysfs show them, read under one topology root;
/// what a vendor's driver lists is read at most once over the life of the inventory (a
/// long-running planner keeps one, and drops it when the host may have changed).
///
/// What it holds, read lazily: the NVIDIA driver's GPUs (`/proc/driver/nvidia/gpus`), the
/// `nvidia-caps` major (`/proc/devices`) and the MIG instances' capability minors
/// (`/proc/driver/nvidia/capabilities`), and the kfd topology's GPU nodes. A cache of it kept
/// across a boot must drop the MIG instances and the kfd nodes when MIG or an AMD partition
/// mode is reconfigured (both change without a reboot); the rest changes only with the driver.
#[derive(Debug, Clone)]
pub struct Inventory {
    root: PathBuf,
    nvidia: nvidia::Driver,
    kfd: kfd::Topology,
}

impl Inventory {
    /// The GPUs under `topology_root`, nothing read yet.
    pub fn new(topology_root: &Path) -> Inventory {
        Inventory {
            root: topology_root.to_path_buf(),
            nvidia: nvidia::Driver::default(),
            kfd: kfd::Topology::default(),
        }
    }

    /// The GPUs under `topology_root` with what the NVIDIA driver lists already known (a host
    /// inventory's): its GPUs with their minors and uuids, and the `nvidia-caps` major. The MIG
    /// instances and the kfd topology, which change without a driver reload, are read when asked.
    pub fn seeded(
        topology_root: &Path,
        nvidia_gpus: Vec<nvidia::NvidiaGpu>,
        caps_major: Option<i64>,
    ) -> Inventory {
        Inventory {
            root: topology_root.to_path_buf(),
            nvidia: nvidia::Driver::seeded(nvidia_gpus, caps_major),
            kfd: kfd::Topology::default(),
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
        if self.nvidia.is_caps_major(&self.root, d.major)? {
            return self.nvidia.cap_device(&self.root, d);
        }
        drm::device(&self.root, &mut self.kfd, d)
    }

    /// The GPUs `NVIDIA_VISIBLE_DEVICES` (`value`, `None` when unset) names, in the order
    /// given, and a note on each entry that names none; `parent_named`: whether an NVIDIA
    /// device of the container already names the parent GPU of a bare `MIG-<uuid>` (which the
    /// driver's files cannot place).
    pub fn visible(
        &mut self,
        value: Option<&str>,
        parent_named: bool,
    ) -> Result<Resolved, DeviceError> {
        self.nvidia.visible(&self.root, value, parent_named)
    }

    /// The GPU one id of the NVIDIA device plugin names (an `NVIDIA_VISIBLE_DEVICES` entry, the
    /// last component of a volume-mounts path): `Ok(Some(address))`, `Ok(None)` for a bare
    /// `MIG-<uuid>` counted through its parent (`parent_named`), or `Err(why)` it names none.
    pub fn gpu_id(
        &mut self,
        id: &str,
        parent_named: bool,
    ) -> Result<Result<Option<String>, String>, DeviceError> {
        self.nvidia.entry(&self.root, id, parent_named)
    }

    /// The host's NVIDIA GPUs as the driver lists them, with their minors and uuids.
    pub fn nvidia_gpus(&mut self) -> Result<&[nvidia::NvidiaGpu], DeviceError> {
        self.nvidia.gpus(&self.root)
    }

    /// Whether an entry `name` of a container's `/dev` (or of its `/dev/dri`, `dri` true) may
    /// be a GPU node, by its name alone (what is worth a `stat`): `/dev/nvidiaN`,
    /// `/dev/dri/cardN`, `/dev/dri/renderDN`.
    pub fn is_gpu_node_name(name: &str, dri: bool) -> bool {
        match dri {
            false => nvidia::is_node_name(name),
            true => drm::is_node_name(name),
        }
    }

    /// Whether a char device `/dev/<name>` (or `/dev/dri/<name>`, `dri` true) of major `major`
    /// is a GPU node to ask about.
    pub fn is_gpu_node(name: &str, dri: bool, major: i64) -> bool {
        match dri {
            false => nvidia::is_node(name, major),
            true => drm::is_node(name, major),
        }
    }
}
