//! A Kubernetes-style node for end-to-end tests: a private containerd serving CRI v1 with NRI
//! enabled, laid out as a relocated node root under a temp dir, and driven through CRI as kubelet
//! drives it. Two flavours ([`Containerd`]): the system's containerd 1.7 (Debian trixie's
//! package, config version 2) and containerd 2.x (Debian unstable's package, unpacked by
//! `scripts/containerd2.sh` into `$CARGO_TARGET_DIR/tools/containerd2`, config version 3: CRI's
//! runtime keys under `io.containerd.cri.v1.runtime`, its images under
//! `io.containerd.cri.v1.images`; run with that package's bin directory first on PATH, as 2.x
//! finds `containerd-shim-runc-v2` on PATH before its own directory).
//!
//! The node root `T` holds `T/etc/containerd/config.toml` (generated here),
//! containerd's root `T/var/lib/containerd` and state `T/run/containerd` (its socket there),
//! runc's state `T/run/runc`, the NRI socket `T/run/nri/nri.sock` with its plugin and config
//! dirs, pod logs under `T/var/log/pods`, and the two images (built from `/bin/busybox` as OCI
//! image-layout tars and imported: no registry). `cpuplan-hook install --containerd
//! --root-prefix T` registers the hook with it before [`CriNode::start`].
//!
//! The settings this machine needs: `restrict_oom_score_adj = true` (no `CAP_SYS_RESOURCE`),
//! `SystemdCgroup = false` (no systemd), the `native` snapshotter, host-network pods without a
//! hostname (no CNI). Dropping the node removes every container, pod, shim, mount and cgroup
//! it started or created, and stops the daemon.
//!
//! It is not in `common/mod.rs` (its tonic client would be built into every test binary): a
//! test that uses it says `mod common;` and `#[path = "common/cri.rs"] mod cri;`.
#![allow(dead_code)]

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
/// The CRI v1 API (k8s-cri's generated types).
pub use k8s_cri::v1 as cri;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tonic::transport::{Channel, Endpoint, Uri};

use crate::podman::Run;
use crate::runc::{fixtures, which};

/// The containerd namespace CRI uses.
pub const NAMESPACE: &str = "k8s.io";
/// The sandbox (pause) image: busybox sleeping.
pub const PAUSE_IMAGE: &str = "localhost/cpuplan-pause:1";
/// The containers' image: busybox with `sh` and friends.
pub const IMAGE: &str = "localhost/cpuplan-busybox:1";
/// The busybox applets the images link.
const APPLETS: &[&str] = &[
    "sh", "cat", "grep", "sed", "env", "echo", "sleep", "true", "test", "ls", "stat", "awk",
];

/// The containerd a [`CriNode`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Containerd {
    /// The system's containerd 1.7 (`containerd` and `ctr` on PATH), config version 2.
    #[default]
    V17,
    /// containerd 2.x from `$CARGO_TARGET_DIR/tools/containerd2/usr/bin` (`scripts/containerd2.sh`
    /// puts it there), config version 3.
    V2,
}

impl Containerd {
    /// Both flavours, 1.7 first.
    pub fn both() -> [Containerd; 2] {
        [Containerd::V17, Containerd::V2]
    }

    /// "containerd 1.7" or "containerd 2.x", for messages.
    pub fn name(self) -> &'static str {
        match self {
            Containerd::V17 => "containerd 1.7",
            Containerd::V2 => "containerd 2.x",
        }
    }

    /// The directory holding this flavour's `containerd`, `ctr` and shim; `None` for the
    /// system's (found on PATH).
    pub fn bin_dir(self) -> Option<PathBuf> {
        match self {
            Containerd::V17 => None,
            Containerd::V2 => {
                let target = std::env::var_os("CARGO_TARGET_DIR")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| crate::statics::workspace_root().join("target"));
                Some(target.join("tools/containerd2/usr/bin"))
            }
        }
    }

    fn tool(self, name: &str) -> PathBuf {
        self.bin_dir()
            .map(|d| d.join(name))
            .unwrap_or_else(|| which(name))
    }

    /// Its `containerd` binary.
    pub fn containerd(self) -> PathBuf {
        self.tool("containerd")
    }

    /// Its `ctr` binary.
    pub fn ctr(self) -> PathBuf {
        self.tool("ctr")
    }

    /// The config version its node's config is written in.
    pub fn config_version(self) -> u32 {
        match self {
            Containerd::V17 => 2,
            Containerd::V2 => 3,
        }
    }

    /// PATH for its daemon: its own bin directory first (2.x runs the first
    /// `containerd-shim-runc-v2` on PATH), then the test's.
    pub fn path_env(self) -> std::ffi::OsString {
        let path = std::env::var_os("PATH").unwrap_or_default();
        match self.bin_dir() {
            None => path,
            Some(d) => {
                let mut dirs = vec![d];
                dirs.extend(std::env::split_paths(&path));
                std::env::join_paths(dirs).unwrap()
            }
        }
    }

    /// Fails (never skips) when this flavour cannot run here; its `containerd --version`.
    pub fn require(self) -> String {
        let bin = self.containerd();
        if self == Containerd::V2 {
            assert!(
                bin.is_file(),
                "no containerd 2.x at {}: run `sudo scripts/test.sh --setup-only` (scripts/containerd2.sh unpacks it there)",
                bin.display()
            );
        }
        let v = Command::new(&bin)
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
        let v = String::from_utf8_lossy(&v.stdout).into_owned();
        let want = match self {
            Containerd::V17 => " 1.7.",
            Containerd::V2 => " 2.",
        };
        assert!(
            v.contains(want),
            "{} is not {} (`sudo scripts/test.sh --setup-only` installs containerd/trixie and unpacks 2.x): {v}",
            bin.display(),
            self.name()
        );
        v
    }
}

/// Fails (never skips) when a CRI node cannot run here: not root, a tool missing, or the
/// system's containerd not 1.7.
pub fn require_cri() {
    crate::runc::require(
        "CRI",
        &[
            ("containerd", "containerd/trixie"),
            ("ctr", "containerd/trixie"),
            ("runc", "runc"),
            ("busybox", "busybox-static"),
        ],
    );
    Containerd::V17.require();
}

/// How a node is set up before it starts; `@ROOT@` in the TOML strings stands for the node root.
#[derive(Debug, Clone, Default)]
pub struct NodeOptions {
    /// The containerd the node runs (default 1.7).
    pub containerd: Containerd,
    /// Runtime handlers besides `runc` (a runc v2 runtime each): name and extra TOML lines for
    /// its table (e.g. `base_runtime_spec = "..."`).
    pub runtimes: Vec<(String, String)>,
    /// TOML appended to the config after the generated tables (other plugins' sections).
    pub extra_config: String,
    /// Lines appended to the CRI plugin's own table, in config version 2's names
    /// (`[plugins."io.containerd.grpc.v1.cri"]`); on containerd 2.x they go to the CRI runtime's
    /// table (`[plugins.'io.containerd.cri.v1.runtime']`), where the keys given so far
    /// (`enable_cdi`, `cdi_spec_dirs`, `restrict_oom_score_adj`) live in version 3.
    pub cri_keys: String,
    /// NRI's plugin directory (default `T/opt/nri/plugins`).
    pub nri_plugin_dir: Option<PathBuf>,
    /// NRI's plugin config directory (default `T/etc/nri/conf.d`).
    pub nri_config_dir: Option<PathBuf>,
    /// Lines appended to NRI's table (`[plugins."io.containerd.nri.v1.nri"]`), e.g.
    /// `plugin_request_timeout = "5s"`.
    pub nri_keys: String,
    /// Leave NRI off.
    pub nri_disabled: bool,
}

impl NodeOptions {
    /// The default options on `flavour`.
    pub fn on(flavour: Containerd) -> NodeOptions {
        NodeOptions {
            containerd: flavour,
            ..NodeOptions::default()
        }
    }
}

/// Two tests for each function `NAME(Containerd)` named: `NAME::on_containerd17` and
/// `NAME::on_containerd2` (`cargo test on_containerd2` runs one flavour).
#[macro_export]
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn on_containerd17() {
                    super::$name($crate::cri::Containerd::V17)
                }
                #[test]
                fn on_containerd2() {
                    super::$name($crate::cri::Containerd::V2)
                }
            }
        )*
    };
}

/// A pod sandbox the node runs.
#[derive(Debug, Clone)]
pub struct Pod {
    /// The sandbox id.
    pub id: String,
    /// The config it was run with (CreateContainer takes it again).
    pub config: cri::PodSandboxConfig,
}

/// A container run to its end.
#[derive(Debug, Clone)]
pub struct Ran {
    /// The container id.
    pub id: String,
    /// Its exit code.
    pub exit_code: i32,
    /// Its log (stdout and stderr), without CRI's prefixes.
    pub log: String,
}

/// A private containerd serving CRI, with its node root under a temp dir.
pub struct CriNode {
    /// The node root `T`.
    pub dir: tempfile::TempDir,
    flavour: Containerd,
    rt: tokio::runtime::Runtime,
    child: Mutex<Option<Child>>,
    client: Mutex<Option<RuntimeServiceClient<Channel>>>,
    pods: Mutex<Vec<String>>,
    containers: Mutex<Vec<String>>,
    cgroups: Mutex<Vec<String>>,
    imported: Mutex<bool>,
}

impl CriNode {
    /// A node with the default options (containerd 1.7), laid out but not started.
    pub fn new() -> CriNode {
        Self::with(NodeOptions::default())
    }

    /// A node running `flavour` with otherwise default options, laid out but not started.
    pub fn on(flavour: Containerd) -> CriNode {
        Self::with(NodeOptions::on(flavour))
    }

    /// The containerd it runs.
    pub fn containerd(&self) -> Containerd {
        self.flavour
    }

    /// A node laid out with `opts` (config, directories, images), not started.
    pub fn with(opts: NodeOptions) -> CriNode {
        require_cri();
        opts.containerd.require();
        let dir = tempfile::Builder::new()
            .prefix("cpuplan-cri-")
            .tempdir()
            .expect("tempdir");
        let node = CriNode {
            dir,
            flavour: opts.containerd,
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            child: Mutex::new(None),
            client: Mutex::new(None),
            pods: Mutex::new(Vec::new()),
            containers: Mutex::new(Vec::new()),
            cgroups: Mutex::new(Vec::new()),
            imported: Mutex::new(false),
        };
        for d in [
            "etc/containerd",
            "var/lib/containerd",
            "run/containerd",
            "run/runc",
            "run/nri",
            "opt/nri/plugins",
            "etc/nri/conf.d",
            "opt/cni/bin",
            "etc/cni/net.d",
            "var/log/pods",
            "images",
        ] {
            std::fs::create_dir_all(node.path(d)).unwrap();
        }
        std::fs::write(node.config_path(), node.config_toml(&opts)).unwrap();
        image_tar(
            &node.path("images/pause.tar"),
            PAUSE_IMAGE,
            &["sleep", "1000000"],
        );
        image_tar(&node.path("images/busybox.tar"), IMAGE, &["sh"]);
        node
    }

    /// `rel` under the node root.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// The node root `T` (what `install --root-prefix` takes).
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// containerd's main config, `T/etc/containerd/config.toml`.
    pub fn config_path(&self) -> PathBuf {
        self.path("etc/containerd/config.toml")
    }

    /// containerd's gRPC socket (CRI and the containerd API).
    pub fn socket(&self) -> PathBuf {
        self.path("run/containerd/containerd.sock")
    }

    /// The socket NRI plugins connect to.
    pub fn nri_socket(&self) -> PathBuf {
        self.path("run/nri/nri.sock")
    }

    /// containerd's log (stdout and stderr of every start).
    pub fn log_path(&self) -> PathBuf {
        self.path("var/log/containerd.log")
    }

    /// containerd's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The last 40 lines of containerd's log, for failure messages.
    pub fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    fn config_toml(&self, opts: &NodeOptions) -> String {
        let t = self.root().display().to_string();
        let plugin_dir = opts
            .nri_plugin_dir
            .clone()
            .unwrap_or_else(|| self.path("opt/nri/plugins"));
        let plugin_conf = opts
            .nri_config_dir
            .clone()
            .unwrap_or_else(|| self.path("etc/nri/conf.d"));
        let (version, cri) = match opts.containerd {
            Containerd::V17 => (2, Self::cri_v2(&t, opts)),
            Containerd::V2 => (3, Self::cri_v3(&t, opts)),
        };
        format!(
            r#"version = {version}
root = "{t}/var/lib/containerd"
state = "{t}/run/containerd"

[grpc]
  address = "{t}/run/containerd/containerd.sock"

[ttrpc]
  address = "{t}/run/containerd/containerd.sock.ttrpc"

[plugins]
{cri}
  [plugins."io.containerd.internal.v1.opt"]
    path = "{t}/opt/containerd"
  [plugins."io.containerd.nri.v1.nri"]
    disable = {nri_off}
    socket_path = "{t}/run/nri/nri.sock"
    plugin_path = "{plugin_dir}"
    plugin_config_path = "{plugin_conf}"
{nri_keys}
{extra}
"#,
            nri_off = opts.nri_disabled,
            plugin_dir = plugin_dir.display(),
            plugin_conf = plugin_conf.display(),
            nri_keys = opts.nri_keys,
            extra = opts.extra_config,
        )
        .replace("@ROOT@", &t)
    }

    /// A runc v2 runtime's tables under `table` (`...containerd.runtimes`): `name` with `extra`.
    fn runtime_toml(table: &str, t: &str, name: &str, extra: &str) -> String {
        format!(
            "      [{table}.{name}]\n        runtime_type = \"io.containerd.runc.v2\"\n{extra}\n\
             \x20       [{table}.{name}.options]\n          SystemdCgroup = false\n          Root = \"{t}/run/runc\"\n"
        )
    }

    /// The CRI plugin's tables in config version 2 (containerd 1.7).
    fn cri_v2(t: &str, opts: &NodeOptions) -> String {
        let cri = "plugins.\"io.containerd.grpc.v1.cri\"";
        let table = format!("{cri}.containerd.runtimes");
        let mut runtimes = Self::runtime_toml(&table, t, "runc", "");
        for (name, extra) in &opts.runtimes {
            runtimes.push_str(&Self::runtime_toml(&table, t, name, extra));
        }
        format!(
            r#"  [{cri}]
    sandbox_image = "{PAUSE_IMAGE}"
    restrict_oom_score_adj = true
{cri_keys}
    [{cri}.cni]
      bin_dir = "{t}/opt/cni/bin"
      conf_dir = "{t}/etc/cni/net.d"
    [{cri}.containerd]
      snapshotter = "native"
      default_runtime_name = "runc"
{runtimes}"#,
            cri_keys = opts.cri_keys,
        )
    }

    /// The CRI plugins' tables in config version 3 (containerd 2.x): images (the snapshotter,
    /// the sandbox image) and the runtime (everything else; [`NodeOptions::cri_keys`] too).
    fn cri_v3(t: &str, opts: &NodeOptions) -> String {
        let images = "plugins.'io.containerd.cri.v1.images'";
        let cri = "plugins.'io.containerd.cri.v1.runtime'";
        let table = format!("{cri}.containerd.runtimes");
        let mut runtimes = Self::runtime_toml(&table, t, "runc", "");
        for (name, extra) in &opts.runtimes {
            runtimes.push_str(&Self::runtime_toml(&table, t, name, extra));
        }
        // ctr 2.x imports through the transfer service, which unpacks only for the platforms
        // and snapshotters its unpack_config lists (none by default with `--snapshotter native`).
        format!(
            r#"  [plugins.'io.containerd.transfer.v1.local']
    [[plugins.'io.containerd.transfer.v1.local'.unpack_config]]
      platform = "linux/amd64"
      snapshotter = "native"
  [{images}]
    snapshotter = "native"
    [{images}.pinned_images]
      sandbox = "{PAUSE_IMAGE}"
  [{cri}]
    restrict_oom_score_adj = true
{cri_keys}
    [{cri}.cni]
      bin_dirs = ["{t}/opt/cni/bin"]
      conf_dir = "{t}/etc/cni/net.d"
    [{cri}.containerd]
      default_runtime_name = "runc"
{runtimes}"#,
            cri_keys = opts.cri_keys,
        )
    }

    /// Starts containerd, waits until CRI answers, and imports the images (first start only).
    pub fn start(&self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap();
        let child = Command::new(self.flavour.containerd())
            .env("PATH", self.flavour.path_env())
            .arg("--config")
            .arg(self.config_path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start containerd");
        *self.child.lock().unwrap() = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            *self.client.lock().unwrap() = None;
            let up = self.socket().exists()
                && self
                    .try_call(
                        |mut c| async move { c.version(cri::VersionRequest::default()).await },
                    )
                    .is_ok();
            if up {
                break;
            }
            if let Some(Ok(Some(st))) = self.child.lock().unwrap().as_mut().map(Child::try_wait) {
                panic!("containerd exited ({st}):\n{}", self.log_tail());
            }
            assert!(
                Instant::now() < deadline,
                "containerd's CRI did not answer:\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut imported = self.imported.lock().unwrap();
        if !*imported {
            for tar in ["pause.tar", "busybox.tar"] {
                let p = self.path("images").join(tar);
                let r = self.ctr(&[
                    "images",
                    "import",
                    "--snapshotter",
                    "native",
                    p.to_str().unwrap(),
                ]);
                assert_eq!(r.rc, 0, "ctr images import {tar}: {}{}", r.out, r.err);
            }
            *imported = true;
        }
    }

    /// Imports the OCI image-layout tar `tar` (an [`image_tar_with`]) into the started node.
    pub fn import(&self, tar: &Path) {
        let r = self.ctr(&[
            "images",
            "import",
            "--snapshotter",
            "native",
            tar.to_str().unwrap(),
        ]);
        assert_eq!(
            r.rc,
            0,
            "ctr images import {}: {}{}",
            tar.display(),
            r.out,
            r.err
        );
    }

    /// Stops containerd (SIGTERM, then SIGKILL after 10 s); shims and containers keep running.
    pub fn stop_daemon(&self) {
        let Some(child) = self.child.lock().unwrap().take() else {
            return;
        };
        *self.client.lock().unwrap() = None;
        crate::procs::stop_gently(child, Duration::from_secs(10));
    }

    /// Stops and starts containerd, as `systemctl restart containerd` does.
    pub fn restart(&self) {
        self.stop_daemon();
        self.start();
    }

    /// The pid of the running containerd.
    pub fn daemon_pid(&self) -> Option<u32> {
        self.child.lock().unwrap().as_ref().map(Child::id)
    }

    /// `ctr --address SOCK --namespace k8s.io ARGS`.
    pub fn ctr(&self, args: &[&str]) -> Run {
        Command::new("timeout")
            .arg("120")
            .arg(self.flavour.ctr())
            .arg("--address")
            .arg(self.socket())
            .args(["--namespace", NAMESPACE])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("ctr")
            .into()
    }

    fn client(&self) -> Result<RuntimeServiceClient<Channel>, tonic::Status> {
        let mut slot = self.client.lock().unwrap();
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let sock = self.socket();
        let channel = self
            .rt
            .block_on(async {
                tokio::time::timeout(
                    Duration::from_secs(10),
                    Endpoint::try_from("http://[::]:50051")
                        .expect("endpoint")
                        .connect_with_connector(tower::service_fn(move |_: Uri| {
                            let sock = sock.clone();
                            async move {
                                Ok::<_, std::io::Error>(TokioIo::new(
                                    tokio::net::UnixStream::connect(sock).await?,
                                ))
                            }
                        })),
                )
                .await
            })
            .map_err(|_| tonic::Status::unavailable("connecting timed out"))?
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let c = RuntimeServiceClient::new(channel);
        *slot = Some(c.clone());
        Ok(c)
    }

    /// One CRI call (`f` is given a client); a timeout of 120 s is an error.
    pub fn try_call<T, F, Fut>(&self, f: F) -> Result<T, tonic::Status>
    where
        F: FnOnce(RuntimeServiceClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let c = self.client()?;
        self.rt
            .block_on(async { tokio::time::timeout(Duration::from_secs(120), f(c)).await })
            .map_err(|_| tonic::Status::deadline_exceeded("CRI call took over 120 s"))?
            .map(tonic::Response::into_inner)
    }

    /// One CRI call that must succeed: panics with `what` and containerd's log otherwise.
    pub fn call<T, F, Fut>(&self, what: &str, f: F) -> T
    where
        F: FnOnce(RuntimeServiceClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        self.try_call(f).unwrap_or_else(|e| {
            panic!(
                "CRI {what}: {} {}\n--- containerd log:\n{}",
                e.code(),
                e.message(),
                self.log_tail()
            )
        })
    }

    /// A host-network pod's config as kubelet sends it: metadata with a unique uid, the log
    /// directory, no hostname (no CNI here).
    pub fn pod_config(&self, name: &str) -> cri::PodSandboxConfig {
        let uid = format!("{name}-{}-{}", std::process::id(), unique());
        let logs = self
            .path("var/log/pods")
            .join(format!("default_{name}_{uid}"));
        std::fs::create_dir_all(&logs).unwrap();
        cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: name.into(),
                uid,
                namespace: "default".into(),
                attempt: 0,
            }),
            log_directory: logs.display().to_string(),
            linux: Some(cri::LinuxPodSandboxConfig {
                security_context: Some(cri::LinuxSandboxSecurityContext {
                    namespace_options: Some(cri::NamespaceOption {
                        network: cri::NamespaceMode::Node as i32,
                        pid: cri::NamespaceMode::Container as i32,
                        ipc: cri::NamespaceMode::Pod as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// RunPodSandbox with `config` under runtime handler `handler` ("" for the default).
    pub fn run_pod(&self, config: cri::PodSandboxConfig, handler: &str) -> Pod {
        let id = self
            .try_run_pod(config.clone(), handler)
            .unwrap_or_else(|e| {
                panic!(
                    "CRI RunPodSandbox: {e}\n--- containerd log:\n{}",
                    self.log_tail()
                )
            });
        Pod { id, config }
    }

    /// RunPodSandbox that may fail; the sandbox id.
    pub fn try_run_pod(
        &self,
        config: cri::PodSandboxConfig,
        handler: &str,
    ) -> Result<String, tonic::Status> {
        let req = cri::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: handler.into(),
        };
        let id = self
            .try_call(|mut c| async move { c.run_pod_sandbox(req).await })?
            .pod_sandbox_id;
        self.pods.lock().unwrap().push(id.clone());
        Ok(id)
    }

    /// A container config: the busybox image running `sh -c script`, logging to `<name>.log`.
    pub fn container_config(&self, name: &str, script: &str) -> cri::ContainerConfig {
        cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: name.into(),
                attempt: 0,
            }),
            image: Some(cri::ImageSpec {
                image: IMAGE.into(),
                ..Default::default()
            }),
            command: vec!["sh".into(), "-c".into(), script.into()],
            log_path: format!("{name}.log"),
            linux: Some(cri::LinuxContainerConfig::default()),
            ..Default::default()
        }
    }

    /// CreateContainer in `pod`; the container id.
    pub fn create_container(&self, pod: &Pod, config: cri::ContainerConfig) -> String {
        self.try_create_container(pod, config).unwrap_or_else(|e| {
            panic!(
                "CRI CreateContainer: {e}\n--- containerd log:\n{}",
                self.log_tail()
            )
        })
    }

    /// CreateContainer that may fail.
    pub fn try_create_container(
        &self,
        pod: &Pod,
        config: cri::ContainerConfig,
    ) -> Result<String, tonic::Status> {
        let req = cri::CreateContainerRequest {
            pod_sandbox_id: pod.id.clone(),
            config: Some(config),
            sandbox_config: Some(pod.config.clone()),
        };
        let id = self
            .try_call(|mut c| async move { c.create_container(req).await })?
            .container_id;
        self.containers.lock().unwrap().push(id.clone());
        Ok(id)
    }

    /// StartContainer that may fail (a createRuntime hook that fails fails it).
    pub fn try_start_container(&self, id: &str) -> Result<(), tonic::Status> {
        let req = cri::StartContainerRequest {
            container_id: id.into(),
        };
        self.try_call(|mut c| async move { c.start_container(req).await })
            .map(|_| ())
    }

    /// StartContainer.
    pub fn start_container(&self, id: &str) {
        self.try_start_container(id).unwrap_or_else(|e| {
            panic!(
                "CRI StartContainer: {e}\n--- containerd log:\n{}",
                self.log_tail()
            )
        })
    }

    /// ContainerStatus.
    pub fn container_status(&self, id: &str) -> cri::ContainerStatus {
        let req = cri::ContainerStatusRequest {
            container_id: id.into(),
            verbose: false,
        };
        self.call("ContainerStatus", |mut c| async move {
            c.container_status(req).await
        })
        .status
        .expect("a status")
    }

    /// Waits up to `timeout` for the container to exit; its exit code.
    pub fn wait_exit(&self, id: &str, timeout: Duration) -> i32 {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.container_status(id);
            if s.state == cri::ContainerState::ContainerExited as i32 {
                return s.exit_code;
            }
            assert!(
                Instant::now() < deadline,
                "container {id} still {:?} after {timeout:?}",
                s.state
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The container's log as its processes wrote it (CRI's timestamp and stream stripped).
    pub fn container_log(&self, pod: &Pod, config: &cri::ContainerConfig) -> String {
        let p = Path::new(&pod.config.log_directory).join(&config.log_path);
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        let mut out = String::new();
        for line in text.lines() {
            let mut f = line.splitn(4, ' ');
            let (_ts, _stream, tag, msg) = (f.next(), f.next(), f.next(), f.next());
            out.push_str(msg.unwrap_or(""));
            if tag != Some("P") {
                out.push('\n');
            }
        }
        out
    }

    /// Creates, starts and waits for a container in `pod` (up to 60 s): its id, exit code and log.
    pub fn run_container(&self, pod: &Pod, config: cri::ContainerConfig) -> Ran {
        let id = self.create_container(pod, config.clone());
        self.start_container(&id);
        let exit_code = self.wait_exit(&id, Duration::from_secs(60));
        // The log is complete once the shim reported the exit; give the writer a moment.
        std::thread::sleep(Duration::from_millis(100));
        Ran {
            id,
            exit_code,
            log: self.container_log(pod, &config),
        }
    }

    /// UpdateContainerResources as kubelet sends it (its CPU manager: only `cpuset_cpus`; an
    /// in-place resize: quota and period); the error, if the runtime (or an NRI plugin) fails it.
    pub fn update_container_resources(
        &self,
        id: &str,
        resources: cri::LinuxContainerResources,
    ) -> Result<(), tonic::Status> {
        let req = cri::UpdateContainerResourcesRequest {
            container_id: id.to_string(),
            linux: Some(resources),
            ..Default::default()
        };
        self.try_call(|mut c| async move { c.update_container_resources(req).await })
            .map(|_| ())
    }

    /// StopContainer with a grace period of `timeout_s`.
    pub fn stop_container(&self, id: &str, timeout_s: i64) {
        let req = cri::StopContainerRequest {
            container_id: id.into(),
            timeout: timeout_s,
        };
        self.call("StopContainer", |mut c| async move {
            c.stop_container(req).await
        });
    }

    /// RemoveContainer (it is stopped first if it runs).
    pub fn remove_container(&self, id: &str) {
        let req = cri::RemoveContainerRequest {
            container_id: id.into(),
        };
        self.call("RemoveContainer", |mut c| async move {
            c.remove_container(req).await
        });
        self.containers.lock().unwrap().retain(|c| c != id);
    }

    /// StopPodSandbox and RemovePodSandbox.
    pub fn remove_pod(&self, pod: &Pod) {
        let id = pod.id.clone();
        self.call("StopPodSandbox", |mut c| async move {
            c.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: id })
                .await
        });
        let id = pod.id.clone();
        self.call("RemovePodSandbox", |mut c| async move {
            c.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id })
                .await
        });
        self.pods.lock().unwrap().retain(|p| *p != pod.id);
    }

    /// The OCI runtime spec containerd gave container (or sandbox) `id`, from its metadata
    /// (`ctr containers info`): there from CreateContainer until RemoveContainer.
    pub fn oci_spec(&self, id: &str) -> Value {
        let r = self.ctr(&["containers", "info", id]);
        assert_eq!(r.rc, 0, "ctr containers info {id}: {}", r.err);
        let info: Value = serde_json::from_str(&r.out).expect("ctr containers info prints JSON");
        info["Spec"].clone()
    }

    /// The bundle directory of a task `id`.
    pub fn bundle(&self, id: &str) -> PathBuf {
        self.path("run/containerd/io.containerd.runtime.v2.task")
            .join(NAMESPACE)
            .join(id)
    }

    /// Creates kubelet's pod cgroup (cgroupfs driver) `/kubepods/<qos>/pod<uid>`, or
    /// `/kubepods/pod<uid>` for a Guaranteed pod (`qos` `None`), in the cpu hierarchy with
    /// `cpu.cfs_quota_us`/`cpu.cfs_period_us` set when given; the path to give as `cgroup_parent`.
    /// Dropping the node removes it (and `kubepods/<qos>`, `kubepods` once empty) everywhere.
    pub fn pod_cgroup(&self, qos: Option<&str>, uid: &str, quota: Option<(i64, i64)>) -> String {
        let rel = match qos {
            Some(q) => format!("kubepods/{q}/pod{uid}"),
            None => format!("kubepods/pod{uid}"),
        };
        let dir = cpu_hierarchy().join(&rel);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        self.cgroups.lock().unwrap().push(rel.clone());
        if let Some((q, p)) = quota {
            std::fs::write(dir.join("cpu.cfs_period_us"), p.to_string()).unwrap();
            std::fs::write(dir.join("cpu.cfs_quota_us"), q.to_string()).unwrap();
        }
        format!("/{rel}")
    }

    /// `config` with `/dev/nvidiaN` given through CRI `devices`, from a `195:N` node made under
    /// the node root (`T/dev/nvidiaN`).
    pub fn with_gpu(&self, mut config: cri::ContainerConfig, n: u64) -> cri::ContainerConfig {
        let host = self.path(&format!("dev/nvidia{n}"));
        if !host.exists() {
            std::fs::create_dir_all(host.parent().unwrap()).unwrap();
            nix::sys::stat::mknod(
                &host,
                nix::sys::stat::SFlag::S_IFCHR,
                nix::sys::stat::Mode::from_bits_truncate(0o666),
                nix::sys::stat::makedev(195, n),
            )
            .unwrap();
        }
        config.devices.push(cri::Device {
            container_path: format!("/dev/nvidia{n}"),
            host_path: host.display().to_string(),
            permissions: "rw".into(),
        });
        config
    }

    /// Waits up to 30 s until the running container's log holds `marker`; the log.
    pub fn wait_log(&self, pod: &Pod, config: &cri::ContainerConfig, marker: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let log = self.container_log(pod, config);
            if log.contains(marker) {
                return log;
            }
            assert!(
                Instant::now() < deadline,
                "no {marker:?} in the container's log: {log}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Lays out at `host` a root holding the node's `ctr` (at `usr/bin/ctr`) and the libraries
    /// it loads (hard links, copies across filesystems): what `install --ctr-root` runs chrooted.
    pub fn ctr_root(&self, host: &Path) {
        let ctr = self.flavour.ctr();
        let ldd = Command::new("ldd").arg(&ctr).output().unwrap();
        let libs: Vec<PathBuf> = String::from_utf8_lossy(&ldd.stdout)
            .split_whitespace()
            .filter(|w| w.starts_with('/'))
            .map(PathBuf::from)
            .collect();
        let put = |from: &Path, to: PathBuf| {
            // Laid out already (a second install): a copy over a hard link would write the
            // original.
            if to.exists() {
                return;
            }
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            let real = std::fs::canonicalize(from).unwrap();
            if std::fs::hard_link(&real, &to).is_err() {
                std::fs::copy(&real, &to).unwrap();
            }
        };
        put(&ctr, host.join("usr/bin/ctr"));
        for lib in libs {
            put(&lib, host.join(lib.strip_prefix("/").unwrap()));
        }
    }

    /// The runtime spec the node's `ctr oci spec` prints (its containerd's default spec).
    pub fn ctr_default_spec(&self) -> Value {
        let out = Command::new(self.flavour.ctr())
            .args(["oci", "spec"])
            .output()
            .unwrap();
        assert!(out.status.success());
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

impl Default for CriNode {
    fn default() -> Self {
        Self::new()
    }
}

/// A number unique within this test process.
pub fn unique() -> u64 {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The cgroup v1 cpu hierarchy's mount point.
pub fn cpu_hierarchy() -> PathBuf {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    for l in mounts.lines() {
        let Some((pre, post)) = l.split_once(" - ") else {
            continue;
        };
        let mut p = post.split(' ');
        if p.next() == Some("cgroup") && p.nth(1).is_some_and(|o| o.split(',').any(|o| o == "cpu"))
        {
            return PathBuf::from(pre.split(' ').nth(4).unwrap());
        }
    }
    panic!("no cgroup v1 cpu hierarchy (the CRI tests read kubelet's layout on it)")
}

/// Every cgroup hierarchy's mount point.
fn hierarchies() -> Vec<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let fs = post.split(' ').next()?;
            let mount = PathBuf::from(pre.split(' ').nth(4)?);
            (fs == "cgroup" || fs == "cgroup2").then_some(mount)
        })
        .collect()
}

/// Removes, bottom-up, every directory below `dir` (to `depth` levels) whose name is in `names`.
fn remove_named(dir: &Path, names: &[String], depth: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if !e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            continue;
        }
        let p = e.path();
        if depth > 0 {
            remove_named(&p, names, depth - 1);
        }
        if names.iter().any(|n| e.file_name() == n.as_str()) {
            let _ = std::fs::remove_dir(&p);
        }
    }
}

impl Drop for CriNode {
    fn drop(&mut self) {
        let containers = self.containers.lock().unwrap().clone();
        let pods = self.pods.lock().unwrap().clone();
        if self.child.lock().unwrap().is_some() {
            for id in &containers {
                let req = cri::RemoveContainerRequest {
                    container_id: id.clone(),
                };
                let _ = self.try_call(|mut c| async move { c.remove_container(req).await });
            }
            for id in &pods {
                let (a, b) = (id.clone(), id.clone());
                let _ = self.try_call(|mut c| async move {
                    c.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: a })
                        .await
                });
                let _ = self.try_call(|mut c| async move {
                    c.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: b })
                        .await
                });
            }
        }
        self.stop_daemon();
        // Whatever outlived the daemon: shims by the pid they recorded, then runc's containers.
        let tasks = self
            .path("run/containerd/io.containerd.runtime.v2.task")
            .join(NAMESPACE);
        let mut ids: Vec<String> = containers.iter().chain(&pods).cloned().collect();
        if let Ok(entries) = std::fs::read_dir(&tasks) {
            for e in entries.flatten() {
                ids.push(e.file_name().to_string_lossy().into_owned());
                if let Ok(pid) = std::fs::read_to_string(e.path().join("shim.pid")) {
                    if let Ok(pid) = pid.trim().parse::<i32>() {
                        let _ = nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(pid),
                            nix::sys::signal::Signal::SIGKILL,
                        );
                    }
                }
                // The shim's socket lives in containerd's global /run/containerd/s.
                if let Ok(addr) = std::fs::read_to_string(e.path().join("address")) {
                    if let Some(p) = addr.trim().strip_prefix("unix://") {
                        if p.starts_with("/run/containerd/s/") {
                            let _ = std::fs::remove_file(p);
                        }
                    }
                }
            }
        }
        let runc_root = self.path("run/runc");
        if let Ok(entries) = std::fs::read_dir(runc_root.join(NAMESPACE)) {
            for e in entries.flatten() {
                let _ = Command::new("runc")
                    .arg("--root")
                    .arg(runc_root.join(NAMESPACE))
                    .args(["delete", "-f"])
                    .arg(e.file_name())
                    .output();
            }
        }
        let t = self.root().display().to_string();
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut ours: Vec<&str> = mounts
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|m| m.starts_with(&t))
            .collect();
        ours.sort_unstable_by(|a, b| b.cmp(a));
        for m in ours {
            let _ = Command::new("umount").args(["-l", m]).output();
        }
        let parents = self.cgroups.lock().unwrap().clone();
        for h in hierarchies() {
            remove_named(&h, &ids, 5);
            // CRI's parent for pods without a cgroup_parent, when no other node uses it.
            let _ = std::fs::remove_dir(h.join(NAMESPACE));
            for rel in &parents {
                // pod<uid>, then <qos> and kubepods when nothing else is in them.
                let mut p = PathBuf::from(rel);
                loop {
                    let _ = std::fs::remove_dir(h.join(&p));
                    if !p.pop() || p.as_os_str().is_empty() {
                        break;
                    }
                }
            }
        }
    }
}

fn sha256(b: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(b))
}

fn tar_dir(b: &mut tar::Builder<Vec<u8>>, path: &str) {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Directory);
    h.set_mode(0o755);
    h.set_size(0);
    b.append_data(&mut h, path, std::io::empty()).unwrap();
}

fn tar_file(b: &mut tar::Builder<Vec<u8>>, path: &str, data: &[u8], mode: u32) {
    let mut h = tar::Header::new_gnu();
    h.set_mode(mode);
    h.set_size(data.len() as u64);
    b.append_data(&mut h, path, data).unwrap();
}

/// What an image holds besides busybox: volumes its config declares, char devices and
/// symbolic links in its layer.
#[derive(Debug, Clone, Copy, Default)]
pub struct ImageExtra<'a> {
    /// The config's `Volumes` (containerd copies the image's content there into each).
    pub volumes: &'a [&'a str],
    /// Char devices in the layer: path (relative), major, minor.
    pub char_devices: &'a [(&'a str, u32, u32)],
    /// Symbolic links in the layer: path (relative), target.
    pub links: &'a [(&'a str, &'a str)],
    /// Regular files in the layer: path (relative), bytes.
    pub files: &'a [(&'a str, &'a [u8])],
}

/// The char devices a `/dev` needs for a container to start when the runtime makes none (a
/// volume at `/dev`): null, zero, full, random, urandom, tty.
pub const STANDARD_NODES: &[(&str, u32, u32)] = &[
    ("null", 1, 3),
    ("zero", 1, 5),
    ("full", 1, 7),
    ("random", 1, 8),
    ("urandom", 1, 9),
    ("tty", 5, 0),
];

/// Writes an OCI image-layout tar at `out`: one layer with `/bin/busybox` and its applets, the
/// image `reference` (annotated for `ctr images import`) running `cmd`.
pub fn image_tar(out: &Path, reference: &str, cmd: &[&str]) {
    image_tar_with(out, reference, cmd, ImageExtra::default())
}

/// [`image_tar`] with `extra` in its config and layer.
pub fn image_tar_with(out: &Path, reference: &str, cmd: &[&str], extra: ImageExtra<'_>) {
    let busybox = std::fs::read(which("busybox")).expect("read busybox");
    let mut layer = tar::Builder::new(Vec::new());
    for d in ["bin", "proc", "sys", "dev", "tmp", "run", "etc"] {
        tar_dir(&mut layer, d);
    }
    for (path, major, minor) in extra.char_devices {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Char);
        h.set_mode(0o666);
        h.set_size(0);
        h.set_device_major(*major).unwrap();
        h.set_device_minor(*minor).unwrap();
        layer.append_data(&mut h, path, std::io::empty()).unwrap();
    }
    for (path, target) in extra.links {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_mode(0o777);
        h.set_size(0);
        layer.append_link(&mut h, path, target).unwrap();
    }
    tar_file(&mut layer, "bin/busybox", &busybox, 0o755);
    for (path, data) in extra.files {
        tar_file(&mut layer, path, data, 0o644);
    }
    for a in APPLETS {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_mode(0o777);
        h.set_size(0);
        layer
            .append_link(&mut h, format!("bin/{a}"), "busybox")
            .unwrap();
    }
    let layer = layer.into_inner().unwrap();
    let mut config = json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Cmd": cmd, "Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [sha256(&layer)]}
    });
    if !extra.volumes.is_empty() {
        let volumes: serde_json::Map<String, Value> = extra
            .volumes
            .iter()
            .map(|v| (v.to_string(), json!({})))
            .collect();
        config["config"]["Volumes"] = Value::Object(volumes);
    }
    let config = serde_json::to_vec(&config).unwrap();
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha256(&config), "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": sha256(&layer), "size": layer.len()}]
    }))
    .unwrap();
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": sha256(&manifest),
                       "size": manifest.len(), "annotations": {"io.containerd.image.name": reference}}]
    }))
    .unwrap();
    let mut outer = tar::Builder::new(Vec::new());
    tar_file(
        &mut outer,
        "oci-layout",
        br#"{"imageLayoutVersion":"1.0.0"}"#,
        0o644,
    );
    tar_file(&mut outer, "index.json", &index, 0o644);
    for blob in [&layer, &config, &manifest] {
        let name = format!("blobs/sha256/{}", &sha256(blob)[7..]);
        tar_file(&mut outer, &name, blob, 0o644);
    }
    std::fs::write(out, outer.into_inner().unwrap()).unwrap();
}

/// `config` with a CPU quota of `quota`/`period` µs.
pub fn quota(mut config: cri::ContainerConfig, quota: i64, period: i64) -> cri::ContainerConfig {
    let linux = config.linux.get_or_insert_with(Default::default);
    let r = linux.resources.get_or_insert_with(Default::default);
    r.cpu_quota = quota;
    r.cpu_period = period;
    config
}

/// A 2-CPU host with two GPUs under `root/gpu-host` (made once): 0000:3b:00.0 (`/dev/nvidia0`,
/// local CPUs 0-1, node 0) and 0000:86:00.0 (`/dev/nvidia1`, local CPU 1, no node), built from
/// `tests/fixtures/e2e-host`; a `topology_root`.
pub fn gpu_host(root: &Path) -> PathBuf {
    let g = root.join("gpu-host");
    if g.exists() {
        return g;
    }
    copy_tree(&fixtures().join("e2e-host"), &g);
    let a = g.join("sys/bus/pci/devices/0000:3b:00.0");
    std::fs::write(a.join("local_cpulist"), "0-1\n").unwrap();
    let b = g.join("sys/bus/pci/devices/0000:86:00.0");
    copy_tree(&a, &b);
    std::fs::write(b.join("local_cpulist"), "1\n").unwrap();
    std::fs::write(b.join("numa_node"), "-1\n").unwrap();
    let info = g.join("proc/driver/nvidia/gpus");
    let text = std::fs::read_to_string(info.join("0000:3b:00.0/information")).unwrap();
    std::fs::create_dir_all(info.join("0000:86:00.0")).unwrap();
    std::fs::write(
        info.join("0000:86:00.0/information"),
        text.replace("0000:3b:00.0", "0000:86:00.0")
            .replace("Device Minor: \t 0", "Device Minor: \t 1"),
    )
    .unwrap();
    g
}

/// Copies the tree `from` to `to` (directories and regular files).
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let p = e.path();
        if e.file_type().unwrap().is_dir() {
            copy_tree(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

/// The lines of `out` after the line `--- NAME` up to the next `--- ` line (a probe's section).
pub fn section<'a>(out: &'a str, name: &str) -> &'a str {
    let Some(i) = out.find(&format!("--- {name}\n")) else {
        panic!("no section {name} in:\n{out}");
    };
    let rest = &out[i + name.len() + 5..];
    let end = if rest.starts_with("--- ") {
        0
    } else {
        rest.find("\n--- ").map(|i| i + 1).unwrap_or(rest.len())
    };
    &rest[..end]
}

/// `KEY -> VALUE` of an annotations map, for building configs tersely.
pub fn annotations(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Every file below `dir` with its bytes.
pub fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut acc = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                acc.push((e.path(), Vec::new()));
                stack.push(e.path());
            } else {
                acc.push((e.path(), std::fs::read(e.path()).unwrap()));
            }
        }
    }
    acc.sort();
    acc
}
