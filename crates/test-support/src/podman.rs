//! A private podman (Debian's 4.3) for end-to-end tests: its own containers.conf, storage,
//! hooks directory and cgroup parent, all removed when dropped (as root, like CI).
//!
//! The settings this machine needs (see `shared/e2e/podman-hook-demo.sh`): `runtime = "runc"`
//! (crun refuses hybrid cgroups), `cgroup_manager = "cgroupfs"` (no systemd), and nofile/nproc
//! ulimits of 1024 (no `CAP_SYS_RESOURCE` for podman's default of 1048576). They live in a
//! private containers.conf named by `CONTAINERS_CONF` on each podman command, so the host's
//! configuration is neither read nor changed.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};

use serde_json::Value;

use super::runc::which;

/// The image every test container runs.
pub const IMAGE: &str = "localhost/cpuplan-e2e:latest";

/// podman's shm lock segment (`/dev/shm/libpod_lock`) is shared by every podman on the host,
/// whatever its storage: the tests of one binary take turns.
static TURN: Mutex<()> = Mutex::new(());

/// Fails (never skips) when podman cannot run here: not root, or a tool missing.
pub fn require_podman() {
    super::runc::require(
        "podman",
        &[
            ("podman", "podman"),
            ("runc", "runc"),
            ("busybox", "busybox-static"),
            ("tar", "tar"),
        ],
    );
}

/// What one podman command printed.
pub struct Run {
    /// Exit status (-1 when killed).
    pub rc: i32,
    /// Standard output.
    pub out: String,
    /// Standard error.
    pub err: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Run {
        Run {
            rc: o.status.code().unwrap_or(-1),
            out: String::from_utf8_lossy(&o.stdout).into_owned(),
            err: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

/// A private podman with a busybox image imported.
pub struct Podman {
    /// Everything podman writes: config, storage, run root, tmp, the hooks dir.
    pub dir: tempfile::TempDir,
    /// A directory the hook takes as the operator's, for a test's `claims_dir`
    /// ([`crate::operator_dir`]).
    pub operator: tempfile::TempDir,
    /// The hooks directory podman reads (`hooks_dir` in the private containers.conf).
    pub hooks_dir: PathBuf,
    /// `--cgroup-parent` of every container, removed on drop.
    pub cgroup_parent: String,
    names: Mutex<Vec<String>>,
    _turn: MutexGuard<'static, ()>,
    /// Shared with every other private podman: none runs while `tests/packaging/deb.rs` has the package
    /// (and its hooks.d file in podman's default hooks dir) installed. `None` for the package
    /// test's own podman ([`Podman::with_default_hooks_dirs`]), whose caller holds it exclusively.
    _host: Option<super::hostlock::HostLock>,
}

impl Podman {
    /// A podman whose hooks directory is `<temp>/hooks.d`.
    pub fn new(tag: &str) -> Podman {
        Self::with_hooks_dir(tag, None)
    }

    /// A podman reading hooks from `hooks_dir` (default `<temp>/hooks.d`).
    pub fn with_hooks_dir(tag: &str, hooks_dir: Option<&Path>) -> Podman {
        let host = super::hostlock::shared();
        Self::build(tag, hooks_dir, true, Some(host))
    }

    /// A podman reading hooks from its default directories (`/usr/share/containers/oci/hooks.d`
    /// and `/etc/containers/oci/hooks.d`: no `hooks_dir` in its containers.conf), for the test of
    /// the Debian package, which must hold [`super::hostlock::exclusive`] meanwhile.
    pub fn with_default_hooks_dirs(tag: &str, _held: &super::hostlock::HostLock) -> Podman {
        Self::build(tag, None, false, None)
    }

    fn build(
        tag: &str,
        hooks_dir: Option<&Path>,
        private_hooks: bool,
        host: Option<super::hostlock::HostLock>,
    ) -> Podman {
        require_podman();
        let turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tempfile::Builder::new()
            .prefix("cpuplan-podman-")
            .tempdir()
            .expect("tempdir");
        let t = dir.path();
        crate::log_guard::mark_dir(t);
        let hooks_dir = hooks_dir
            .map(Path::to_path_buf)
            .unwrap_or_else(|| t.join("hooks.d"));
        std::fs::create_dir_all(&hooks_dir).unwrap();
        std::fs::create_dir_all(t.join("tmp")).unwrap();
        std::fs::write(
            t.join("containers.conf"),
            format!(
                r#"[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "none"
tmp_dir = "{tmp}"
{hooks}"#,
                tmp = t.join("tmp").display(),
                hooks = if private_hooks {
                    format!("hooks_dir = [\"{}\"]\n", hooks_dir.display())
                } else {
                    String::new()
                }
            ),
        )
        .unwrap();
        std::fs::write(
            t.join("storage.conf"),
            format!(
                "[storage]\ndriver = \"overlay\"\ngraphroot = \"{}\"\nrunroot = \"{}\"\n",
                t.join("storage").display(),
                t.join("runroot").display()
            ),
        )
        .unwrap();
        let p = Podman {
            cgroup_parent: format!("/cpuplan-podman-{tag}-{}", std::process::id()),
            dir,
            operator: crate::operator_dir::tempdir(),
            hooks_dir,
            names: Mutex::new(Vec::new()),
            _turn: turn,
            _host: host,
        };
        p.import(IMAGE, &[]);
        p
    }

    /// Imports the busybox rootfs as `image`, with `podman import --change` instructions
    /// (e.g. `ENV MKL_NUM_THREADS=5`).
    pub fn import(&self, image: &str, changes: &[&str]) {
        let r = self.dir.path().join("rootfs");
        if r.exists() {
            std::fs::remove_dir_all(&r).unwrap();
        }
        for d in ["bin", "proc", "sys", "dev", "run", "tmp", "etc"] {
            std::fs::create_dir_all(r.join(d)).unwrap();
        }
        std::fs::copy(which("busybox"), r.join("bin/busybox")).unwrap();
        for applet in [
            "sh", "cat", "grep", "sed", "ls", "env", "echo", "stat", "sort", "true", "test",
        ] {
            std::os::unix::fs::symlink("busybox", r.join("bin").join(applet)).unwrap();
        }
        let tar = self.dir.path().join("rootfs.tar");
        let st = Command::new("tar")
            .arg("-C")
            .arg(&r)
            .arg("-cf")
            .arg(&tar)
            .arg(".")
            .status()
            .unwrap();
        assert!(st.success(), "tar of the busybox rootfs failed");
        let mut cmd = self.podman(&["import", "-q"]);
        for c in changes {
            cmd.arg("--change").arg(c);
        }
        let imp = cmd.arg(&tar).arg(image).output();
        let imp = Run::from(imp.expect("podman import"));
        assert_eq!(imp.rc, 0, "podman import: {}", imp.err);
    }

    /// A podman command with the private configuration.
    pub fn podman(&self, args: &[&str]) -> Command {
        let mut c = Command::new("timeout");
        c.arg("120")
            .arg("podman")
            .args(args)
            .env("CONTAINERS_CONF", self.dir.path().join("containers.conf"))
            .env(
                "CONTAINERS_STORAGE_CONF",
                self.dir.path().join("storage.conf"),
            )
            .stdin(Stdio::null());
        c
    }

    /// Runs `podman ARGS`.
    pub fn cmd(&self, args: &[&str]) -> Run {
        Run::from(self.podman(args).output().expect("podman"))
    }

    /// Writes `json` as the hooks.d file `name`.
    pub fn register(&self, name: &str, json: &Value) {
        std::fs::write(
            self.hooks_dir.join(name),
            serde_json::to_vec_pretty(json).unwrap(),
        )
        .unwrap();
    }

    /// Creates and inits container `name` (the runtime's create, so precreate and createRuntime
    /// hooks have run and the bundle is complete), with `opts` before the image and `sh -c script`.
    pub fn init(&self, name: &str, opts: &[&str], script: &str) -> Run {
        self.init_image(name, IMAGE, opts, script)
    }

    /// [`Podman::init`] with another image.
    pub fn init_image(&self, name: &str, image: &str, opts: &[&str], script: &str) -> Run {
        self.names.lock().unwrap().push(name.to_string());
        let mut args = vec![
            "create",
            "--name",
            name,
            "--network=none",
            "--cgroup-parent",
            &self.cgroup_parent,
            "--mount",
            "type=tmpfs,destination=/run",
        ];
        args.extend_from_slice(opts);
        args.extend_from_slice(&[image, "/bin/sh", "-c", script]);
        let c = self.cmd(&args);
        if c.rc != 0 {
            return c;
        }
        self.cmd(&["init", name])
    }

    /// Starts an inited container and waits for it: its output.
    pub fn start(&self, name: &str) -> Run {
        self.cmd(&["start", "--attach", name])
    }

    /// The bundle directory podman gave runc for `name` (its `config.json`'s folder).
    pub fn bundle(&self, name: &str) -> PathBuf {
        let r = self.cmd(&["inspect", "--format", "{{.OCIConfigPath}}", name]);
        assert_eq!(r.rc, 0, "podman inspect: {}", r.err);
        let p = PathBuf::from(r.out.trim());
        p.parent().expect("config.json's folder").to_path_buf()
    }

    /// The runtime config podman gave runc for `name`.
    pub fn oci_config(&self, name: &str) -> Value {
        let p = self.bundle(name).join("config.json");
        serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap()
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        for name in self.names.lock().unwrap().iter() {
            let _ = self.cmd(&["rm", "-f", "-t", "0", name]);
        }
        let _ = self.cmd(&["rmi", "-a", "-f"]);
        crate::procs::unmount_under(self.dir.path());
        crate::cgroups::remove_cgroups(self.cgroup_parent.trim_start_matches('/'));
    }
}

/// `cpuplan --config CONFIG explain --bundle BUNDLE --json`, parsed.
pub fn explain_json(config: &Path, bundle: &Path) -> Value {
    let bundle = bundle.to_str().unwrap();
    crate::hookbin::cpuplan_json(config, &["explain", "--json", "--bundle", bundle])
}

/// `cpuplan --config CONFIG claims --json`, parsed.
pub fn claims_json(config: &Path) -> Value {
    crate::hookbin::cpuplan_json(config, &["claims", "--json"])
}

/// The plan fields that do not depend on the pid, for comparing a container's plan with explain's.
pub fn pid_free(plan: &Value) -> Value {
    serde_json::json!({
        "setting": plan["setting"],
        "mask": plan["mask"],
        "usable": plan["usable"],
        "workers": plan["workers"],
        "result": plan["result"],
        "pinned": plan["pinned"],
        "left": plan["left"],
        "pools": plan["pools"],
    })
}

/// A char device node `195:minor` (an NVIDIA GPU's numbers) in the target dir (not the temp
/// dir: the tests leave nothing there), made once, for `--device NODE:/dev/nvidiaN`: podman
/// copies its numbers into `linux.devices`; nothing opens it.
pub fn gpu_node(minor: u64) -> std::path::PathBuf {
    let dir = super::statics::target_dir().join("test-nodes");
    std::fs::create_dir_all(&dir).expect("the target dir's test-nodes");
    let path = dir.join(format!("nvidia{minor}"));
    let want = nix::sys::stat::makedev(195, minor);
    let ok = nix::sys::stat::stat(&path).is_ok_and(|st| st.st_rdev == want);
    if !ok {
        let _ = std::fs::remove_file(&path);
        nix::sys::stat::mknod(
            &path,
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o600),
            want,
        )
        .or_else(|e| {
            if e == nix::errno::Errno::EEXIST {
                Ok(())
            } else {
                Err(e)
            }
        })
        .expect("mknod the test's GPU node");
    }
    path
}
