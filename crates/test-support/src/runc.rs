//! A real runc container with the hook registered, for end-to-end tests (as root, like CI).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

pub use crate::hookbin::{cpuplan_bin, hook_bin};

/// The repo's fixture directory.
pub fn fixtures() -> PathBuf {
    crate::statics::workspace_root().join("tests/fixtures")
}

/// The e2e host (`tests/fixtures/e2e-host`: GPU `0000:3b:00.0`, `/dev/nvidia0`) copied under
/// `dir`, with a second GPU at `second` (`/dev/nvidia1`); `local` are the two GPUs' local CPUs.
pub fn two_gpu_host(dir: &Path, second: &str, local: [&str; 2]) -> PathBuf {
    let root = dir.join("two-gpu-host");
    let first = "0000:3b:00.0";
    let pci = root.join("sys/bus/pci/devices");
    let copy = |flags: &str, from: &Path, to: &Path| {
        let status = Command::new("cp").args([flags]).arg(from).arg(to).status();
        assert!(status.unwrap().success(), "cp {flags} {}", from.display());
    };
    copy("-a", &fixtures().join("e2e-host"), &root);
    copy("-aL", &pci.join(first), &pci.join(second));
    for (gpu, cpus) in [first, second].iter().zip(local) {
        std::fs::write(pci.join(gpu).join("local_cpulist"), format!("{cpus}\n")).unwrap();
    }
    let info = root.join("proc/driver/nvidia/gpus");
    let text = std::fs::read_to_string(info.join(first).join("information")).unwrap();
    std::fs::create_dir_all(info.join(second)).unwrap();
    // A UUID of its own: the first's ends in its bus number.
    let bus = |address: &str| address[5..7].to_string() + "00";
    std::fs::write(
        info.join(second).join("information"),
        text.replace(first, second)
            .replace(&bus(first), &bus(second))
            .replace("Device Minor: \t 0", "Device Minor: \t 1"),
    )
    .unwrap();
    root
}

/// Fails (never skips) when the test cannot run here: not root, or runc/busybox missing.
pub fn require_runc() {
    require("runc", &[("runc", "runc"), ("busybox", "busybox-static")]);
}

/// Fails (never skips) unless the tests run as root and every `(program, Debian package)` of `tools` is on PATH.
pub fn require(what: &str, tools: &[(&str, &str)]) {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "the {what} end-to-end tests run as root (CI does)"
    );
    for (bin, pkg) in tools {
        assert!(
            !which(bin).as_os_str().is_empty(),
            "{bin} is missing: apt-get install -y {pkg} (sudo scripts/test.sh --setup-only does)"
        );
    }
}

/// A bundle with a busybox rootfs, `runc spec`'s config patched by the test, and its runc state dir.
pub struct Bundle {
    /// The temp dir holding everything but [`Bundle::scratch`].
    pub dir: tempfile::TempDir,
    /// Where [`Bundle::scratch`] is: a directory the hook takes as the operator's (for a
    /// `claims_dir`), which none under `/tmp` is.
    pub operator: tempfile::TempDir,
    /// The container id.
    pub id: String,
    /// The parsed config.json, patched before `run`.
    pub config: Value,
    /// Cgroup path given to runc.
    pub cgroup: String,
}

impl Bundle {
    /// A new bundle; the container runs `cmd` with `sh -c`.
    pub fn new(tag: &str, cmd: &str) -> Bundle {
        require_runc();
        let dir = tempfile::Builder::new()
            .prefix("cpuplan-e2e-")
            .tempdir()
            .expect("tempdir");
        let id = format!("cpuplan-{tag}-{}", std::process::id());
        crate::log_guard::mark(&id);
        crate::log_guard::mark_dir(dir.path());
        let rootfs = dir.path().join("bundle/rootfs");
        for d in ["bin", "proc", "sys", "dev", "run", "tmp", "etc"] {
            std::fs::create_dir_all(rootfs.join(d)).unwrap();
        }
        let busybox = which("busybox");
        std::fs::copy(&busybox, rootfs.join("bin/busybox")).unwrap();
        for applet in [
            "sh", "cat", "grep", "sed", "ls", "env", "echo", "stat", "mount", "sleep", "true",
            "test", "find",
        ] {
            std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet)).unwrap();
        }
        let out = Command::new("runc")
            .arg("spec")
            .current_dir(dir.path().join("bundle"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "runc spec: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let config: Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("bundle/config.json")).unwrap())
                .unwrap();
        let cgroup = format!("/{id}");
        let mut b = Bundle {
            dir,
            operator: crate::operator_dir::tempdir(),
            id,
            config,
            cgroup,
        };
        let c = &mut b.config;
        c["process"]["terminal"] = json!(false);
        c["process"]["args"] = json!(["/bin/sh", "-c", cmd]);
        c["root"]["readonly"] = json!(false);
        c["linux"]["cgroupsPath"] = json!(b.cgroup.clone());
        c["mounts"]
            .as_array_mut()
            .unwrap()
            .push(json!({"destination": "/run", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=755"]}));
        b
    }

    /// The bundle directory.
    pub fn path(&self) -> PathBuf {
        self.dir.path().join("bundle")
    }

    /// The rootfs.
    pub fn rootfs(&self) -> PathBuf {
        self.path().join("rootfs")
    }

    /// Adds `KEY=VALUE` to the container's env.
    pub fn env(&mut self, kv: &str) -> &mut Self {
        self.config["process"]["env"]
            .as_array_mut()
            .unwrap()
            .push(json!(kv));
        self
    }

    /// Gives the container GPU `/dev/nvidia{minor}` (char 195:minor) in `linux.devices`, as
    /// NVIDIA's runtime and the Kubernetes device plugin do (runc creates the node; nothing
    /// opens it).
    pub fn gpu(&mut self, minor: u32) -> &mut Self {
        let linux = &mut self.config["linux"];
        if !linux["devices"].is_array() {
            linux["devices"] = json!([]);
        }
        linux["devices"].as_array_mut().unwrap().push(json!({
            "path": format!("/dev/nvidia{minor}"), "type": "c", "major": 195, "minor": minor,
            "fileMode": 0o666, "uid": 0, "gid": 0
        }));
        self
    }

    /// Registers `hook_args` (argv, the binary first) at each of `stages`.
    pub fn hook(&mut self, stages: &[&str], args: &[String]) -> &mut Self {
        let mut hooks = self.config.get("hooks").cloned().unwrap_or(json!({}));
        for s in stages {
            let mut argv = args.to_vec();
            argv.push(s.to_string());
            let entry = json!({"path": args[0], "args": argv, "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], "timeout": 30});
            let list = hooks[*s].as_array().cloned().unwrap_or_default();
            let mut list = list;
            list.push(entry);
            hooks[*s] = json!(list);
        }
        self.config["hooks"] = hooks;
        self
    }

    /// Registers the cpuplan hook with the config file `config` at createRuntime and poststop.
    pub fn hook_with_config(&mut self, config: &Path) -> &mut Self {
        let args = vec![
            hook_bin().display().to_string(),
            "--config".into(),
            config.display().to_string(),
            "hook".into(),
        ];
        self.hook(&["createRuntime", "poststop"], &args)
    }

    /// Writes a hook config file in the temp dir and returns its path.
    pub fn hook_config(&self, value: Value) -> PathBuf {
        let p = self.dir.path().join("hook.json");
        std::fs::write(&p, serde_json::to_vec_pretty(&value).unwrap()).unwrap();
        p
    }

    /// Where the test keeps the hook's claims and log (in [`Bundle::operator`]).
    pub fn scratch(&self, name: &str) -> PathBuf {
        self.operator.path().join(name)
    }

    /// Writes the patched config.json into the bundle.
    pub fn write_config(&self) {
        std::fs::write(
            self.path().join("config.json"),
            serde_json::to_vec_pretty(&self.config).unwrap(),
        )
        .unwrap();
    }

    /// `timeout 120 runc --root STATE run --bundle BUNDLE ID` with stdin from /dev/null, its
    /// config written first.
    fn runc_run(&self) -> Command {
        self.write_config();
        let mut cmd = Command::new("timeout");
        cmd.arg("120")
            .arg("runc")
            .arg("--root")
            .arg(self.dir.path().join("state"))
            .arg("run")
            .arg("--bundle")
            .arg(self.path())
            .arg(&self.id)
            .stdin(std::process::Stdio::null());
        cmd
    }

    /// Starts the container in the background (`runc run`, its output discarded); the returned
    /// guard kills runc if it still runs when dropped (the bundle's drop deletes the container).
    pub fn spawn(&self) -> Running {
        let child = self
            .runc_run()
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("runc run");
        Running(Some(child))
    }

    /// Runs the container in the foreground of a thread of its own, and returns once its init
    /// made `ready` (a path on the host; 20 s at most): the thread gives runc's exit status,
    /// stdout and stderr when the container ends.
    pub fn run_until(&self, ready: &Path) -> std::thread::JoinHandle<(i32, String, String)> {
        self.write_config();
        let (path, id, state) = (self.path(), self.id.clone(), self.dir.path().join("state"));
        let t = std::thread::spawn(move || {
            let out = Command::new("timeout")
                .args(["60", "runc", "--root"])
                .arg(state)
                .args(["run", "--bundle"])
                .arg(path)
                .arg(id)
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap();
            super::hookbin::outcome(out)
        });
        let t0 = std::time::Instant::now();
        while !ready.exists() {
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(20),
                "{} did not start",
                self.id
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        t
    }

    /// Runs the container in the foreground: (runc exit status, stdout, stderr).
    pub fn run(&self) -> (i32, String, String) {
        let out = self.runc_run().output().expect("runc run");
        super::hookbin::outcome(out)
    }
}

impl Drop for Bundle {
    fn drop(&mut self) {
        let _ = Command::new("runc")
            .arg("--root")
            .arg(self.dir.path().join("state"))
            .args(["delete", "-f", &self.id])
            .output();
        if let Ok(entries) = std::fs::read_dir("/sys/fs/cgroup") {
            for e in entries.flatten() {
                let _ = std::fs::remove_dir(e.path().join(self.cgroup.trim_start_matches('/')));
            }
        }
    }
}

/// A container started by [`Bundle::spawn`], its `runc run` killed on drop if still running.
pub struct Running(Option<std::process::Child>);

impl Running {
    /// Waits (at most `limit`) for `runc run` to exit: its status code and stderr.
    pub fn wait(&mut self, limit: std::time::Duration) -> (i32, String) {
        let mut child = self.0.take().expect("waited once");
        let Some(status) = crate::procs::wait_at_most(&mut child, limit) else {
            panic!("runc run still running after {limit:?}");
        };
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut err);
        }
        (status.code().unwrap_or(-1), err)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The absolute path of a program on PATH.
pub fn which(bin: &str) -> PathBuf {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {bin}"))
        .output()
        .unwrap();
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The value of `KEY=` in `text` (`KEY='v'` form unquoted when simple).
pub fn line_value<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
}
