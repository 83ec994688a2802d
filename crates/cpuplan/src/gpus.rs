//! The host's GPUs from sysfs (STUB: to be written).

use std::path::Path;

use serde::Serialize;

use crate::cpuset::CpuSet;
use crate::error::Result;

/// One of the host's GPUs as sysfs lists it: its PCI address, NUMA node and local CPUs (`None` where sysfs doesn't say).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostGpu {
    /// PCI address, e.g. `0000:2a:00.0`.
    pub address: String,
    /// NUMA node; `None` for `-1` or no file.
    pub node: Option<u32>,
    /// Local CPUs; `None` where sysfs doesn't say.
    pub local: Option<CpuSet>,
}

/// The host's GPUs in PCI address order: the functions under `<root>/sys/bus/pci/devices` with the vendor and class of the device at `like`.
pub fn host_gpus(root: &Path, like: &str) -> Result<Vec<HostGpu>> {
    let _ = (root, like);
    todo!("H2")
}
