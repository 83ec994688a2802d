//! Locating a process's cgroup directories under a root (STUB: to be written).

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::fsutil::Process;

/// cgroup v1 or v2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    /// A v1 hierarchy (one or more named controllers).
    V1,
    /// The unified v2 hierarchy.
    V2,
}

/// One hierarchy a process belongs to, translated to directories under the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupDir {
    /// v1 or v2.
    pub version: CgroupVersion,
    /// v1 controllers of the hierarchy (empty for v2).
    pub controllers: Vec<String>,
    /// The hierarchy's mount point, under the root.
    pub mount: PathBuf,
    /// The process's cgroup directory, under the root (at or below `mount`).
    pub dir: PathBuf,
}

/// Every hierarchy of `proc` that can be translated to a directory under `root`.
pub fn cgroup_dirs(root: &Path, proc: Process) -> Result<Vec<CgroupDir>> {
    let _ = (root, proc);
    todo!("H1")
}

/// The directory where `controller` (e.g. `cpuset`) governs `proc`: the v1 hierarchy naming it, else v2 where its parent's `cgroup.subtree_control` enables it.
pub fn controller_dir(root: &Path, proc: Process, controller: &str) -> Result<Option<CgroupDir>> {
    let _ = (root, proc, controller);
    todo!("H1")
}
