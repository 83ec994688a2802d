//! The cgroup CPU quota (STUB: to be written).

use std::path::Path;

use crate::error::Result;
use crate::fsutil::Process;

/// The tightest CPU quota over `proc`'s cgroup and all its ancestors, on every hierarchy (v1 and v2), in CPUs; `None` when no level sets one.
pub fn cgroup_cpu_quota(root: &Path, proc: Process) -> Result<Option<f64>> {
    let _ = (root, proc);
    todo!("H1")
}
