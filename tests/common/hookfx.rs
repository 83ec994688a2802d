//! Fixtures for driving the hook as a library or binary: a bundle in a tempdir, a hook config, a state, fake host roots.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cpuplan_hook::hook::{run_hook, HookError, Report};
use serde_json::{json, Value};

/// The repo's fixture directory.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// A bundle (config.json + rootfs) and a hook config in one tempdir.
pub struct Fx {
    /// Holds everything; removed on drop.
    pub dir: tempfile::TempDir,
    /// The bundle's config.json, written by [`Fx::run`].
    pub config: Value,
    /// The hook config, written by [`Fx::run`].
    pub hook: Value,
}

impl Fx {
    /// A bundle with an empty `rootfs`, a minimal spec (its cgroup `/ctr`, as [`FakeRoot`]s place
    /// their pid), and a hook config logging into the tempdir, reading the e2e fake GPU host.
    pub fn new() -> Fx {
        let dir = tempfile::Builder::new()
            .prefix("cpuplan-h6-")
            .tempdir()
            .unwrap();
        std::fs::create_dir_all(dir.path().join("bundle/rootfs")).unwrap();
        let config = json!({
            "ociVersion": "1.0.2",
            "root": {"path": "rootfs"},
            "process": {"cwd": "/", "args": ["sh"], "user": {"uid": 0, "gid": 0}, "env": ["PATH=/bin"]},
            "linux": {"cgroupsPath": "/ctr"}
        });
        let hook = json!({
            "topology_root": fixtures().join("e2e-host"),
            "claims_dir": dir.path().join("claims"),
            "log": dir.path().join("hook.log"),
            "step_thread_core": "off",
        });
        Fx { dir, config, hook }
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

    /// The hook config's path (written by [`Fx::write`]).
    pub fn hook_path(&self) -> PathBuf {
        self.scratch("hook.json")
    }

    /// Adds `KEY=VALUE` to `process.env`.
    pub fn env(&mut self, kv: &str) -> &mut Self {
        self.config["process"]["env"]
            .as_array_mut()
            .unwrap()
            .push(json!(kv));
        self
    }

    /// Gives the container GPU `195:minor` in `linux.devices`, as NVIDIA's toolkit does.
    pub fn gpu(&mut self, minor: u32) -> &mut Self {
        self.config["linux"]["devices"] = json!([{
            "path": format!("/dev/nvidia{minor}"), "type": "c", "major": 195, "minor": minor
        }]);
        self
    }

    /// Writes config.json and hook.json.
    pub fn write(&self) {
        std::fs::write(
            self.bundle().join("config.json"),
            serde_json::to_vec_pretty(&self.config).unwrap(),
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
        let mut s = json!({"ociVersion": "1.0.2", "id": "h6-ctr", "status": "created", "bundle": self.bundle()});
        if let Some(p) = pid {
            s["pid"] = json!(p);
        }
        s.to_string()
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

    /// Runs under `on_error: allow`; the report's problem (panics without a report).
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
