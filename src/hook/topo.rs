//! The host topology as one hook run sees it: GPUs read once, siblings read on demand.

use std::path::{Path, PathBuf};

use cpuplan::{CpuSet, HostGpu, Topology};

/// A [`Topology`] whose GPU list was read once (by the cpuset rule) and is reused by the plan.
pub struct HookTopology {
    root: PathBuf,
    gpus: Vec<HostGpu>,
}

impl HookTopology {
    /// The host under `root`, with its GPUs like `like` (none when `like` is `None`).
    pub fn read(root: &Path, like: Option<&str>) -> Result<Self, cpuplan::Error> {
        let gpus = match like {
            Some(like) => cpuplan::host_gpus(root, like)?,
            None => Vec::new(),
        };
        Ok(HookTopology {
            root: root.to_path_buf(),
            gpus,
        })
    }

    /// The host's GPUs read.
    pub fn gpus(&self) -> &[HostGpu] {
        &self.gpus
    }
}

impl Topology for HookTopology {
    fn smt_siblings(&self, cpu: usize) -> cpuplan::Result<CpuSet> {
        cpuplan::smt_siblings(&self.root, cpu)
    }

    fn host_gpus(&self, like: &str) -> cpuplan::Result<Vec<HostGpu>> {
        if self.gpus.iter().any(|g| g.address == like) {
            Ok(self.gpus.clone())
        } else {
            cpuplan::host_gpus(&self.root, like)
        }
    }
}
