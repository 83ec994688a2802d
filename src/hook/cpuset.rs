//! Writing the container's own cgroup cpuset, and nothing else.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use cpuplan::{CgroupDir, Cgroups, CpuSet};

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
    #[error("refusing to write {}: {why}", dir.display())]
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
    /// Written to this `cpuset.cpus`.
    Written(PathBuf),
    /// The host has no cpuset controller for the container.
    NoController,
}

/// Checks that `found` is the container's own cgroup: below its hierarchy's root, and (for a
/// path-form `linux.cgroupsPath`) ending in that path.
pub fn check_own(found: &CgroupDir, cgroups_path: Option<&str>) -> Result<(), CpusetError> {
    let not_own = |why: String| CpusetError::NotOwn {
        dir: found.dir.clone(),
        why,
    };
    let rel = found
        .dir
        .strip_prefix(&found.mount)
        .map_err(|_| not_own("not under its hierarchy's mount point".into()))?;
    if rel.as_os_str().is_empty() {
        return Err(not_own(
            "it is the hierarchy's root cgroup, shared by the whole host".into(),
        ));
    }
    if let Some(cg) = cgroups_path.filter(|p| p.starts_with('/')) {
        let want = Path::new(cg.trim_start_matches('/'));
        if !rel.ends_with(want) {
            return Err(not_own(format!("the config's cgroupsPath is {cg:?}")));
        }
    }
    Ok(())
}

/// Writes `cpus` as `cpuset.cpus` of pid's own cpuset cgroup, found among its hierarchies `cgroups`.
pub fn write_cpuset(
    cgroups: &Cgroups,
    pid: u32,
    cpus: &CpuSet,
    cgroups_path: Option<&str>,
) -> Result<CpusetWrite, CpusetError> {
    let found = cgroups
        .controller("cpuset")
        .map_err(|source| CpusetError::Find { pid, source })?;
    let Some(found) = found else {
        return Ok(CpusetWrite::NoController);
    };
    check_own(&found, cgroups_path)?;
    let path = found.dir.join("cpuset.cpus");
    let err = |source| CpusetError::Write {
        path: path.clone(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&path)
        .map_err(err)?;
    f.write_all(cpus.to_string().as_bytes()).map_err(err)?;
    Ok(CpusetWrite::Written(path))
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
        assert!(check_own(&dir(m, "/sys/fs/cgroup/cpuset/ctr1"), Some("/ctr1")).is_ok());
        assert!(check_own(&dir(m, "/sys/fs/cgroup/cpuset/pod/ctr1"), Some("/pod/ctr1")).is_ok());
        assert!(check_own(
            &dir(m, "/sys/fs/cgroup/cpuset/ctr1"),
            Some("system.slice:cri:ctr1")
        )
        .is_ok());
        assert!(check_own(&dir(m, m), None)
            .unwrap_err()
            .to_string()
            .contains("root cgroup"));
        assert!(check_own(&dir(m, "/sys/fs/cgroup/cpuset/other"), Some("/ctr1")).is_err());
        assert!(check_own(&dir(m, "/elsewhere/ctr1"), None).is_err());
    }
}
