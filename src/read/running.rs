//! A running container as it is now: the CPUs and quota its cgroup gives it (through its
//! init's pid), and the plan it was given (its `plan.json`, read inside its own root).
//!
//! The plan file is the container's, so it is read as untrusted: the container's root is
//! entered through `/proc/<pid>/root` (a pid in this process's own mount namespace is no
//! container's init and is refused), the plan directory's path is resolved below that root with
//! no symlink followed at all (`openat2(RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS)`), opened
//! non-blocking, and read through the planner crate's bounded reader (a FIFO, a device or a
//! file over [`MAX_PLAN`] bytes is an error, never a wait).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use cpuplan::{Cgroups, CpuSet, PlanFile, Process};
use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
use serde::Deserialize;

use super::host::Host;
use super::own;
use super::procroot::{open_proc_root, ProcRootError};

/// The most bytes of a running container's `plan.json` read.
pub const MAX_PLAN: usize = 1 << 20;

/// Why a running container's state or plan could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RunningError {
    /// The pid is gone, or shares this command's mount namespace: not a container's init.
    #[error(transparent)]
    ProcRoot(#[from] ProcRootError),
    /// Its cgroups, cpuset or quota cannot be read.
    #[error("pid {pid}: its cgroup: {source}")]
    Cgroup {
        /// The pid.
        pid: u32,
        /// The planner's error.
        #[source]
        source: cpuplan::Error,
    },
    /// The plan file cannot be opened or read (absent, a symlink on its path, a FIFO, too large).
    #[error("pid {pid}: {} in its root: {source}", path.display())]
    Plan {
        /// The pid.
        pid: u32,
        /// The file's path inside the container.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The plan file is not a plan.
    #[error("pid {pid}: {} in its root is not a plan: {source}", path.display())]
    PlanJson {
        /// The pid.
        pid: u32,
        /// The file's path inside the container.
        path: PathBuf,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
}

/// What a `plan.json` records of the inputs it was made from (the members compared here).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct RecordedInputs {
    /// The tightest quota when it was made, in CPUs (`null`: none).
    #[serde(default)]
    pub quota: Option<f64>,
    /// The cpuset cpuplan wrote, if any.
    #[serde(default)]
    pub cpuset: Option<CpuSet>,
}

/// A `plan.json` as read back: the planner's plan and what cpuplan recorded beside it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RecordedPlan {
    /// The plan.
    #[serde(flatten)]
    pub file: PlanFile,
    /// The container id it was written for.
    #[serde(default)]
    pub container: String,
    /// Its generation (0 in a file written before generations).
    #[serde(default)]
    pub generation: u64,
    /// The inputs recorded (absent in a plan not written by cpuplan's front ends).
    #[serde(default)]
    pub inputs: Option<RecordedInputs>,
    /// Each worker's CPUs where the NRI plugin places its processes (absent where none is).
    #[serde(default)]
    pub worker_placement: Option<Vec<Option<CpuSet>>>,
}

/// A running container now: its cgroup's CPUs and quota, and its plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Running {
    /// Its init's pid.
    pub pid: u32,
    /// The CPUs its cgroup lets it use now (the effective cpuset; the pid's affinity where no
    /// cpuset controller says).
    pub cpus: CpuSet,
    /// The tightest quota over its cgroup and every ancestor now, in CPUs.
    pub quota: Option<f64>,
    /// The plan it was given.
    pub plan: RecordedPlan,
    /// The plan file's JSON as it is.
    pub plan_json: serde_json::Value,
}

/// Reads running container `pid` on `host`: its cgroup now, and its plan, the `plan.json` at
/// `path` (a path inside the container).
pub fn read_running(host: &Host, pid: u32, path: &Path) -> Result<Running, RunningError> {
    let path = path.to_path_buf();
    let bytes = read_plan_bytes(&host.root, pid, &path)?;
    let json_err = |source| RunningError::PlanJson {
        pid,
        path: path.clone(),
        source,
    };
    let plan_json: serde_json::Value = serde_json::from_slice(&bytes).map_err(json_err)?;
    let plan: RecordedPlan = serde_json::from_value(plan_json.clone()).map_err(json_err)?;
    let cgroup = |source| RunningError::Cgroup { pid, source };
    let cgroups = Cgroups::of(&host.root, Process::Pid(pid)).map_err(cgroup)?;
    let quota = cgroups.quota().map_err(cgroup)?;
    let cpus = match cgroups.effective_cpus().map_err(cgroup)? {
        Some(cpus) => cpus,
        None => host.mask_of(pid).map_err(cgroup)?,
    };
    Ok(Running {
        pid,
        cpus,
        quota,
        plan,
        plan_json,
    })
}

/// The bytes of `path` (inside the container) below `<root>/proc/<pid>/root`, no link followed.
fn read_plan_bytes(root: &Path, pid: u32, path: &Path) -> Result<Vec<u8>, RunningError> {
    let rootfd = open_proc_root(root, pid)?;
    let rel = path.strip_prefix("/").unwrap_or(path);
    let how = OpenHow::new()
        .flags(OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
        .resolve(
            ResolveFlag::RESOLVE_IN_ROOT
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_MAGICLINKS,
        );
    let plan_err = |source| RunningError::Plan {
        pid,
        path: path.to_path_buf(),
        source,
    };
    let fd = openat2(rootfd.as_raw_fd(), rel, how)
        .map_err(|e| plan_err(std::io::Error::from_raw_os_error(e as i32)))?;
    let mut file = File::from(own(fd));
    cpuplan::read_opened(&mut file, MAX_PLAN).map_err(plan_err)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::HookConfig;
    use std::os::unix::fs::symlink;

    /// A fake root with pid 42 in its own mount namespace, a v1 cpuset and cpu hierarchy
    /// (cpuset `cpus`, quota `quota_us` per 100000) and a plan of mask 1, quota 1 in its root.
    pub(crate) fn fake(t: &Path, cpus: &str, quota_us: i64) -> Host {
        let root = t.join("root");
        let proc = root.join("proc");
        for d in ["self/ns", "42/ns", "42/root/run/cpuplan"] {
            std::fs::create_dir_all(proc.join(d)).unwrap();
        }
        symlink("mnt:[1]", proc.join("self/ns/mnt")).unwrap();
        symlink("mnt:[2]", proc.join("42/ns/mnt")).unwrap();
        std::fs::write(
            proc.join("self/mountinfo"),
            "30 1 0:26 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n\
             31 1 0:27 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n",
        )
        .unwrap();
        std::fs::write(proc.join("42/cgroup"), "3:cpuset:/c1\n2:cpu:/c1\n").unwrap();
        let cpuset = root.join("sys/fs/cgroup/cpuset/c1");
        let cpu = root.join("sys/fs/cgroup/cpu/c1");
        std::fs::create_dir_all(&cpuset).unwrap();
        std::fs::create_dir_all(&cpu).unwrap();
        std::fs::write(cpuset.join("cpuset.effective_cpus"), format!("{cpus}\n")).unwrap();
        std::fs::write(cpu.join("cpu.cfs_quota_us"), format!("{quota_us}\n")).unwrap();
        std::fs::write(cpu.join("cpu.cfs_period_us"), "100000\n").unwrap();
        let plan = serde_json::json!({
            "version": 1, "setting": "auto", "mask": "1", "usable": 1, "devices": [],
            "workers": [], "result": null, "pinned": "", "left": 1,
            "pools": {"preprocess_threads": 1, "png_threads": 1, "encode_workers": 1, "copy_workers": 1},
            "why": "test", "container": "c1", "generation": 1,
            "inputs": {"quota": 1.0, "cpuset": "1", "mask": "0-1"}
        });
        std::fs::write(
            proc.join("42/root/run/cpuplan/plan.json"),
            serde_json::to_vec(&plan).unwrap(),
        )
        .unwrap();
        Host::of(&HookConfig {
            root: root.clone(),
            topology_root: root,
            ..HookConfig::default()
        })
    }

    fn dir() -> &'static Path {
        Path::new("/run/cpuplan/plan.json")
    }

    #[test]
    fn reads_the_cgroup_now_and_the_plan_in_the_container_s_root() {
        let t = tempfile::tempdir().unwrap();
        let host = fake(t.path(), "0-1", 200000);
        let r = read_running(&host, 42, dir()).unwrap();
        assert_eq!(r.cpus.to_string(), "0-1");
        assert_eq!(r.quota, Some(2.0));
        assert_eq!(r.plan.file.mask.to_string(), "1");
        assert_eq!(r.plan.container, "c1");
        assert_eq!(r.plan.generation, 1);
        let inputs = r.plan.inputs.unwrap();
        assert_eq!(inputs.quota, Some(1.0));
        assert_eq!(inputs.cpuset.unwrap().to_string(), "1");
        assert_eq!(r.plan_json["why"], "test");
    }

    #[test]
    fn a_symlink_on_the_plan_s_path_is_never_followed() {
        let t = tempfile::tempdir().unwrap();
        let host = fake(t.path(), "1", 100000);
        let run = host.root.join("proc/42/root/run");
        // The plan directory a link to a host directory holding a plan: refused.
        let outside = t.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::rename(run.join("cpuplan"), outside.join("cpuplan")).unwrap();
        symlink(outside.join("cpuplan"), run.join("cpuplan")).unwrap();
        let e = read_running(&host, 42, dir()).unwrap_err();
        assert!(matches!(e, RunningError::Plan { .. }), "{e}");
        // plan.json itself a link, even one inside the container: refused.
        std::fs::remove_file(run.join("cpuplan")).unwrap();
        std::fs::create_dir_all(run.join("cpuplan")).unwrap();
        std::fs::rename(outside.join("cpuplan/plan.json"), run.join("real.json")).unwrap();
        symlink("../real.json", run.join("cpuplan/plan.json")).unwrap();
        let e = read_running(&host, 42, dir()).unwrap_err();
        assert!(matches!(e, RunningError::Plan { .. }), "{e}");
        assert!(e.to_string().contains("/run/cpuplan/plan.json"), "{e}");
    }

    #[test]
    fn a_fifo_for_a_plan_is_an_error_at_once() {
        let t = tempfile::tempdir().unwrap();
        let host = fake(t.path(), "1", 100000);
        let plan = host.root.join("proc/42/root/run/cpuplan/plan.json");
        std::fs::remove_file(&plan).unwrap();
        nix::unistd::mkfifo(&plan, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let start = std::time::Instant::now();
        let e = read_running(&host, 42, dir()).unwrap_err();
        assert!(start.elapsed() < std::time::Duration::from_secs(2));
        assert!(e.to_string().contains("FIFO"), "{e}");
    }

    #[test]
    fn a_pid_of_this_mount_namespace_or_a_gone_one_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let host = fake(t.path(), "1", 100000);
        let ns = host.root.join("proc/42/ns/mnt");
        std::fs::remove_file(&ns).unwrap();
        symlink("mnt:[1]", &ns).unwrap();
        let e = read_running(&host, 42, dir()).unwrap_err();
        assert!(
            matches!(e, RunningError::ProcRoot(ProcRootError::SameNamespace(42))),
            "{e}"
        );
        let e = read_running(&host, 43, dir()).unwrap_err();
        assert!(
            matches!(
                e,
                RunningError::ProcRoot(ProcRootError::Process { pid: 43, .. })
            ),
            "{e}"
        );
    }

    #[test]
    fn a_plan_that_is_not_one_names_its_path() {
        let t = tempfile::tempdir().unwrap();
        let host = fake(t.path(), "1", 100000);
        let plan = host.root.join("proc/42/root/run/cpuplan/plan.json");
        std::fs::write(&plan, "{\"version\": 1}").unwrap();
        let e = read_running(&host, 42, dir()).unwrap_err();
        assert!(matches!(e, RunningError::PlanJson { .. }), "{e}");
        assert!(e.to_string().contains("not a plan"), "{e}");
    }
}
