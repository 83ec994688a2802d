//! Running the `cpuplan-hook` binary as a runtime would: the config, the stage, the state on stdin.
#![allow(dead_code)]

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

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
