//! Where the planner learns the host's SMT siblings and GPUs: sysfs, or an in-memory snapshot (STUB).

use std::path::{Path, PathBuf};

use crate::cpuset::CpuSet;
use crate::error::Result;
use crate::gpus::HostGpu;

/// The host facts `deployment_plan` needs.
pub trait Topology {
    /// The hardware threads of `cpu`'s core, `cpu` included.
    fn smt_siblings(&self, cpu: usize) -> Result<CpuSet>;
    /// The host's GPUs like the device at `like`, in PCI address order.
    fn host_gpus(&self, like: &str) -> Result<Vec<HostGpu>>;
}

/// A [`Topology`] read from sysfs under a root.
#[derive(Debug, Clone)]
pub struct SysfsTopology {
    /// The host root (`/` on a real host).
    pub root: PathBuf,
}

impl SysfsTopology {
    /// Sysfs under `root`.
    pub fn new(root: &Path) -> Self {
        SysfsTopology {
            root: root.to_path_buf(),
        }
    }
}

/// A [`Topology`] held in memory.
#[derive(Debug, Clone, Default)]
pub struct StaticTopology {
    /// Siblings per cpu (a cpu not listed is its own core).
    pub siblings: Vec<CpuSet>,
    /// The host's GPUs, in address order.
    pub gpus: Vec<HostGpu>,
}

impl Topology for SysfsTopology {
    fn smt_siblings(&self, cpu: usize) -> Result<CpuSet> {
        crate::smt::smt_siblings(&self.root, cpu)
    }

    fn host_gpus(&self, like: &str) -> Result<Vec<HostGpu>> {
        crate::gpus::host_gpus(&self.root, like)
    }
}
