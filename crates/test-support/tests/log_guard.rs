//! The log guard at a test binary's exit, end to end: this binary installs the guard as every
//! test binary does, and runs itself again as the guarded child on a private file standing for
//! the real log ([`log_guard::WATCH_VAR`]). A line another process adds meanwhile passes with a
//! note; a line carrying one of the child's markers fails it (exit 1); nothing added, nothing said.

extern crate cpuplan_test_support as common;

use std::io::Write;
use std::process::Command;

use common::log_guard;

/// Installs the guard before `main` (as each test binary's `main.rs` does).
#[used]
#[link_section = ".init_array"]
static LOG_GUARD: extern "C" fn() = log_guard::start;

/// In the child: what to add to the watched file before exiting.
const CHILD: &str = "CPUPLAN_TEST_LOG_GUARD_CHILD";

fn main() {
    match std::env::var(CHILD).ok().as_deref() {
        Some(kind) => child(kind),
        None => driver(),
    }
}

/// Marks this run's container, adds a line as `kind` says, and exits 0 (the guard decides).
fn child(kind: &str) {
    let id = format!("cpuplan-guard-{}", std::process::id());
    log_guard::mark(&id);
    let line = match kind {
        "theirs" => {
            "2026-12-06T10:00:00.000Z INFO cpuplan-hook[7]: container 0a1b2c3d4e5f: planned\n"
                .to_string()
        }
        "ours" => {
            format!("2026-12-06T10:00:00.000Z INFO cpuplan-hook[8]: container {id}: planned\n")
        }
        _ => return,
    };
    let path = std::env::var(log_guard::WATCH_VAR).unwrap();
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(line.as_bytes()).unwrap();
}

fn driver() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("cpuplan-hook.log");
    std::fs::write(
        &log,
        "2026-12-06T09:00:00.000Z INFO cpuplan-hook[1]: before the run\n",
    )
    .unwrap();
    let run = |kind: &str| {
        let out = Command::new(std::env::current_exe().unwrap())
            .env(CHILD, kind)
            .env(log_guard::WATCH_VAR, &log)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run("nothing");
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("log guard"), "{err}");
    let (code, err) = run("theirs");
    assert_eq!(
        code,
        Some(0),
        "another process's line failed the run: {err}"
    );
    assert!(
        err.contains("1 line(s) reached") && err.contains("none about its containers"),
        "{err}"
    );
    let (code, err) = run("ours");
    assert_eq!(
        code,
        Some(1),
        "a line about this run's container passed: {err}"
    );
    assert!(
        err.contains("a hook this test binary started wrote to the real hook log"),
        "{err}"
    );
    assert!(err.contains("container cpuplan-guard-"), "{err}");
    println!("log guard: another process's line passes, this run's fails, nothing added is silent");
}
