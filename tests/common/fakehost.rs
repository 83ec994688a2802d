//! A fake host for driving the hook's library entry point: /proc and cgroupfs under a temp root,
//! the example 224-CPU 8-GPU host as topology, and a bundle.
#![allow(dead_code)]

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

/// The pid of the fake container's init.
pub const PID: u32 = 4242;

/// A temp host root, a bundle and a hook config.
pub struct FakeHost {
    /// Holds everything.
    pub dir: tempfile::TempDir,
    /// The bundle's config.json, written by [`FakeHost::state`].
    pub spec: Value,
    /// The hook config, written by [`FakeHost::state`].
    pub config: Value,
}

impl FakeHost {
    /// A host whose container cgroup `/ctr` has a v1 quota of 8 CPUs and all 224 CPUs allowed.
    pub fn new() -> FakeHost {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path().join("root");
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
        let bundle = dir.path().join("bundle");
        std::fs::create_dir_all(bundle.join("rootfs")).unwrap();
        let spec = json!({
            "ociVersion": "1.0.2",
            "root": {"path": "rootfs"},
            "process": {"cwd": "/", "args": ["sh"], "user": {"uid": 0, "gid": 0}, "env": ["PATH=/bin"]},
            "linux": {"cgroupsPath": "/ctr"}
        });
        let config = json!({
            "root": r,
            "topology_root": Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/host"),
            "claims_dir": dir.path().join("claims"),
            "inventory_dir": dir.path().join("inventory"),
            "log": dir.path().join("hook.log"),
            "step_thread_core": "2"
        });
        FakeHost { dir, spec, config }
    }

    /// The fake host root.
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// The bundle dir.
    pub fn bundle(&self) -> PathBuf {
        self.dir.path().join("bundle")
    }

    /// A file in the fake root.
    pub fn file(&self, p: &str) -> PathBuf {
        self.root().join(p)
    }

    /// Adds `KEY=VALUE` to the container's env.
    pub fn env(&mut self, kv: &str) {
        self.spec["process"]["env"]
            .as_array_mut()
            .unwrap()
            .push(json!(kv));
    }

    /// Gives the container the GPUs `195:minor` in `linux.devices`, as NVIDIA's toolkit does.
    pub fn gpus(&mut self, minors: &[u32]) {
        let devices: Vec<Value> = minors
            .iter()
            .map(|m| json!({"path": format!("/dev/nvidia{m}"), "type": "c", "major": 195, "minor": m}))
            .collect();
        self.spec["linux"]["devices"] = json!(devices);
    }

    /// Writes the bundle config and the hook config; returns (state JSON, hook config path).
    pub fn state(&self) -> (String, PathBuf) {
        std::fs::write(
            self.bundle().join("config.json"),
            serde_json::to_vec(&self.spec).unwrap(),
        )
        .unwrap();
        let cfg = self.dir.path().join("hook.json");
        std::fs::write(&cfg, serde_json::to_vec(&self.config).unwrap()).unwrap();
        let state = json!({"ociVersion": "1.0.2", "id": "ctr", "status": "creating", "pid": PID, "bundle": self.bundle()});
        (state.to_string(), cfg)
    }

    /// A file the hook wrote into the rootfs.
    pub fn plan_file(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.bundle().join("rootfs/run/cpuplan").join(name)).ok()
    }

    /// The fake cgroup's cpuset.cpus.
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
