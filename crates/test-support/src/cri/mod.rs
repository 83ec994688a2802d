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
//! image-layout tars and imported: no registry). `cpuplan install --containerd
//! --root-prefix T` registers the hook with it before [`CriNode::start`].
//!
//! The settings this machine needs: `restrict_oom_score_adj = true` (no `CAP_SYS_RESOURCE`),
//! `SystemdCgroup = false` (no systemd), the `native` snapshotter, host-network pods without a
//! hostname (no CNI). Dropping the node removes every container, pod, shim, mount and cgroup
//! it started or created, and stops the daemon.
//!
//! The node is in `node.rs` and `daemon.rs`, its config in `config.rs`, the CRI calls in
//! `api.rs`, its teardown in `teardown.rs`, the images in `image.rs`.
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
    /// Where the node's `claims_dir` is ([`CriNode::claims_dir`]): a directory the hook takes
    /// as the operator's, which none under `/tmp` is.
    pub operator: tempfile::TempDir,
    flavour: Containerd,
    rt: tokio::runtime::Runtime,
    child: Mutex<Option<Child>>,
    client: Mutex<Option<RuntimeServiceClient<Channel>>>,
    pods: Mutex<Vec<String>>,
    containers: Mutex<Vec<String>>,
    cgroups: Mutex<Vec<String>>,
    imported: Mutex<bool>,
}

mod api;
mod config;
mod daemon;
mod image;
mod node;
mod teardown;
mod util;

pub use api::connect;
pub use image::*;
pub use teardown::{cpu_hierarchy, unique};
pub use util::*;
