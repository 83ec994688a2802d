//! Which GPUs a container has: its `linux.devices` char devices and `NVIDIA_VISIBLE_DEVICES`.
//!
//! Every GPU that anything names is counted once, as a PCI address, and the container's
//! GPUs come in PCI address order (the worker order). NVIDIA devices (major 195) map to
//! GPUs through `/proc/driver/nvidia/gpus/<pci>/information`; any other char device through
//! `/sys/dev/char/MAJ:MIN/device`. Every host file is read under a topology root (`/` on a
//! real host), so tests point it at a fixture tree.

mod char_dev;
mod error;
mod nvidia_info;
mod resolve;
mod visible;

pub use char_dev::{char_device_function, char_device_pci, PciFunction};
pub use error::DeviceError;
pub use nvidia_info::{
    nvidia_gpu_addresses, nvidia_gpus, parse_information, NvidiaGpu, NVIDIA_GPUS_DIR,
};
pub use resolve::{container_gpus, container_gpus_cached, DriverCache, Found, NVIDIA_MAJOR};
pub use visible::{parse_visible_devices, DeviceId, VisibleDevices, VISIBLE_DEVICES};

/// What names a GPU as the container's: the operator's spec, the runtime's device nodes, or the container's own environment.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Deserialize, serde::Serialize,
)]
#[serde(rename_all = "lowercase")]
pub enum GpuSource {
    /// A `linux.devices` char device that resolves to the GPU.
    Devices,
    /// A GPU device node (`/dev/nvidiaN`) present in the container's `/dev`.
    Nodes,
    /// `NVIDIA_VISIBLE_DEVICES` in the container's environment.
    Env,
    /// A GPU device node in the container's `/dev` that is not the runtime's (a `/dev` or a node
    /// the container's mounts or image put there: [`crate::read::nodes`]). No `gpu_sources` can
    /// name it, so it is never trusted.
    #[serde(skip)]
    TenantNode,
}

impl std::fmt::Display for GpuSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GpuSource::Devices => "linux.devices",
            GpuSource::Nodes => "device node",
            GpuSource::Env => VISIBLE_DEVICES,
            GpuSource::TenantNode => {
                "a device node the container's mounts or image put in its /dev"
            }
        })
    }
}

/// One of the container's GPUs: its PCI address and what named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// PCI address, lowercase `0000:2a:00.0`.
    pub address: String,
    /// Every source that names it, in [`GpuSource`] order.
    pub sources: Vec<GpuSource>,
}
