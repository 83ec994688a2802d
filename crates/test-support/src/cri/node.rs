//! The node's construction and its paths.

use super::*;

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
        super::teardown::LIVE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        // The shims of nodes whose test process was killed before its teardown.
        crate::procs::stop_orphaned_shims(&std::env::temp_dir(), "cpuplan-cri-");
        let dir = tempfile::Builder::new()
            .prefix("cpuplan-cri-")
            .tempdir()
            .expect("tempdir");
        crate::log_guard::mark_dir(dir.path());
        let node = CriNode {
            dir,
            operator: crate::operator_dir::tempdir(),
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

    /// The node's GPU claims directory, in a directory of the operator's
    /// ([`crate::operator_dir`]).
    pub fn claims_dir(&self) -> PathBuf {
        self.operator.path().join("claims")
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
}
