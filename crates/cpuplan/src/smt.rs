//! SMT siblings from sysfs (STUB: to be written).

use std::path::Path;

use crate::cpuset::CpuSet;
use crate::error::Result;

/// The hardware threads of `cpu`'s core, `cpu` included: `thread_siblings_list`, else `core_cpus_list`, else just `{cpu}`.
pub fn smt_siblings(root: &Path, cpu: usize) -> Result<CpuSet> {
    let _ = (root, cpu);
    todo!("H2")
}
