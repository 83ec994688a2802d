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

pub use char_dev::{char_device_pci, CharDevice};
pub use error::DeviceError;
pub use nvidia_info::{
    nvidia_gpu_addresses, nvidia_gpus, parse_information, NvidiaGpu, NVIDIA_GPUS_DIR,
};
pub use resolve::{container_gpus, NVIDIA_MAJOR};
pub use visible::{parse_visible_devices, DeviceId, VisibleDevices, VISIBLE_DEVICES};
