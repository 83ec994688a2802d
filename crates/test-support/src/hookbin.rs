//! The binaries cargo built for this test run, one function each, and running `cpuplan-hook` as
//! a runtime would: the config, the stage, the state on stdin.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// `cpuplan-hook`: the runtime's stages (`hook STAGE`, `precreate`).
pub fn hook_bin() -> PathBuf {
    crate::statics::bin("cpuplan-hook")
}

/// `cpuplan-nri`: the NRI plugin.
pub fn nri_bin() -> PathBuf {
    crate::statics::bin("cpuplan-nri")
}

/// `cpuplan`: the operator's command (explain, plan, claims, install…).
pub fn cpuplan_bin() -> PathBuf {
    crate::statics::bin("cpuplan")
}

/// `BIN --config CONFIG hook createRuntime`, with stdin, stdout and stderr piped.
pub fn create_runtime(bin: &Path, config: &Path) -> Command {
    let mut cmd = Command::new(bin);
    cmd.arg("--config")
        .arg(config)
        .args(["hook", "createRuntime"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Writes `input` to the spawned `child`'s stdin, closes it, and waits for its output.
pub fn feed(mut child: Child, input: &[u8]) -> Output {
    child
        .stdin
        .take()
        .expect("stdin piped")
        .write_all(input)
        .expect("write the state");
    child.wait_with_output().expect("wait for the hook")
}

/// Spawns `cmd` and [`feed`]s it `input`.
pub fn run_fed(cmd: &mut Command, input: &[u8]) -> Output {
    feed(cmd.spawn().expect("spawn the hook"), input)
}

/// A finished command: (exit status, or -1 when a signal ended it; stdout; stderr). The one
/// "run, check the exit, parse the output" helper of the tests: see also [`ok_json`].
pub fn outcome(out: Output) -> (i32, String, String) {
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `cmd` to the end: [`outcome`] of its output.
pub fn run(cmd: &mut Command) -> (i32, String, String) {
    outcome(cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}")))
}

/// The JSON a command printed on stdout, after checking it exited 0 (the message names
/// `what` and shows stderr).
pub fn ok_json(what: &str, out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{what}: exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{what}: stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// `cpuplan --config CONFIG ARGS…` run to the end: its stdout, after checking it exited 0 (the
/// message names the arguments and shows stderr).
pub fn cpuplan_ok(config: &Path, args: &[&str]) -> String {
    let out = Command::new(cpuplan_bin())
        .arg("--config")
        .arg(config)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cpuplan {args:?}: {e}"));
    assert!(
        out.status.success(),
        "cpuplan {args:?}: exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// [`cpuplan_ok`]'s stdout parsed as JSON.
pub fn cpuplan_json(config: &Path, args: &[&str]) -> serde_json::Value {
    let text = cpuplan_ok(config, args);
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("cpuplan {args:?}: stdout is not JSON ({e}): {text}"))
}
