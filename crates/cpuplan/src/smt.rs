//! SMT siblings from sysfs: the hardware threads that share one CPU's core.

use std::path::{Path, PathBuf};

use crate::cpuset::{CpuSet, MAX_CPU};
use crate::error::{Error, Result};
use crate::fsutil::{read_cpu_list_optional, under};

/// `<root>/sys/devices/system/cpu/cpu<cpu>/topology`, where a CPU's sibling lists live.
pub fn topology_dir(root: &Path, cpu: usize) -> PathBuf {
    under(root, format!("/sys/devices/system/cpu/cpu{cpu}/topology"))
}

/// The hardware threads of `cpu`'s core, `cpu` included: `thread_siblings_list`, else `core_cpus_list`, else just `{cpu}`.
pub fn smt_siblings(root: &Path, cpu: usize) -> Result<CpuSet> {
    let dir = topology_dir(root, cpu);
    if cpu > MAX_CPU {
        return Err(Error::malformed(
            dir,
            format!("cpu id past the highest id {MAX_CPU}"),
            cpu.to_string(),
        ));
    }
    let listed = match read_cpu_list_optional(&dir.join("thread_siblings_list"))? {
        Some(set) => Some(set),
        None => read_cpu_list_optional(&dir.join("core_cpus_list"))?,
    };
    let mut set = listed.unwrap_or_default();
    set.insert(cpu);
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpuset::parse_cpu_list;

    fn write(root: &Path, cpu: usize, file: &str, text: &str) {
        let dir = topology_dir(root, cpu);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(file), text).unwrap();
    }

    #[test]
    fn prefers_thread_siblings_list() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), 3, "thread_siblings_list", "3,115\n");
        write(d.path(), 3, "core_cpus_list", "3\n");
        assert_eq!(
            smt_siblings(d.path(), 3).unwrap(),
            parse_cpu_list("3,115").unwrap()
        );
    }

    #[test]
    fn falls_back_to_core_cpus_list_then_the_cpu() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), 1, "core_cpus_list", "0-1\n");
        assert_eq!(
            smt_siblings(d.path(), 1).unwrap(),
            parse_cpu_list("0-1").unwrap()
        );
        assert_eq!(
            smt_siblings(d.path(), 9).unwrap(),
            parse_cpu_list("9").unwrap()
        );
    }

    #[test]
    fn always_holds_the_cpu_itself() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), 2, "thread_siblings_list", "\n");
        assert_eq!(
            smt_siblings(d.path(), 2).unwrap(),
            parse_cpu_list("2").unwrap()
        );
    }

    #[test]
    fn a_bad_list_names_the_file_and_quotes_it() {
        let d = tempfile::tempdir().unwrap();
        write(d.path(), 0, "thread_siblings_list", "0-x\n");
        let msg = smt_siblings(d.path(), 0).unwrap_err().to_string();
        assert!(msg.contains("cpu0/topology/thread_siblings_list"), "{msg}");
        assert!(msg.contains("0-x"), "{msg}");
    }

    #[test]
    fn a_cpu_past_the_limit_is_an_error() {
        let d = tempfile::tempdir().unwrap();
        let msg = smt_siblings(d.path(), MAX_CPU + 1).unwrap_err().to_string();
        assert!(msg.contains("8192"), "{msg}");
    }
}
