//! A private containerd (1.7, from Debian trixie) for end-to-end tests outside CRI, started by the test with its
//! root, state, sockets and log under a temp dir, and stopped by its pid when dropped, with
//! the shims, containers, mounts and cgroups it started (see `shared/e2e/containerd-hook-demo.sh`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::cgroups::remove_cgroups;
use super::podman::Run;
use super::runc::which;

/// The containerd namespace of the tests' containers.
pub const NAMESPACE: &str = "cpuplan-e2e";

/// Fails (never skips) when containerd cannot run here: not root, or a tool missing.
pub fn require_containerd() {
    super::runc::require(
        "containerd",
        &[
            ("containerd", "containerd"),
            ("ctr", "containerd"),
            ("runc", "runc"),
            ("busybox", "busybox-static"),
        ],
    );
}

/// A running private containerd.
pub struct Containerd {
    /// Root, state, sockets, log and the tests' bundles.
    pub dir: tempfile::TempDir,
    child: Option<Child>,
    ids: std::sync::Mutex<Vec<String>>,
}

impl Containerd {
    /// Starts containerd with its CRI plugin off and waits until `ctr version` answers.
    pub fn start() -> Containerd {
        Self::start_with(r#"disabled_plugins = ["io.containerd.grpc.v1.cri"]"#, "")
    }

    /// Starts containerd with `top` lines before the tables and `tables` after them.
    pub fn start_with(top: &str, tables: &str) -> Containerd {
        require_containerd();
        crate::procs::stop_orphaned_shims(&std::env::temp_dir(), "cpuplan-containerd-");
        let dir = tempfile::Builder::new()
            .prefix("cpuplan-containerd-")
            .tempdir()
            .expect("tempdir");
        let t = dir.path();
        crate::log_guard::mark_dir(t);
        let config = format!(
            "version = 2\nroot = \"{root}\"\nstate = \"{state}\"\n{top}\n\
             [grpc]\n  address = \"{sock}\"\n[ttrpc]\n  address = \"{sock}.ttrpc\"\n\
             [debug]\n  address = \"{debug}\"\n{tables}\n",
            root = t.join("root").display(),
            state = t.join("state").display(),
            sock = t.join("containerd.sock").display(),
            debug = t.join("debug.sock").display(),
        );
        std::fs::write(t.join("config.toml"), config).unwrap();
        let log = std::fs::File::create(t.join("containerd.log")).unwrap();
        let child = Command::new("containerd")
            .arg("--config")
            .arg(t.join("config.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start containerd");
        let c = Containerd {
            dir,
            child: Some(child),
            ids: std::sync::Mutex::new(Vec::new()),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if c.ctr(&["version"]).rc == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "containerd did not come up: {}",
                c.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        c
    }

    /// containerd's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default()
    }

    /// `ctr --address SOCK --namespace NAMESPACE ARGS`.
    pub fn ctr(&self, args: &[&str]) -> Run {
        let out = Command::new("timeout")
            .arg("120")
            .arg("ctr")
            .arg("--address")
            .arg(self.dir.path().join("containerd.sock"))
            .args(["--namespace", NAMESPACE])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("ctr");
        Run::from(out)
    }

    /// A busybox rootfs directory for container `id`.
    pub fn rootfs(&self, id: &str) -> PathBuf {
        let r = self.dir.path().join(id).join("rootfs");
        for d in ["bin", "proc", "sys", "dev", "run", "tmp", "etc"] {
            std::fs::create_dir_all(r.join(d)).unwrap();
        }
        std::fs::copy(which("busybox"), r.join("bin/busybox")).unwrap();
        for applet in [
            "sh", "cat", "grep", "sed", "env", "echo", "sort", "true", "test",
        ] {
            let _ = std::os::unix::fs::symlink("busybox", r.join("bin").join(applet));
        }
        r
    }

    /// Runs `spec` (a whole runtime spec, hooks included) as container `id` in the foreground
    /// with `ctr run --rm --config`; the spec is also kept as `<id>/config.json` beside its rootfs.
    pub fn run_config(&self, id: &str, spec: &Value) -> Run {
        crate::log_guard::mark(id);
        self.ids.lock().unwrap().push(id.to_string());
        let bundle = self.dir.path().join(id);
        std::fs::create_dir_all(&bundle).unwrap();
        let path = bundle.join("config.json");
        std::fs::write(&path, serde_json::to_vec_pretty(spec).unwrap()).unwrap();
        self.ctr(&["run", "--rm", "--config", path.to_str().unwrap(), id])
    }

    /// The bundle directory of `id` (its `config.json` and `rootfs`).
    pub fn bundle(&self, id: &str) -> PathBuf {
        self.dir.path().join(id)
    }
}

/// `spec` made runnable here as `id`: rootfs, `sh -c script`, no terminal, a `/run` tmpfs, and
/// its own cgroup `/<id>`.
pub fn runnable(mut spec: Value, id: &str, rootfs: &Path, script: &str) -> Value {
    spec["root"] = json!({"path": rootfs, "readonly": false});
    spec["process"]["terminal"] = json!(false);
    spec["process"]["args"] = json!(["/bin/sh", "-c", script]);
    spec["linux"]["cgroupsPath"] = json!(format!("/{id}"));
    spec["mounts"].as_array_mut().unwrap().push(json!({
        "destination": "/run", "type": "tmpfs", "source": "tmpfs",
        "options": ["nosuid", "nodev", "mode=755"]
    }));
    spec
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let ids = self.ids.lock().unwrap().clone();
        for id in &ids {
            let _ = self.ctr(&["tasks", "kill", "-s", "SIGKILL", id]);
            let _ = self.ctr(&["tasks", "delete", "-f", id]);
            let _ = self.ctr(&["containers", "delete", id]);
        }
        // A shim that outlived its task: ended by the pid it recorded.
        let shims = self
            .dir
            .path()
            .join("state/io.containerd.runtime.v2.task")
            .join(NAMESPACE);
        if let Ok(entries) = std::fs::read_dir(&shims) {
            for e in entries.flatten() {
                if let Ok(pid) = std::fs::read_to_string(e.path().join("shim.pid")) {
                    if let Ok(pid) = pid.trim().parse::<i32>() {
                        let _ = nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(pid),
                            nix::sys::signal::Signal::SIGKILL,
                        );
                    }
                }
            }
        }
        if let Some(child) = self.child.take() {
            super::procs::stop_gently(child, Duration::from_secs(5));
        }
        crate::procs::stop_shims_under(self.dir.path());
        crate::procs::unmount_under(self.dir.path());
        // The shim's runc state root, empty once its containers are gone.
        let _ = std::fs::remove_dir(Path::new("/run/containerd/runc").join(NAMESPACE));
        for id in &ids {
            remove_cgroups(id);
        }
    }
}
