//! Writing the container's own cgroup cpuset, and nothing else.

use std::io::Write;
use std::path::{Path, PathBuf};

use cpuplan::{CgroupDir, Cgroups, CpuSet};

use super::identity::own_cgroup;

/// Why the cpuset was not written.
#[derive(Debug, thiserror::Error)]
pub enum CpusetError {
    /// The container's cgroup could not be found.
    #[error("cannot find the cpuset cgroup of pid {pid}: {source}")]
    Find {
        /// The pid.
        pid: u32,
        /// The cause.
        source: cpuplan::Error,
    },
    /// The cgroup found is not the container's own.
    #[error("refusing to write {}: it {why}", dir.display())]
    NotOwn {
        /// The directory found.
        dir: PathBuf,
        /// Why it is not the container's.
        why: String,
    },
    /// The write was refused (read-only cgroupfs, rootless, cpus outside the parent's).
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

impl CpusetError {
    /// Whether the kernel refused the write for want of permission (rootless, read-only cgroups).
    pub fn is_refusal(&self) -> bool {
        match self {
            CpusetError::Write { source, .. } => matches!(
                source.raw_os_error(),
                Some(nix::libc::EPERM) | Some(nix::libc::EACCES) | Some(nix::libc::EROFS)
            ),
            _ => false,
        }
    }
}

/// What happened to the cpuset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpusetWrite {
    /// Written to `path` (a `cpuset.cpus`), which held `was` before: [`restore_cpuset`] puts it back.
    Written {
        /// The file written.
        path: PathBuf,
        /// Its content before the write.
        was: String,
    },
    /// The host has no cpuset controller for the container.
    NoController,
}

/// Checks that `found` is container `id`'s own cgroup: below its hierarchy's root, and where
/// its `linux.cgroupsPath` (or, without one, its id) says ([`own_cgroup`]).
pub fn check_own(
    found: &CgroupDir,
    cgroups_path: Option<&str>,
    id: &str,
) -> Result<(), CpusetError> {
    own_cgroup(found, cgroups_path, id).map_err(|why| CpusetError::NotOwn {
        dir: found.dir.clone(),
        why,
    })
}

/// Writes `cpus` as `cpuset.cpus` of pid's own cpuset cgroup (container `id`'s), found among its hierarchies `cgroups`.
pub fn write_cpuset(
    cgroups: &Cgroups,
    pid: u32,
    cpus: &CpuSet,
    cgroups_path: Option<&str>,
    id: &str,
) -> Result<CpusetWrite, CpusetError> {
    let found = cgroups
        .controller("cpuset")
        .map_err(|source| CpusetError::Find { pid, source })?;
    let Some(found) = found else {
        return Ok(CpusetWrite::NoController);
    };
    check_own(&found, cgroups_path, id)?;
    let path = found.dir.join("cpuset.cpus");
    let was = cpuplan::read_file(&path, MAX_CPUSET_FILE).map_err(|source| CpusetError::Write {
        path: path.clone(),
        source,
    })?;
    let was = String::from_utf8_lossy(&was).trim().to_string();
    put(&path, &cpus.to_string())?;
    Ok(CpusetWrite::Written { path, was })
}

/// Writes `was` (what [`write_cpuset`] found) back to `path`, undoing the narrowing when a
/// later stage fails; an empty `was` (a v2 cpuset that inherits) is written as an empty line.
pub fn restore_cpuset(path: &Path, was: &str) -> Result<(), CpusetError> {
    put(path, if was.is_empty() { "\n" } else { was })
}

/// The most bytes of a `cpuset.cpus` read (a list of every CPU of a large host fits).
const MAX_CPUSET_FILE: usize = 64 << 10;

/// Writes `text` to the cgroup file `path`: never through a link, never blocking.
fn put(path: &Path, text: &str) -> Result<(), CpusetError> {
    let err = |source| CpusetError::Write {
        path: path.to_path_buf(),
        source,
    };
    use nix::libc::{O_NOFOLLOW, O_NONBLOCK, O_WRONLY};
    let mut f = cpuplan::open(path, O_WRONLY | O_NOFOLLOW | O_NONBLOCK, 0).map_err(err)?;
    f.write_all(text.as_bytes()).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cpuplan::CgroupVersion;

    fn dir(mount: &str, dir: &str) -> CgroupDir {
        CgroupDir {
            version: CgroupVersion::V1,
            controllers: vec!["cpuset".into()],
            mount: PathBuf::from(mount),
            dir: PathBuf::from(dir),
        }
    }

    #[test]
    fn only_the_containers_own_cgroup() {
        let m = "/sys/fs/cgroup/cpuset";
        assert!(check_own(&dir(m, "/sys/fs/cgroup/cpuset/ctr1"), Some("/ctr1"), "c").is_ok());
        assert!(check_own(
            &dir(m, "/sys/fs/cgroup/cpuset/pod/ctr1"),
            Some("/pod/ctr1"),
            "c"
        )
        .is_ok());
        assert!(check_own(
            &dir(m, "/sys/fs/cgroup/cpuset/system.slice/cri-ctr1.scope"),
            Some("system.slice:cri:ctr1"),
            "ctr1"
        )
        .is_ok());
        let e = check_own(
            &dir(m, "/sys/fs/cgroup/cpuset/system.slice/foo.service"),
            Some("system.slice:cri:ctr1"),
            "ctr1",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("refusing to write") && e.contains("system.slice:cri:ctr1"),
            "{e}"
        );
        assert!(check_own(&dir(m, m), None, "c")
            .unwrap_err()
            .to_string()
            .contains("root cgroup"));
        assert!(check_own(&dir(m, "/sys/fs/cgroup/cpuset/other"), Some("/ctr1"), "c").is_err());
        assert!(check_own(&dir(m, "/elsewhere/ctr1"), None, "ctr1").is_err());
    }
}
