//! `cpuplan-nri` against a real containerd 1.7 with CRI and NRI on: a private containerd
//! (its config from `containerd config default`, its own root, state, sockets and NRI socket
//! under a temp dir, snapshotter `native`, `restrict_oom_score_adj`, the sandbox image
//! imported), and the plugin as the runtime sees it: external (connecting to the NRI socket,
//! reconnecting when containerd restarts) and pre-launched (started by containerd from its
//! plugin directory as `10-cpuplan`), both planning (the stub's own protocol tests, with its
//! recording example plugin, are `crates/nri/tests/it/containerd.rs`). What goes through CRI (pods,
//! containers, the plans) is in `tests/cri/nri_node.rs`.

use common::procs;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::hookbin::nri_bin;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use procs::processes_running;

/// How long the tests wait for containerd or the plugin to do something.
const WAIT: Duration = Duration::from_secs(20);

/// Fails (never skips) unless this runs as root with a containerd >= 1.7 (NRI), ctr, runc,
/// busybox and python3 (which writes the image tars).
fn require_node() {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "the NRI tests run as root (CI does)"
    );
    let out = Command::new("containerd")
        .arg("--version")
        .output()
        .expect("containerd is missing: .ci/run installs containerd 1.7 (Debian trixie)");
    let v = String::from_utf8_lossy(&out.stdout).to_string();
    let minor = v.split_whitespace().nth(2).and_then(|ver| {
        ver.trim_start_matches('v')
            .split('.')
            .nth(1)?
            .parse::<u32>()
            .ok()
    });
    assert!(
        v.contains(" 1.") && minor.is_some_and(|m| m >= 7),
        "NRI needs containerd >= 1.7, this is {v:?}: .ci/run installs containerd/trixie"
    );
    for tool in ["ctr", "runc", "busybox", "python3"] {
        assert!(
            Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .is_ok_and(|o| o.status.success()),
            "{tool} is missing (.ci/run installs it)"
        );
    }
}

/// Polls `cond` every 100 ms until it holds, failing with `what` and `ctx()` after [`WAIT`].
fn wait_for(what: &str, ctx: impl Fn() -> String, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}\n{}",
            ctx()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A private containerd with CRI and NRI on.
struct Node {
    dir: tempfile::TempDir,
    /// The prelaunched plugin's claims directory's (a directory of the operator's).
    _operator: tempfile::TempDir,
    child: Option<Child>,
}

/// Writes an OCI image-layout tar holding busybox, as `shared/e2e/cri-node-demo.sh` does.
const MKIMG: &str = r#"
import hashlib, io, json, sys, tarfile
out, ref, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
layer = io.BytesIO()
with tarfile.open(fileobj=layer, mode='w') as t:
    for d in ('bin', 'proc', 'sys', 'dev', 'tmp', 'run', 'etc'):
        ti = tarfile.TarInfo(d); ti.type = tarfile.DIRTYPE; ti.mode = 0o755; t.addfile(ti)
    t.add('/bin/busybox', 'bin/busybox')
    for a in ('sh', 'sleep', 'cat', 'grep', 'env', 'true'):
        ti = tarfile.TarInfo('bin/' + a); ti.type = tarfile.SYMTYPE; ti.linkname = 'busybox'; t.addfile(ti)
def sha(b): return 'sha256:' + hashlib.sha256(b).hexdigest()
lb = layer.getvalue()
cfg = json.dumps({'architecture': 'amd64', 'os': 'linux', 'config': {'Cmd': cmd, 'Env': ['PATH=/bin']},
                  'rootfs': {'type': 'layers', 'diff_ids': [sha(lb)]}}).encode()
man = json.dumps({'schemaVersion': 2, 'mediaType': 'application/vnd.oci.image.manifest.v1+json',
    'config': {'mediaType': 'application/vnd.oci.image.config.v1+json', 'digest': sha(cfg), 'size': len(cfg)},
    'layers': [{'mediaType': 'application/vnd.oci.image.layer.v1.tar', 'digest': sha(lb), 'size': len(lb)}]}).encode()
idx = json.dumps({'schemaVersion': 2, 'manifests': [{'mediaType': 'application/vnd.oci.image.manifest.v1+json',
    'digest': sha(man), 'size': len(man), 'annotations': {'io.containerd.image.name': ref}}]}).encode()
with tarfile.open(out, 'w') as t:
    def add(name, data):
        ti = tarfile.TarInfo(name); ti.size = len(data); t.addfile(ti, io.BytesIO(data))
    add('oci-layout', b'{"imageLayoutVersion":"1.0.0"}'); add('index.json', idx)
    for b in (lb, cfg, man): add('blobs/sha256/' + sha(b)[7:], b)
"#;

/// The sandbox (pause) image the node's CRI uses.
const SANDBOX_IMAGE: &str = "localhost/pause:1";

impl Node {
    /// Starts a node; with `prelaunch`, the plugin binary is in its plugin directory as
    /// `10-cpuplan` first, so containerd launches it.
    fn start(prelaunch: bool) -> Node {
        require_node();
        let dir = tempfile::Builder::new()
            .prefix("cpuplan-nri-")
            .tempdir()
            .expect("tempdir");
        let t = dir.path();
        for d in ["nri-plugins", "nri-conf", "logs"] {
            std::fs::create_dir_all(t.join(d)).unwrap();
        }
        let out = Command::new("containerd")
            .args(["config", "default"])
            .output()
            .expect("containerd config default");
        assert!(out.status.success(), "containerd config default failed");
        let mut config = String::from_utf8(out.stdout).expect("utf-8 config");
        let td = t.display();
        for (from, to) in [
            (
                r#"root = "/var/lib/containerd""#.to_string(),
                format!(r#"root = "{td}/root""#),
            ),
            (
                r#"state = "/run/containerd""#.into(),
                format!(r#"state = "{td}/state""#),
            ),
            (
                r#"address = "/run/containerd/containerd.sock""#.into(),
                format!(r#"address = "{td}/containerd.sock""#),
            ),
            (
                "[plugins.\"io.containerd.nri.v1.nri\"]\n    disable = true".into(),
                "[plugins.\"io.containerd.nri.v1.nri\"]\n    disable = false".into(),
            ),
            (
                r#"socket_path = "/var/run/nri/nri.sock""#.into(),
                format!(r#"socket_path = "{td}/nri.sock""#),
            ),
            (
                r#"plugin_path = "/opt/nri/plugins""#.into(),
                format!(r#"plugin_path = "{td}/nri-plugins""#),
            ),
            (
                r#"plugin_config_path = "/etc/nri/conf.d""#.into(),
                format!(r#"plugin_config_path = "{td}/nri-conf""#),
            ),
            (
                r#"sandbox_image = "registry.k8s.io/pause:3.8""#.into(),
                format!(r#"sandbox_image = "{SANDBOX_IMAGE}""#),
            ),
            (
                r#"snapshotter = "overlayfs""#.into(),
                r#"snapshotter = "native""#.into(),
            ),
            (
                "restrict_oom_score_adj = false".into(),
                "restrict_oom_score_adj = true".into(),
            ),
        ] {
            assert!(
                config.contains(&from),
                "no {from:?} in containerd's default config"
            );
            config = config.replacen(&from, &to, 1);
        }
        std::fs::write(t.join("config.toml"), config).unwrap();
        let operator = common::operator_dir::tempdir();
        if prelaunch {
            let plugin = t.join("nri-plugins/10-cpuplan");
            std::fs::copy(nri_bin(), &plugin).expect("copy the plugin binary");
            std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
            // Its config, which NRI hands it at Configure: logging to stderr (containerd sends
            // it to /dev/null), never to the host's default log, its plans and claims here.
            let claims = operator.path().join("claims");
            std::fs::write(
                t.join("nri-conf/10-cpuplan.conf"),
                private_config(t, &claims),
            )
            .unwrap();
        }
        let mut node = Node {
            dir,
            _operator: operator,
            child: None,
        };
        node.launch();
        node.import(SANDBOX_IMAGE, &["sleep", "1000000"]);
        node
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// The NRI socket plugins connect to.
    fn nri_socket(&self) -> PathBuf {
        self.path("nri.sock")
    }

    /// containerd's log so far (all its runs).
    fn log(&self) -> String {
        std::fs::read_to_string(self.path("containerd.log")).unwrap_or_default()
    }

    /// Starts containerd (appending to its log) and waits until it answers.
    fn launch(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("containerd.log"))
            .unwrap();
        let child = Command::new("containerd")
            .arg("--config")
            .arg(self.path("config.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start containerd");
        self.child = Some(child);
        wait_for(
            "containerd to answer",
            || self.log(),
            || self.ctr(&["version"]).success(),
        );
    }

    /// `ctr --address SOCK --namespace k8s.io ARGS`.
    fn ctr(&self, args: &[&str]) -> ExitStatus {
        Command::new("timeout")
            .arg("60")
            .arg("ctr")
            .arg("--address")
            .arg(self.path("containerd.sock"))
            .args(["--namespace", "k8s.io"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("ctr")
    }

    /// Builds the busybox image `reference` (default command `cmd`) and imports it.
    fn import(&self, reference: &str, cmd: &[&str]) {
        let tar = self.path(&format!("{}.tar", reference.replace(['/', ':'], "_")));
        let ok = Command::new("python3")
            .arg("-c")
            .arg(MKIMG)
            .arg(&tar)
            .arg(reference)
            .args(cmd)
            .status()
            .expect("python3");
        assert!(ok.success(), "building the image {reference} failed");
        assert!(
            self.ctr(&["images", "import", tar.to_str().unwrap()])
                .success(),
            "ctr images import {reference} failed"
        );
    }

    /// Stops containerd (SIGTERM, then SIGKILL after 10 s) and waits for it.
    fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            procs::stop_gently(child, Duration::from_secs(10));
        }
    }

    /// Stops containerd and starts it again with the same config and state.
    fn restart(&mut self) {
        self.stop();
        self.launch();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop();
        let t = self.dir.path().display().to_string();
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
        let mut ours: Vec<&str> = mounts
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .filter(|m| m.starts_with(&t))
            .collect();
        ours.sort_by(|a, b| b.cmp(a));
        for m in ours {
            let _ = Command::new("umount").args(["-l", m]).status();
        }
    }
}

/// `cpuplan-nri ARGS` running as an external plugin, its stderr in a log file.
struct Plugin {
    child: Child,
    log: PathBuf,
    /// Its claims directory's (a directory of the operator's).
    _operator: tempfile::TempDir,
}

impl Plugin {
    /// Starts `cpuplan-nri --config CONFIG ARGS`, logging to `log` (stderr) only: CONFIG,
    /// beside `log`, says `"log": "stderr"` (never the host's config or its default log) and
    /// keeps its plans and claims beside it.
    fn spawn(args: &[&str], log: PathBuf) -> Plugin {
        let file = std::fs::File::create(&log).unwrap();
        let config = log.with_extension("config.json");
        let operator = common::operator_dir::tempdir();
        let claims = operator.path().join("claims");
        std::fs::write(&config, private_config(log.parent().unwrap(), &claims)).unwrap();
        let child = Command::new(nri_bin())
            .arg("--config")
            .arg(&config)
            .args(args)
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("start the plugin");
        Plugin {
            child,
            log,
            _operator: operator,
        }
    }

    /// An external plugin of `node`.
    fn external(node: &Node) -> Plugin {
        let socket = node.nri_socket();
        Plugin::spawn(
            &["--socket", socket.to_str().unwrap()],
            node.path("plugin.log"),
        )
    }

    /// The plugin's log so far.
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// How many lines of the plugin's log contain `what`.
    fn count(&self, what: &str) -> usize {
        self.log().lines().filter(|l| l.contains(what)).count()
    }

    /// Sends `sig` and waits for the plugin to exit; fails after 5 s.
    fn stop_with(&mut self, sig: Signal) -> ExitStatus {
        kill(Pid::from_raw(self.child.id() as i32), sig).unwrap();
        let status = common::procs::wait_at_most(&mut self.child, Duration::from_secs(5));
        status.unwrap_or_else(|| panic!("the plugin did not exit on {sig}:\n{}", self.log()))
    }

    /// Whether the plugin process is still running.
    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plugin config for tests: the log on stderr, plans under `dir`, claims in `claims`.
fn private_config(dir: &std::path::Path, claims: &std::path::Path) -> String {
    serde_json::json!({
        "log": "stderr",
        "nri_dir": dir.join("plans"),
        "claims_dir": claims,
    })
    .to_string()
}

/// How many lines of `log` contain `what`.
fn count(log: &str, what: &str) -> usize {
    log.lines().filter(|l| l.contains(what)).count()
}

/// containerd's log line for a plugin that registered as `10-cpuplan`.
const REGISTERED: &str = r#"registered as \"10-cpuplan\""#;
/// The plugin's log line once synchronized with an empty node.
const SYNCED_EMPTY: &str = "nri: synchronized with 0 pods and 0 containers";

#[test]
fn external_plugin_registers_is_configured_and_synchronized() {
    let node = Node::start(false);
    let mut plugin = Plugin::external(&node);
    let ctx = || format!("plugin:\n{}\ncontainerd:\n{}", plugin.log(), node.log());
    wait_for("the plugin to be synchronized", ctx, || {
        plugin.count(SYNCED_EMPTY) == 1
    });
    let log = plugin.log();
    assert_eq!(count(&log, "nri: registered as 10-cpuplan"), 1, "{log}");
    assert_eq!(
        count(&log, "nri: 10-cpuplan configured by containerd "),
        1,
        "Configure reached the plugin with the runtime's name: {log}"
    );
    assert_eq!(
        count(
            &log,
            "subscribed to CreateContainer,UpdateContainer,StopContainer,RemoveContainer"
        ),
        1,
        "{log}"
    );
    assert_eq!(
        count(
            &log,
            "synchronized with 0 pods and 0 containers: kept the plans of 0, dropped 0"
        ),
        1,
        "Synchronize reached the planner: {log}"
    );
    let clog = node.log();
    assert!(
        clog.contains(r#"plugin \"external:10-cpuplan["#) && clog.contains(REGISTERED),
        "containerd saw the registration:\n{clog}"
    );
    assert!(
        clog.contains("synchronizing plugin 10-cpuplan"),
        "containerd synchronized it:\n{clog}"
    );
    assert!(
        !clog.contains("invalid plugin events"),
        "containerd took the event mask:\n{clog}"
    );

    let st = plugin.stop_with(Signal::SIGTERM);
    assert!(
        st.success(),
        "SIGTERM is a clean exit: {st:?}\n{}",
        plugin.log()
    );
    assert_eq!(plugin.count("nri: stopping on SIGTERM"), 1);
    wait_for(
        "containerd to see the plugin go",
        || node.log(),
        || {
            node.log()
                .contains(r#"connection to plugin \"10-cpuplan\" closed"#)
        },
    );
}

#[test]
fn external_plugin_reconnects_and_resynchronizes_after_containerd_restarts() {
    let mut node = Node::start(false);
    let mut plugin = Plugin::external(&node);
    let ctx = || format!("plugin:\n{}\ncontainerd:\n{}", plugin.log(), node.log());
    wait_for("the first synchronization", ctx, || {
        plugin.count(SYNCED_EMPTY) == 1
    });
    node.restart();
    let ctx = || format!("plugin:\n{}\ncontainerd:\n{}", plugin.log(), node.log());
    wait_for("the plugin to reconnect and synchronize again", ctx, || {
        plugin.count(SYNCED_EMPTY) == 2
    });
    assert!(plugin.running(), "the external plugin outlives its runtime");
    let log = plugin.log();
    assert_eq!(
        count(&log, "nri: the runtime closed the connection"),
        1,
        "{log}"
    );
    assert_eq!(count(&log, "nri: registered as 10-cpuplan"), 2, "{log}");
    assert_eq!(count(&node.log(), REGISTERED), 2, "{}", node.log());
    assert!(plugin.stop_with(Signal::SIGINT).success());
    assert_eq!(plugin.count("nri: stopping on SIGINT"), 1);
}

#[test]
fn prelaunched_plugin_is_started_by_containerd_and_exits_with_it() {
    // containerd starts the plugin without arguments: it opens no log before Configure, and
    // then the stderr-only config NRI hands it (nri-conf/10-cpuplan.conf).
    let mut node = Node::start(true);
    let plugin = node.path("nri-plugins/10-cpuplan");
    wait_for(
        "containerd to launch and register the plugin",
        || node.log(),
        || {
            let log = node.log();
            log.contains(r#"plugin \"pre-connected:10-cpuplan["#) && log.contains(REGISTERED)
        },
    );
    // configured: only then is it in the invocation order
    wait_for(
        "the plugin to be configured",
        || node.log(),
        || {
            node.log()
                .contains(r#"#1: \"10-cpuplan\" (pre-connected:10-cpuplan["#)
        },
    );
    let pids = processes_running(&plugin);
    assert_eq!(pids.len(), 1, "one plugin process: {pids:?}");
    node.stop();
    wait_for(
        "the plugin to exit once its runtime is gone",
        || format!("{pids:?} still running"),
        || processes_running(&plugin).is_empty(),
    );
}

#[test]
fn sigterm_stops_a_plugin_still_waiting_for_its_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("no-runtime.sock");
    let mut plugin = Plugin::spawn(
        &["--socket", socket.to_str().unwrap()],
        dir.path().join("plugin.log"),
    );
    wait_for(
        "a failed connection and a retry",
        || plugin.log(),
        || plugin.count("nri: reconnecting in") >= 2,
    );
    assert!(
        plugin.count("cannot connect to the NRI socket") >= 2,
        "{}",
        plugin.log()
    );
    let st = plugin.stop_with(Signal::SIGTERM);
    assert!(st.success(), "{st:?}");
    assert_eq!(
        plugin.count("nri: stopping on SIGTERM"),
        1,
        "{}",
        plugin.log()
    );
}

#[test]
fn nri_command_line() {
    let help = Command::new(nri_bin()).arg("--help").output().unwrap();
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.contains("--socket PATH") && text.contains("NRI_PLUGIN_SOCKET"),
        "{text}"
    );
    for bad in [&["--index", "1"][..], &["--bogus"], &["--name"], &["nri"]] {
        let out = Command::new(nri_bin()).args(bad).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
    }
    // a pre-connected socket that is not a socket: refused at once
    let out = Command::new(nri_bin())
        .env("NRI_PLUGIN_SOCKET", "1")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("NRI_PLUGIN_SOCKET"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
