//! Whether the pid a runtime's state names is the container's init: it must sit in the cgroup
//! the container's `linux.cgroupsPath` names.
//!
//! The mount-namespace check of [`crate::apply::below::open_rootfs`] refuses a pid in the hook's
//! own mount namespace, but a host process with a private one (a systemd service with
//! `PrivateTmp`, anything started by `unshare -m`) passes it: an exited container's pid reused
//! by such a process would get the container's cpuset, claim and files. Its cgroup gives it
//! away: a container runs in the cgroup its runtime made from `linux.cgroupsPath`.
//!
//! The pid's cgroup path below its hierarchy's root must end with what the spec names:
//! - a path (`/a/b`, or relative `a/b`, cleaned of `.` and `..` as runc cleans it): `…/a/b`;
//! - systemd form `slice:prefix:name`: `…/a.slice/a-b.slice/prefix-name.scope` for slice
//!   `a-b.slice`, nested as runc's systemd driver expands it (`system.slice` for an empty
//!   slice, `-.slice` for the root; a `name` ending in `.slice` is the unit itself), or the
//!   literal `…/slice:prefix:name` where a cgroupfs driver takes the string as a path;
//! - none: the leaf is named for the container id (`…/<id>`, runc's and crun's cgroupfs
//!   default) or is its scope (`…/<prefix>-<id>.scope`, the systemd drivers' default).
//!
//! The runtime may put the container's processes one level below that cgroup: crun's systemd
//! driver makes the scope and moves them into its `container` child (another name where the
//! `run.oci.systemd.subgroup` annotation asks), podman with `--cgroup-manager=systemd` likewise
//! (`/machine.slice/libpod-<id>.scope/container`). The pid's cgroup, read by the hook from
//! `/proc/<pid>/cgroup` in the host's cgroup namespace, is where the runtime put it: at
//! createRuntime the container's own code has not run yet and cannot have moved it. So the
//! named cgroup or a direct child of it is the container's ([`own_cgroup`]), under the cgroupfs
//! and systemd drivers alike; the cpuset is written to the pid's own (the leaf, where it takes
//! effect).
//!
//! The hierarchies checked are those the hook reads and writes: the v1 ones holding `cpuset`
//! or `cpu`, else the unified (v2) one. A pid whose cgroups were not read cannot be checked,
//! and is refused too.

use std::path::{Path, PathBuf};

use cpuplan::{CgroupDir, CgroupVersion, Cgroups};

/// Why the pid is not taken for the container's init: nothing is written for it.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The pid's cgroups were not read, so where it sits is unknown.
    #[error("pid {pid}: its cgroups were not read, so it cannot be told to be the container's init; writing nothing")]
    NoCgroup {
        /// The pid.
        pid: u32,
    },
    /// The pid sits in a cgroup that is not the container's.
    #[error("pid {pid} is not the container's init: its cgroup {} {why}; writing nothing", dir.display())]
    Elsewhere {
        /// The pid.
        pid: u32,
        /// Its cgroup directory that does not match.
        dir: PathBuf,
        /// What it should have been.
        why: String,
    },
}

/// Checks that `pid`, whose cgroups are `cgroups`, sits in container `id`'s own cgroup as `cgroups_path` names it.
pub fn check_pid(
    cgroups: &Cgroups,
    pid: u32,
    cgroups_path: Option<&str>,
    id: &str,
) -> Result<(), IdentityError> {
    let mut dirs: Vec<&CgroupDir> = cgroups
        .dirs()
        .iter()
        .filter(|d| d.has_v1_controller("cpuset") || d.has_v1_controller("cpu"))
        .collect();
    if dirs.is_empty() {
        dirs = cgroups
            .dirs()
            .iter()
            .filter(|d| d.version == CgroupVersion::V2)
            .collect();
    }
    if dirs.is_empty() {
        return Err(IdentityError::NoCgroup { pid });
    }
    for d in dirs {
        own_cgroup(d, cgroups_path, id).map_err(|why| IdentityError::Elsewhere {
            pid,
            dir: d.dir.clone(),
            why,
        })?;
    }
    Ok(())
}

/// Whether `found` is container `id`'s own cgroup as `cgroups_path` names it; else why not.
pub fn own_cgroup(found: &CgroupDir, cgroups_path: Option<&str>, id: &str) -> Result<(), String> {
    let rel = found
        .dir
        .strip_prefix(&found.mount)
        .map_err(|_| "is not under its hierarchy's mount point".to_string())?;
    if rel.as_os_str().is_empty() {
        return Err("is the hierarchy's root cgroup, shared by the whole host".into());
    }
    // The pid's cgroup itself, or its parent when the runtime made a child for the processes.
    let candidates = [
        Some(rel),
        rel.parent().filter(|p| !p.as_os_str().is_empty()),
    ];
    let candidates = candidates.iter().flatten();
    match cgroups_path.filter(|p| !p.is_empty()) {
        Some(cg) => {
            let tails = named_tails(cg);
            if candidates
                .clone()
                .any(|c| tails.iter().any(|t| c.ends_with(t)))
            {
                Ok(())
            } else {
                let want: Vec<String> =
                    tails.iter().map(|t| format!("…/{}", t.display())).collect();
                Err(format!(
                    "is not the one the config's cgroupsPath {cg:?} names ({}), nor a child of it",
                    want.join(" or ")
                ))
            }
        }
        None => {
            let named = |c: &Path| {
                let leaf = c.file_name().and_then(|l| l.to_str()).unwrap_or("");
                leaf == id || leaf.ends_with(&format!("-{id}.scope"))
            };
            if candidates.into_iter().any(|c| named(c)) {
                Ok(())
            } else {
                Err(format!(
                    "is not named for container {id:?} (…/{id} or …/<prefix>-{id}.scope, or a child of one), and the config names no cgroupsPath"
                ))
            }
        }
    }
}

/// The cgroup paths (relative, to match the end of the pid's) that `cgroups_path` may name.
pub fn named_tails(cgroups_path: &str) -> Vec<PathBuf> {
    cpuplan::cgroups_path_names(cgroups_path)
        .into_iter()
        .map(PathBuf::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn dir(version: CgroupVersion, controllers: &[&str], mount: &str, rel: &str) -> CgroupDir {
        CgroupDir {
            version,
            controllers: controllers.iter().map(|c| c.to_string()).collect(),
            mount: PathBuf::from(mount),
            dir: Path::new(mount).join(rel),
        }
    }

    fn v1(rel: &str) -> CgroupDir {
        dir(CgroupVersion::V1, &["cpuset"], "/sys/fs/cgroup/cpuset", rel)
    }

    #[test]
    fn the_pid_must_sit_where_the_spec_says() {
        let ok = |rel: &str, cg: Option<&str>, id: &str| own_cgroup(&v1(rel), cg, id);
        assert!(ok("ctr1", Some("/ctr1"), "x").is_ok());
        assert!(ok("pod/ctr1", Some("/pod/ctr1"), "x").is_ok());
        assert!(ok("outer/pod/ctr1", Some("pod/ctr1"), "x").is_ok());
        assert!(ok("pod/ctr1", Some("/ctr1"), "x").is_ok());
        assert!(ok("xctr1", Some("/ctr1"), "x").is_err(), "whole components");
        // The runtime's child of the container's cgroup (crun's `container`), not deeper.
        assert!(ok("ctr1/container", Some("/ctr1"), "x").is_ok());
        assert!(ok("ctr1/a/b", Some("/ctr1"), "x").is_err());
        assert!(ok("other/sub", Some("/ctr1"), "x").is_err());
        let crun = "system.slice/cpuplan-x.scope/container";
        assert!(ok(crun, Some("system.slice:cpuplan:x"), "x").is_ok());
        let podman = "machine.slice/libpod-ab12.scope/container";
        assert!(ok(podman, Some("machine.slice:libpod:ab12"), "ab12").is_ok());
        let e = ok(
            "system.slice/foo.service/container",
            Some("system.slice:cpuplan:x"),
            "x",
        )
        .unwrap_err();
        assert!(e.contains("nor a child of it"), "{e}");
        assert!(ok(
            "system.slice/cpuplan-x.scope/container/x",
            Some("system.slice:cpuplan:x"),
            "x"
        )
        .is_err());
        let sd = "kubepods-besteffort-pod1.slice:cri-containerd:c1";
        let sd_dir =
            "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/cri-containerd-c1.scope";
        assert!(ok(sd_dir, Some(sd), "c1").is_ok());
        assert!(
            ok(sd, Some(sd), "c1").is_ok(),
            "cgroupfs takes it literally"
        );
        let e = ok("system.slice/foo.service", Some(sd), "c1").unwrap_err();
        assert!(
            e.contains(sd) && e.contains("cri-containerd-c1.scope"),
            "{e}"
        );
        // No cgroupsPath: named for the id.
        assert!(ok("c1", None, "c1").is_ok());
        assert!(ok("runc-parent/c1", Some(""), "c1").is_ok());
        assert!(ok("system.slice/runc-c1.scope", None, "c1").is_ok());
        assert!(ok("machine.slice/crun-c1.scope/container", None, "c1").is_ok());
        assert!(ok("c1/container", None, "c1").is_ok());
        assert!(ok("c1/a/b", None, "c1").is_err());
        let e = ok("system.slice/foo.service", None, "c1").unwrap_err();
        assert!(e.contains("\"c1\""), "{e}");
        // The root cgroup is nobody's own.
        let e = own_cgroup(&v1(""), Some("/"), "c1").unwrap_err();
        assert!(e.contains("root cgroup"), "{e}");
        let outside = CgroupDir {
            dir: "/elsewhere/c1".into(),
            ..v1("c1")
        };
        assert!(own_cgroup(&outside, None, "c1").is_err());
    }

    #[test]
    fn the_hierarchies_checked() {
        let cpu = |rel: &str| dir(CgroupVersion::V1, &["cpu", "cpuacct"], "/m/cpu", rel);
        let mem = |rel: &str| dir(CgroupVersion::V1, &["memory"], "/m/memory", rel);
        let v2 = |rel: &str| dir(CgroupVersion::V2, &[], "/m/unified", rel);
        let check = |dirs: Vec<CgroupDir>| check_pid(&Cgroups::from_dirs(dirs), 7, Some("/c"), "c");
        assert!(check(vec![v1("c"), cpu("c"), mem("other"), v2("")]).is_ok());
        let e = check(vec![v1("c"), cpu("svc"), v2("c")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("pid 7") && e.contains("/m/cpu/svc"), "{e}");
        assert!(check(vec![mem("x"), v2("c")]).is_ok(), "v2 when no v1 cpu");
        assert!(check(vec![mem("c"), v2("x")]).is_err());
        let e = check(vec![]).unwrap_err().to_string();
        assert!(e.contains("not read"), "{e}");
    }
}
