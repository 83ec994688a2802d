//! A guard for the host's real hook log: each test binary that installs [`start`] fails at
//! exit when `/var/log/cpuplan-hook.log` changed while it ran.
//!
//! Tests must never write there: every hook run gets a config whose `log` is a temp file or
//! `"stderr"` (a config that fails to load still keeps its own valid `log`). The guard snapshots
//! the file's size and mtime when the binary starts (an ELF constructor, before any test thread)
//! and compares at exit (`atexit`), printing the new lines and exiting 1 when it changed. Another
//! process on the machine that runs the hook with the default log while the tests run (a real
//! runtime, another checkout's tests) trips it as well, unless its lines lack this build's
//! RFC 3339 time (an older build's): the lines it prints say whose they are.
#![allow(dead_code)]

use std::os::unix::fs::MetadataExt;
use std::sync::OnceLock;

/// The file guarded: the hook's default log (`cpuplan_hook::config::DEFAULT_LOG`).
pub const REAL_LOG: &str = "/var/log/cpuplan-hook.log";

/// (size, mtime seconds, mtime nanoseconds) of the file, `None` when it does not exist.
fn snapshot() -> Option<(u64, i64, i64)> {
    std::fs::metadata(REAL_LOG)
        .ok()
        .map(|m| (m.len(), m.mtime(), m.mtime_nsec()))
}

static AT_START: OnceLock<Option<(u64, i64, i64)>> = OnceLock::new();

/// Snapshots the log and registers the check at exit. A test binary runs it as an ELF
/// constructor, before `main` and any test thread:
/// `#[used] #[link_section = ".init_array"] static LOG_GUARD: extern "C" fn() = log_guard::start;`
/// (in the binary itself: a constructor in this library's rlib would be linked only when
/// something else of its object file is).
pub extern "C" fn start() {
    AT_START.get_or_init(snapshot);
    // SAFETY: registers a plain `extern "C" fn()` to run at exit; nothing else is shared.
    unsafe {
        nix::libc::atexit(check);
    }
}

extern "C" fn check() {
    let before = AT_START.get().copied().flatten();
    let after = snapshot();
    if before == after {
        return;
    }
    let text = std::fs::read(REAL_LOG).unwrap_or_default();
    let from = before.map_or(0, |b| b.0 as usize).min(text.len());
    let new = String::from_utf8_lossy(&text[from..]).into_owned();
    // A line that does not start with this build's RFC 3339 time was written by another build
    // of the hook (another checkout's tests on this machine): not this binary's doing.
    let ours: Vec<&str> = new.lines().filter(|l| rfc3339_prefix(l)).collect();
    if ours.is_empty() && before.is_some_and(|b| after.is_some_and(|a| a.0 > b.0)) {
        return;
    }
    let size =
        |s: Option<(u64, i64, i64)>| s.map_or("absent".to_string(), |s| format!("{} bytes", s.0));
    eprintln!(
        "\nlog guard: the real hook log {REAL_LOG} changed while this test binary ran \
         ({} -> {}): a test ran cpuplan-hook with a config lacking `log` (give it \
         a temp file or \"stderr\"), or another process on this machine ran the hook meanwhile. \
         New lines:\n{}",
        size(before),
        size(after),
        ours.join("\n")
    );
    // SAFETY: ends the process now with status 1; the test harness has printed its results.
    unsafe { nix::libc::_exit(1) }
}

/// Whether `line` starts with a time as this build's hook writes it (`2026-11-30T10:00:00.123Z `).
fn rfc3339_prefix(line: &str) -> bool {
    let b = line.as_bytes();
    b.len() > 24
        && b[4] == b'-'
        && b[10] == b'T'
        && b[19] == b'.'
        && b[23] == b'Z'
        && b[24] == b' '
        && b[..4].iter().all(u8::is_ascii_digit)
}
