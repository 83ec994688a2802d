//! The one fake host of the tests that drive the hook as a library or a binary: a bundle
//! (config.json and an empty rootfs) and a hook config in a tempdir, optionally a planted host
//! root (/proc and cgroupfs) with the container's pid, and [`FakeRoot`] for roots planted
//! elsewhere. `spec` is always the bundle's config.json, `hook` always the hook config.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use cpuplan_hook::hook::{HookError, Report};
use serde_json::{json, Value};

/// The pid of the planted host's container init ([`FakeHost::new`]).
pub const PID: u32 = 4242;

/// The repo's fixture directory.
pub fn fixtures() -> PathBuf {
    crate::statics::workspace_root().join("tests/fixtures")
}

/// The hook's `run_hook` in this process, one run at a time: the hook's logger is the process's,
/// so two runs at once (two tests of one binary) would write each other's lines into each other's
/// logs. Every in-process run of the tests goes through here.
pub fn run_hook(
    stage: Option<&str>,
    input: impl std::io::Read,
    config: &Path,
) -> Result<Option<Report>, HookError> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    cpuplan_hook::hook::run_hook(stage, input, config)
}

/// A bundle and a hook config in one tempdir, with or without a planted host root.
pub struct FakeHost {
    /// Holds everything; removed on drop.
    pub dir: tempfile::TempDir,
    /// The bundle's config.json, written by [`FakeHost::write`].
    pub spec: Value,
    /// The hook config, written by [`FakeHost::write`].
    pub hook: Value,
    /// The container id of [`FakeHost::state`].
    pub id: &'static str,
    /// The status of [`FakeHost::state`].
    pub status: &'static str,
}

impl FakeHost {
    /// A planted host: under `root`, a container cgroup `/ctr` with a v1 quota of 8 CPUs and all
    /// 224 CPUs allowed, pid [`PID`] in it; the example 224-CPU 8-GPU host as topology;
    /// `step_thread_core: 2`.
    pub fn new() -> FakeHost {
        let mut h = FakeHost::with_hook(json!({"step_thread_core": "2"}), "ctr", "creating");
        let r = h.dir.path().join("root");
        let w = |p: &str, s: &str| {
            let p = r.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, s).unwrap();
        };
        w(
            "proc/self/mountinfo",
            "25 1 0:22 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n\
             30 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:10 - cgroup cgroup rw,cpu,cpuacct\n\
             31 25 0:27 / /sys/fs/cgroup/cpuset rw,relatime shared:11 - cgroup cgroup rw,cpuset\n",
        );
        w(
            &format!("proc/{PID}/cgroup"),
            "3:cpuset:/ctr\n2:cpu,cpuacct:/ctr\n0::/\n",
        );
        w(
            &format!("proc/{PID}/status"),
            "Name:\tsh\nCpus_allowed_list:\t0-223\n",
        );
        w(
            &format!("proc/{PID}/stat"),
            &format!(
                "{PID} (sh) S 1 {PID} {PID} 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 777 1000 100\n"
            ),
        );
        w("sys/fs/cgroup/cpu,cpuacct/ctr/cpu.cfs_quota_us", "800000\n");
        w(
            "sys/fs/cgroup/cpu,cpuacct/ctr/cpu.cfs_period_us",
            "100000\n",
        );
        w("sys/fs/cgroup/cpuset/ctr/cpuset.cpus", "0-223\n");
        std::fs::create_dir_all(r.join("proc/self/ns")).unwrap();
        symlink("mnt:[4026531840]", r.join("proc/self/ns/mnt")).unwrap();
        std::fs::create_dir_all(r.join(format!("proc/{PID}/ns"))).unwrap();
        symlink("mnt:[4026532999]", r.join(format!("proc/{PID}/ns/mnt"))).unwrap();
        symlink("/", r.join(format!("proc/{PID}/root"))).unwrap();
        h.hook["root"] = json!(r);
        h.hook["topology_root"] = json!(crate::statics::workspace_root().join("examples/host"));
        h
    }

    /// A bundle only (no planted root: tests plant a [`FakeRoot`] where they need one), its
    /// cgroup `/ctr`, the e2e fake GPU host as topology, `step_thread_core: off`.
    pub fn bundle_only() -> FakeHost {
        let mut h = FakeHost::with_hook(json!({"step_thread_core": "off"}), "h6-ctr", "created");
        h.hook["topology_root"] = json!(fixtures().join("e2e-host"));
        h
    }

    fn with_hook(mut hook: Value, id: &'static str, status: &'static str) -> FakeHost {
        // The claims directory is in it: a directory the hook takes as the operator's.
        let dir = crate::operator_dir::tempdir();
        std::fs::create_dir_all(dir.path().join("bundle/rootfs")).unwrap();
        let spec = json!({
            "ociVersion": "1.0.2",
            "root": {"path": "rootfs"},
            "process": {"cwd": "/", "args": ["sh"], "user": {"uid": 0, "gid": 0}, "env": ["PATH=/bin"]},
            "linux": {"cgroupsPath": "/ctr"}
        });
        crate::log_guard::mark_dir(dir.path());
        hook["claims_dir"] = json!(dir.path().join("claims"));
        hook["inventory_dir"] = json!(dir.path().join("inventory"));
        hook["log"] = json!(dir.path().join("hook.log"));
        FakeHost {
            dir,
            spec,
            hook,
            id,
            status,
        }
    }

    /// The planted host root ([`FakeHost::new`]).
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// A file in the planted root.
    pub fn file(&self, p: &str) -> PathBuf {
        self.root().join(p)
    }

    /// The bundle directory.
    pub fn bundle(&self) -> PathBuf {
        self.dir.path().join("bundle")
    }

    /// The bundle's rootfs.
    pub fn rootfs(&self) -> PathBuf {
        self.bundle().join("rootfs")
    }

    /// A path in the tempdir.
    pub fn scratch(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The hook config's path (written by [`FakeHost::write`]).
    pub fn hook_path(&self) -> PathBuf {
        self.scratch("hook.json")
    }

    /// Adds `KEY=VALUE` to `process.env`.
    pub fn env(&mut self, kv: &str) -> &mut Self {
        self.spec["process"]["env"]
            .as_array_mut()
            .unwrap()
            .push(json!(kv));
        self
    }

    /// Gives the container GPU `195:minor` in `linux.devices`, as NVIDIA's toolkit does.
    pub fn gpu(&mut self, minor: u32) -> &mut Self {
        self.gpus(&[minor])
    }

    /// Gives the container the GPUs `195:minor` in `linux.devices`.
    pub fn gpus(&mut self, minors: &[u32]) -> &mut Self {
        let devices: Vec<Value> = minors
            .iter()
            .map(|m| json!({"path": format!("/dev/nvidia{m}"), "type": "c", "major": 195, "minor": m}))
            .collect();
        self.spec["linux"]["devices"] = json!(devices);
        self
    }

    /// Writes config.json and hook.json.
    pub fn write(&self) {
        crate::log_guard::private_log(&self.hook);
        std::fs::write(
            self.bundle().join("config.json"),
            serde_json::to_vec_pretty(&self.spec).unwrap(),
        )
        .unwrap();
        std::fs::write(
            self.hook_path(),
            serde_json::to_vec_pretty(&self.hook).unwrap(),
        )
        .unwrap();
    }

    /// The OCI state of this bundle's container with `pid`.
    pub fn state(&self, pid: Option<u32>) -> String {
        let mut s = json!({"ociVersion": "1.0.2", "id": self.id, "status": self.status, "bundle": self.bundle()});
        if let Some(p) = pid {
            s["pid"] = json!(p);
        }
        s.to_string()
    }

    /// Writes the files; the state with the planted [`PID`] and the hook config's path.
    pub fn written(&self) -> (String, PathBuf) {
        self.write();
        (self.state(Some(PID)), self.hook_path())
    }

    /// Writes the files and runs the createRuntime stage on `state`.
    pub fn run_state(&self, state: &str) -> Result<Option<Report>, HookError> {
        self.write();
        run_hook(Some("createRuntime"), state.as_bytes(), &self.hook_path())
    }

    /// Writes the files and runs createRuntime for `pid`.
    pub fn run(&self, pid: Option<u32>) -> Result<Option<Report>, HookError> {
        self.run_state(&self.state(pid))
    }

    /// Runs under `on_error: deny` and returns the error's message (panics when the hook succeeds).
    pub fn deny(&mut self, pid: Option<u32>) -> String {
        self.hook["on_error"] = json!("deny");
        match self.run(pid) {
            Ok(r) => panic!("the hook accepted it: {r:?}"),
            Err(e) => e.to_string(),
        }
    }

    /// Runs under `on_error: allow`; the report (panics without one).
    pub fn allow(&mut self, pid: Option<u32>) -> Report {
        self.hook["on_error"] = json!("allow");
        self.run(pid)
            .expect("allow never fails on a planning problem")
            .expect("a report")
    }

    /// The plan files written in the rootfs under `dir` (relative, e.g. `run/cpuplan`).
    pub fn plan_files(&self, dir: &str) -> Vec<String> {
        list_tree(&self.rootfs().join(dir))
            .into_keys()
            .map(|p| p.display().to_string())
            .collect()
    }

    /// A plan file the hook wrote into the rootfs.
    pub fn plan_file(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.rootfs().join("run/cpuplan").join(name)).ok()
    }

    /// The planted cgroup's cpuset.cpus.
    pub fn cpuset(&self) -> String {
        std::fs::read_to_string(self.file("sys/fs/cgroup/cpuset/ctr/cpuset.cpus"))
            .unwrap()
            .trim()
            .to_string()
    }
}

impl Default for FakeHost {
    fn default() -> Self {
        Self::new()
    }
}

/// Every entry under `dir` (relative paths) with a fingerprint: type, mode, size, mtime and a content hash of files.
pub fn list_tree(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let rel = p.strip_prefix(base).unwrap().to_path_buf();
        out.insert(rel, fingerprint(&p));
        if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            walk(base, &p, out);
        }
    }
}

/// A path's type, mode, owner, size, mtime (ns) and, for a regular file, an FNV-1a hash of its bytes; `absent` if it does not exist.
pub fn fingerprint(p: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::symlink_metadata(p) else {
        return "absent".into();
    };
    let hash = if m.is_file() && m.len() < (64 << 20) {
        std::fs::read(p).map(|b| fnv(&b)).unwrap_or(0)
    } else if m.file_type().is_symlink() {
        std::fs::read_link(p)
            .map(|t| fnv(t.as_os_str().as_encoded_bytes()))
            .unwrap_or(0)
    } else {
        0
    };
    format!(
        "mode={:o} uid={} size={} mtime={}.{} ctime={}.{} hash={hash:x}",
        m.mode(),
        m.uid(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec()
    )
}

/// FNV-1a 64.
pub fn fnv(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for x in b {
        h ^= *x as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// A fake host root for pid cases: `/proc/self/mountinfo` with cgroup v1 `cpu,cpuacct` and `cpuset` hierarchies, and pid `pid` in cgroup `cg`.
pub struct FakeRoot {
    /// The root directory.
    pub root: PathBuf,
    /// The pid planted.
    pub pid: u32,
    /// Its cgroup path.
    pub cg: String,
}

impl FakeRoot {
    /// Plants the tree under `root`; the pid's mount namespace differs from `/proc/self`'s and its `root` points at `container_root`.
    pub fn new(root: &Path, pid: u32, cg: &str, container_root: &Path) -> FakeRoot {
        let w = |rel: &str, text: &str| {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        w(
            "proc/self/mountinfo",
            "25 1 0:22 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n\
             26 1 0:23 / /sys/fs/cgroup/cpuset rw,nosuid - cgroup cgroup rw,cpuset\n",
        );
        w(
            &format!("proc/{pid}/cgroup"),
            &format!("3:cpuset:{cg}\n2:cpu,cpuacct:{cg}\n"),
        );
        w(
            &format!("proc/{pid}/status"),
            "Name:\tsleep\nCpus_allowed_list:\t0-1\n",
        );
        w(
            &format!("proc/{pid}/stat"),
            &format!("{pid} (sleep) S 1 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 12345 0 0\n"),
        );
        let cgrel = cg.trim_start_matches('/');
        w(
            &format!("sys/fs/cgroup/cpu,cpuacct/{cgrel}/cpu.cfs_quota_us"),
            "-1\n",
        );
        w(
            &format!("sys/fs/cgroup/cpu,cpuacct/{cgrel}/cpu.cfs_period_us"),
            "100000\n",
        );
        w(
            &format!("sys/fs/cgroup/cpuset/{cgrel}/cpuset.cpus"),
            "0-1\n",
        );
        std::os::unix::fs::symlink("mnt:[4026531840]", root.join("proc/self/ns_mnt_tmp")).unwrap();
        std::fs::create_dir_all(root.join("proc/self/ns")).unwrap();
        std::fs::rename(
            root.join("proc/self/ns_mnt_tmp"),
            root.join("proc/self/ns/mnt"),
        )
        .unwrap();
        std::fs::create_dir_all(root.join(format!("proc/{pid}/ns"))).unwrap();
        std::os::unix::fs::symlink("mnt:[4026532999]", root.join(format!("proc/{pid}/ns/mnt")))
            .unwrap();
        std::os::unix::fs::symlink(container_root, root.join(format!("proc/{pid}/root"))).unwrap();
        FakeRoot {
            root: root.to_path_buf(),
            pid,
            cg: cg.to_string(),
        }
    }

    /// A file of the pid's cgroup in hierarchy `h` (`cpu,cpuacct` or `cpuset`).
    pub fn cg_file(&self, h: &str, name: &str) -> PathBuf {
        self.root
            .join("sys/fs/cgroup")
            .join(h)
            .join(self.cg.trim_start_matches('/'))
            .join(name)
    }
}
