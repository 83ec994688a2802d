//! The process mask and the usable CPU count (STUB: to be written).

use std::path::Path;

use crate::cpuset::CpuSet;
use crate::error::Result;
use crate::fsutil::Process;

/// The CPUs `proc` may run on: `sched_getaffinity` for the current process, `Cpus_allowed_list` of `<root>/proc/<pid>/status` for another.
pub fn process_mask(root: &Path, proc: Process) -> Result<CpuSet> {
    let _ = (root, proc);
    todo!("H1")
}

/// min(|mask|, floor(quota)), at least 1.
pub fn usable_cpus(mask: &CpuSet, quota: Option<f64>) -> usize {
    let _ = (mask, quota);
    todo!("H1")
}
