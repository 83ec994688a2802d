//! A guard for the host's real hook log: each test binary that installs [`start`] fails at
//! exit when a line about one of its own containers reached `/var/log/cpuplan-hook.log`.
//!
//! Tests never write there: every hook the harness runs gets a config whose `log` is a private
//! file or `"stderr"` ([`private_log`] checks a config). The guard notes the file's size when
//! the binary starts (an ELF constructor, before any test thread) and at exit (`atexit`) reads
//! the lines added since. A line fails the binary when it carries one of this run's markers
//! ([`mark`]): a container id the harness started (runc's and ctr's ids carry the test
//! process's pid; CRI's are containerd's random ones) or a directory the harness made for a
//! node, bundle or hook config. Lines without a marker are another process's (a runtime on this
//! machine starting its own containers through the installed registration, another checkout's
//! tests): printed as a note, never a failure. The guard watches what the tests do, not what the
//! machine does.
#![allow(dead_code)]

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

/// The file guarded: the hook's default log (`cpuplan_hook::config::DEFAULT_LOG`).
pub const REAL_LOG: &str = "/var/log/cpuplan-hook.log";

/// Names another file for the guard to watch instead of [`REAL_LOG`]: set by the guard's own
/// test (`crates/test-support/tests/log_guard.rs`) alone, which writes lines there.
pub const WATCH_VAR: &str = "CPUPLAN_TEST_LOG_GUARD_FILE";

/// The file watched: [`REAL_LOG`], or what [`WATCH_VAR`] names.
fn watched() -> std::path::PathBuf {
    std::env::var_os(WATCH_VAR)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| REAL_LOG.into())
}

/// (size, mtime seconds, mtime nanoseconds) of the file, `None` when it does not exist.
fn snapshot() -> Option<(u64, i64, i64)> {
    std::fs::metadata(watched())
        .ok()
        .map(|m| (m.len(), m.mtime(), m.mtime_nsec()))
}

static AT_START: OnceLock<Option<(u64, i64, i64)>> = OnceLock::new();

/// This run's markers ([`mark`]).
static MARKS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Registers `marker` (a container id this run started, or a directory it made for the hook's
/// input) as this run's: a real-log line carrying it fails the binary at exit. A marker shorter
/// than 8 characters (a fixture's `ctr`) could be anybody's and is not kept.
pub fn mark(marker: impl AsRef<str>) {
    let m = marker.as_ref();
    if m.len() >= 8 {
        MARKS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(m.to_string());
    }
}

/// Registers a directory as this run's ([`mark`]).
pub fn mark_dir(dir: &Path) {
    mark(dir.to_string_lossy());
}

/// Fails unless the hook config `config` sends the log somewhere private: a `log` that is set
/// and is not the real log (the hook's default when `log` is absent).
pub fn private_log(config: &serde_json::Value) {
    match config.get("log").and_then(serde_json::Value::as_str) {
        Some(log) if Path::new(log) != Path::new(REAL_LOG) => {}
        other => panic!(
            "a test's hook config must name a private `log` (a temp file or \"stderr\"), not \
             {other:?}: the real log {REAL_LOG} is the machine's"
        ),
    }
}

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

/// The lines of `new` that carry one of `marks`, and how many do not.
pub fn ours<'a>(new: &'a str, marks: &[String]) -> (Vec<&'a str>, usize) {
    let mut mine = Vec::new();
    let mut others = 0;
    for line in new.lines() {
        if marks.iter().any(|m| line.contains(m.as_str())) {
            mine.push(line);
        } else {
            others += 1;
        }
    }
    (mine, others)
}

extern "C" fn check() {
    let before = AT_START.get().copied().flatten();
    let after = snapshot();
    if before == after {
        return;
    }
    let log = watched();
    let text = std::fs::read(&log).unwrap_or_default();
    // A log that shrank was rotated or truncated: all of it is new.
    let from = before.map_or(0, |b| b.0 as usize).min(text.len());
    let from = if after.is_some_and(|a| before.is_some_and(|b| a.0 < b.0)) {
        0
    } else {
        from
    };
    let new = String::from_utf8_lossy(&text[from..]).into_owned();
    let marks = MARKS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let (mine, others) = ours(&new, &marks);
    if others > 0 {
        eprintln!(
            "\nlog guard: {others} line(s) reached {} while this test binary ran, none \
             about its containers (another process on this machine ran the hook): not this \
             binary's doing",
            log.display()
        );
    }
    if mine.is_empty() {
        return;
    }
    eprintln!(
        "\nlog guard: a hook this test binary started wrote to the real hook log {}: its \
         config lacked a private `log` (give it a temp file or \"stderr\"). Its lines:\n{}",
        log.display(),
        mine.join("\n")
    );
    // SAFETY: ends the process now with status 1; the test harness has printed its results.
    unsafe { nix::libc::_exit(1) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lines_carrying_a_marker_are_this_runs() {
        let marks = vec![
            "cpuplan-e2e-4242".to_string(),
            "/tmp/cpuplan-cri-AbC123".to_string(),
        ];
        let new = "2026-12-06T10:00:00.000Z INFO cpuplan-hook[9]: container 5f0e: planned\n\
                   2026-12-06T10:00:00.100Z INFO cpuplan-hook[10]: container cpuplan-e2e-4242: planned\n\
                   2026-12-06T10:00:00.200Z WARN cpuplan-hook[11]: /tmp/cpuplan-cri-AbC123/etc/hook.json: bad\n";
        let (mine, others) = ours(new, &marks);
        assert_eq!(mine.len(), 2, "{mine:?}");
        assert!(mine[0].contains("cpuplan-e2e-4242") && mine[1].contains("hook.json"));
        assert_eq!(others, 1);
        assert_eq!(ours(new, &[]), (vec![], 3));
    }

    #[test]
    fn short_markers_are_not_kept_and_a_config_needs_a_private_log() {
        let before = MARKS.lock().unwrap().len();
        mark("ctr");
        assert_eq!(MARKS.lock().unwrap().len(), before);
        private_log(&serde_json::json!({"log": "stderr"}));
        for bad in [serde_json::json!({}), serde_json::json!({"log": REAL_LOG})] {
            assert!(
                std::panic::catch_unwind(|| private_log(&bad)).is_err(),
                "{bad}"
            );
        }
    }
}
