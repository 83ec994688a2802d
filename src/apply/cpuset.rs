//! Writing the container's own cgroup cpuset, and nothing else; under the systemd driver also
//! its unit's `AllowedCPUs` ([`super::unit`]), where systemd keeps it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cpuplan::{CgroupDir, Cgroups, CpuSet};

use super::identity::own_cgroup;
use super::unit::{set_allowed_cpus, unit_cpus_now, unit_of, UnitOf, UNIT_TIMEOUT};

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
    /// Written: [`restore_cpuset`] puts it back.
    Written(Narrowed),
    /// The host has no cpuset controller for the container.
    NoController,
}

/// A cpuset written: where, what it was, and what became of the systemd unit's property.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Narrowed {
    /// The file written (the pid's own cgroup's `cpuset.cpus`).
    pub path: PathBuf,
    /// Its content before the write.
    pub was: String,
    /// The container's systemd unit's `AllowedCPUs`.
    pub unit: UnitSet,
    /// The D-Bus address systemd was called on.
    pub bus: String,
}

/// What became of the container's systemd unit's `AllowedCPUs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnitSet {
    /// Not under the systemd driver: the cgroup file is where the cpuset lives.
    NotSystemd,
    /// The spec names `unit`, but the container's cgroup is not that unit's (`why`): systemd
    /// was not called, the cgroup file alone holds the narrowing.
    NotOwn {
        /// The unit the spec names.
        unit: String,
        /// Why, naming the cgroups.
        why: String,
    },
    /// Set on `unit`, whose own `cpuset.cpus` held `was`; the call took `took`.
    Set {
        /// The unit.
        unit: String,
        /// The unit's CPUs before (empty: inherited).
        was: String,
        /// How long systemd took.
        took: Duration,
    },
    /// The call failed (`why`): the cgroup file alone holds the narrowing, until systemd
    /// next re-applies the unit's properties.
    Failed {
        /// The unit.
        unit: String,
        /// Why, in one line.
        why: String,
    },
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

/// Writes `cpus` as `cpuset.cpus` of pid's own cpuset cgroup (container `id`'s), found among
/// its hierarchies `cgroups`; under the systemd driver also as its unit's `AllowedCPUs`, through
/// systemd on the D-Bus address `bus` ([`super::unit::system_bus`]), waiting for it at most
/// `unit_wait` (and never over [`UNIT_TIMEOUT`]).
pub fn write_cpuset(
    cgroups: &Cgroups,
    pid: u32,
    cpus: &CpuSet,
    (cgroups_path, id): (Option<&str>, &str),
    (bus, unit_wait): (&str, Duration),
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
    // The unit's own CPUs as they were, read before the write (under runc the unit's cgroup is
    // the one written).
    let unit_of = unit_of(&found, cgroups_path);
    let unit_was = match &unit_of {
        UnitOf::Own(unit) => unit_cpus_now(unit),
        _ => String::new(),
    };
    put(&path, &cpus.to_string())?;
    let unit = match unit_of {
        UnitOf::NotSystemd => UnitSet::NotSystemd,
        UnitOf::NotOwn { unit, why } => UnitSet::NotOwn { unit, why },
        UnitOf::Own(unit) => {
            match set_allowed_cpus(bus, &unit.name, cpus, unit_wait.min(UNIT_TIMEOUT)) {
                Ok(took) => UnitSet::Set {
                    unit: unit.name,
                    was: unit_was,
                    took,
                },
                Err(e) => UnitSet::Failed {
                    unit: unit.name,
                    why: e.to_string(),
                },
            }
        }
    };
    Ok(CpusetWrite::Written(Narrowed {
        path,
        was,
        unit,
        bus: bus.to_string(),
    }))
}

/// Puts back what [`write_cpuset`] changed, undoing the narrowing when a later stage fails:
/// the file's old content (an empty one, a v2 cpuset that inherits, as an empty line), and the
/// unit's `AllowedCPUs` where it was set (the container's own unit, no other), waiting for
/// systemd at most `unit_wait` (and never over [`UNIT_TIMEOUT`]).
pub fn restore_cpuset(narrowed: &Narrowed, unit_wait: Duration) -> Result<(), CpusetError> {
    let was = narrowed.was.as_str();
    put(&narrowed.path, if was.is_empty() { "\n" } else { was })?;
    if let UnitSet::Set { unit, was, .. } = &narrowed.unit {
        // What the unit had: its CPUs as the file showed them (none: inherited, cleared).
        let cpus = was.parse::<CpuSet>().unwrap_or_default();
        let wait = unit_wait.min(UNIT_TIMEOUT);
        if let Err(e) = set_allowed_cpus(&narrowed.bus, unit, &cpus, wait) {
            log::warn!("cannot put the unit's AllowedCPUs back: {e}");
        }
    }
    Ok(())
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
