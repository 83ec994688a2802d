//! The NRI plugin on the CRI node (`crates/test-support/src/cri/`), for `tests/cri/nri_node.rs` and
//! `tests/cri/nri_trust.rs`: the plugin's config on the node, the plugin process started by a test,
//! the probe containers' script, and waiting. A test that uses it says `mod common;`,
//! `#[path = "common/cri.rs"] mod cri;` and `#[path = "common/nriplugin.rs"] mod nriplugin;`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};

use crate::cri::{self, gpu_host, section, CriNode};

/// The plugin binary the external plugins run, `cpuplan-nri`: `CPUPLAN_NRI_BIN` runs another
/// build of it under the same tests.
pub fn plugin_bin() -> String {
    std::env::var("CPUPLAN_NRI_BIN")
        .unwrap_or_else(|_| crate::statics::bin("cpuplan-nri").display().to_string())
}
/// The plugin's `INDEX-NAME` (the defaults).
pub const PLUGIN: &str = "10-cpuplan";
/// Its claims' scope.
pub const SCOPE: &str = "nri:10-cpuplan";
/// How long the tests wait for the plugin or containerd to do something.
pub const WAIT: Duration = Duration::from_secs(20);

/// What the test containers print: their own environment, the plan directory's mount, a write
/// into it, their CPUs, and the plan files. Only stdout: CRI logs stderr as another stream,
/// which may land in an earlier section (a missing plan file's `cat` error among the mounts).
pub const PROBE: &str = r#"echo '--- env'; env | sort
echo '--- mounts'; grep ' /dev/cpuplan ' /proc/mounts
echo '--- write'; (echo x > /dev/cpuplan/x) 2>&1 || echo refused
echo "--- cpus"; sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status
echo '--- planenv'; cat /dev/cpuplan/plan.env 2>/dev/null; echo '--- planjson'; cat /dev/cpuplan/plan.json 2>/dev/null; echo '--- end'"#;

/// Polls `cond` every 50 ms until it holds; fails with `what` and `ctx()` after [`WAIT`].
pub fn wait_until(what: &str, ctx: impl Fn() -> String, cond: impl Fn() -> bool) {
    crate::nri_node::wait_within(WAIT, what, ctx, cond)
}

/// The plugin's config for `node`, written at `T/etc/cpuplan/hook.json`: the fake GPU host as
/// topology, claims, plans and log under the node root, and `extra`'s keys.
pub fn plugin_config(node: &CriNode, extra: Value) -> PathBuf {
    let p = node.path("etc/cpuplan/hook.json");
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, config_text(node, extra)).unwrap();
    p
}

/// The text of [`plugin_config`].
pub fn config_text(node: &CriNode, extra: Value) -> String {
    let mut cfg = json!({
        "step_thread_core": "auto",
        "topology_root": gpu_host(node.root()),
        "claims_dir": node.claims_dir(),
        "nri_dir": node.path("run/cpuplan/nri"),
        "log": node.path("var/log/cpuplan-nri.log"),
    });
    for (k, v) in extra.as_object().unwrap() {
        cfg[k] = v.clone();
    }
    serde_json::to_string_pretty(&cfg).unwrap()
}

/// The plugin's host directory of plans on `node`.
pub fn nri_dir(node: &CriNode) -> PathBuf {
    node.path("run/cpuplan/nri")
}

/// The probes' state file of the plugins started on `node` ([`Plugin::start`]).
pub fn state_file(node: &CriNode) -> PathBuf {
    node.path("run/cpuplan-nri/state")
}

/// The names in the plugin's `nri_dir` on `node`, sorted, less its instance lock (which stays
/// while the plugin runs and after it).
pub fn plans_left(node: &CriNode) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(nri_dir(node))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n != cpuplan_hook::nri::instance::LOCK_FILE)
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// `cpuplan claims --json` with the plugin's config.
pub fn claims(node: &CriNode) -> Value {
    crate::podman::claims_json(&node.path("etc/cpuplan/hook.json"))
}

/// The plan files inside a probe's output.
pub fn plan_json(out: &str) -> Value {
    serde_json::from_str(section(out, "planjson")).unwrap_or_else(|e| panic!("{e}:\n{out}"))
}

/// A plugin started by the test: `cpuplan-nri --config CONFIG --socket S --log L ARGS`,
/// its stderr in `L.stderr`. Dropping it kills it (a stopped one too).
pub struct Plugin {
    child: Child,
    log: PathBuf,
}

impl Plugin {
    /// Starts an external plugin of `node` with `config` and `args`, logging to a file of its own.
    pub fn spawn(node: &CriNode, config: &Path, args: &[&str]) -> Plugin {
        let mut argv = vec![
            "--config".to_string(),
            config.display().to_string(),
            "--socket".into(),
            node.nri_socket().display().to_string(),
        ];
        argv.extend(args.iter().map(|a| a.to_string()));
        Plugin::start(node, argv)
    }

    /// Starts `cpuplan-nri ARGV --log L`, `L` a log file of its own under the node (and, without
    /// `--state`, `--state` [`state_file`]: not the host's `/run`).
    pub fn start(node: &CriNode, mut argv: Vec<String>) -> Plugin {
        let log = node.path(&format!("var/log/nri-plugin-{}.log", cri::unique()));
        std::fs::create_dir_all(log.parent().unwrap()).unwrap();
        let stderr = std::fs::File::create(log.with_extension("stderr")).unwrap();
        argv.extend(["--log".to_string(), log.display().to_string()]);
        if !argv.iter().any(|a| a == "--state") {
            argv.extend([
                "--state".to_string(),
                state_file(node).display().to_string(),
            ]);
        }
        let child = Command::new(plugin_bin())
            .args(&argv)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start the plugin");
        Plugin { child, log }
    }

    /// An external planning plugin of `node`, registered and synchronized.
    pub fn external(node: &CriNode, config: &Path) -> Plugin {
        let p = Plugin::spawn(node, config, &[]);
        p.wait_for(node, "nri: synchronized with", 1);
        p
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its log so far (and its stderr, where a panic would go).
    pub fn log(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        match std::fs::read_to_string(self.log.with_extension("stderr")) {
            Ok(e) if e.contains("panicked") => format!("{log}\n--- stderr:\n{e}"),
            _ => log,
        }
    }

    /// How many lines of its log contain `what`.
    pub fn count(&self, what: &str) -> usize {
        self.log().lines().filter(|l| l.contains(what)).count()
    }

    /// Waits until `n` lines of its log contain `what`.
    pub fn wait_for(&self, node: &CriNode, what: &str, n: usize) {
        wait_until(
            &format!("{n} plugin log lines with {what:?}"),
            || context(node, &self.log()),
            || self.count(what) >= n,
        );
    }

    /// Sends it `sig`.
    pub fn signal(&self, sig: Signal) {
        kill(Pid::from_raw(self.pid() as i32), sig).unwrap();
    }
}

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A failure's context: the plugin's log and containerd's.
pub fn context(node: &CriNode, plugin_log: &str) -> String {
    format!(
        "--- plugin log:\n{plugin_log}\n--- containerd log:\n{}",
        node.log_tail()
    )
}

/// The lines of containerd's `log` that tell of NRI trouble: any mentioning NRI with "failed"
/// (`NRI failed to remove container`, `NRI container update failed`, ...), and any logged at
/// level warning or error that mentions NRI or the plugin (`failed to handle CreateContainer
/// request`, a plugin's connection lost).
pub fn nri_trouble(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| {
            let lower = l.to_lowercase();
            let about = lower.contains("nri") || l.contains(PLUGIN);
            let bad = ["level=error", "level=warning", "level=fatal", "level=panic"]
                .iter()
                .any(|lv| l.contains(lv));
            (l.contains("NRI") && lower.contains("failed")) || (about && bad)
        })
        .collect()
}

/// Fails when containerd's log on `node` tells of NRI trouble so far ([`nri_trouble`]).
pub fn assert_nri_quiet(node: &CriNode) {
    let log = node.log();
    let bad = nri_trouble(&log);
    assert!(
        bad.is_empty(),
        "{} logged NRI trouble with the plugin:\n{}",
        node.containerd().name(),
        bad.join("\n")
    );
}
