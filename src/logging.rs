//! The hook's log: one line per event, to the configured file (appended, created 0640) and to stderr.
//!
//! A line is `2026-11-30T10:00:00.123Z INFO cpuplan-hook[PID]: MESSAGE`: an RFC 3339 UTC time
//! with milliseconds, the level, the program (`cpuplan-hook`, or `cpuplan-nri` for the NRI
//! plugin: [`set_ident`]) and its pid. Control characters in the message (a newline in a
//! container-supplied string) are escaped, so one event stays one line.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::time::SystemTime;

use log::{Level, LevelFilter, Log, Metadata, Record};

mod format;

pub use format::{format_line, rfc3339, LogLevel};

/// The program's name in each line unless [`set_ident`] says otherwise.
pub const DEFAULT_IDENT: &str = "cpuplan-hook";

static IDENT: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// Names the program in every line from now on (`cpuplan-nri` for the plugin); the first
/// call wins.
pub fn set_ident(ident: &'static str) {
    let _ = IDENT.set(ident);
}

fn ident() -> &'static str {
    IDENT.get().copied().unwrap_or(DEFAULT_IDENT)
}

/// What the process's logger drops, where a program sets it ([`set_drop`]).
static DROP: std::sync::OnceLock<fn(&Record<'_>) -> bool> = std::sync::OnceLock::new();

/// Drops every record `drop` says is noise from now on (the NRI plugin: ttrpc's echo of a
/// connection its stub already refused and counted); the first call wins. The hook sets none,
/// so it links nothing of the stub.
pub fn set_drop(drop: fn(&Record<'_>) -> bool) {
    let _ = DROP.set(drop);
}

struct HookLogger {
    file: Mutex<Option<File>>,
    stderr: bool,
}

static LOGGER: HookLogger = HookLogger {
    file: Mutex::new(None),
    stderr: true,
};

impl Log for HookLogger {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        // the ttrpc crate (NRI plugin) tells every server start and stop at info: warnings only
        m.level() <= log::max_level()
            && (m.level() <= Level::Warn || !m.target().starts_with("ttrpc"))
    }

    fn log(&self, r: &Record<'_>) {
        if !self.enabled(r.metadata()) || DROP.get().is_some_and(|drop| drop(r)) {
            return;
        }
        // One event, one line: format_line escapes a container-supplied newline.
        let message = r.args().to_string();
        let line = format_line(ident(), SystemTime::now(), r.level(), pid(), &message);
        if let Ok(mut f) = self.file.lock() {
            if let Some(f) = f.as_mut() {
                let _ = f.write_all(line.as_bytes());
            }
        }
        if self.stderr {
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
    }

    fn flush(&self) {}
}

/// This process's pid, asked of the kernel once (each log line and each temporary file name
/// carries it). The binary never forks a child that goes on running its code: `Command`
/// spawns exec at once, so the cached pid is never another process's.
pub fn pid() -> u32 {
    static PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    match PID.load(std::sync::atomic::Ordering::Relaxed) {
        0 => {
            let pid = std::process::id();
            PID.store(pid, std::sync::atomic::Ordering::Relaxed);
            pid
        }
        pid => pid,
    }
}

/// `s` with every control character (a newline in a container id…) escaped, so one event stays one line.
pub fn escape(s: &str) -> std::borrow::Cow<'_, str> {
    if s.chars().any(char::is_control) {
        s.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect::<String>()
            .into()
    } else {
        s.into()
    }
}

/// Keeps log lines up to `level` from now on (the hook config's `log_level`; [`init`] starts at
/// info).
pub fn set_level(level: LogLevel) {
    log::set_max_level(level.filter());
}

/// Starts logging to stderr and, when `file` is given, appending to it (created 0640).
/// A log file that cannot be opened, or that is not a regular file (a FIFO, a device), is
/// reported on stderr and otherwise ignored; opening it never blocks and never follows a link.
pub fn init(file: Option<&Path>) {
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(LevelFilter::Info);
    if let Some(path) = file {
        match open_log(path) {
            Ok(f) => {
                if let Ok(mut slot) = LOGGER.file.lock() {
                    *slot = Some(f);
                }
            }
            Err(e) => log::warn!(
                "cannot open log file {}: {e}; logging to stderr only",
                path.display()
            ),
        }
    }
}

/// The log file opened for appending: `O_NONBLOCK` (a FIFO with no reader fails at once instead
/// of waiting for one), `O_NOFOLLOW`, and then refused unless it is a regular file of this
/// user's own with one link ([`cpuplan::require_own_file`]).
fn open_log(path: &Path) -> std::io::Result<File> {
    use nix::libc::{O_APPEND, O_CREAT, O_NOFOLLOW, O_NONBLOCK, O_WRONLY};
    let flags = O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK;
    let f = cpuplan::open(path, flags, 0o640).map_err(|e| match e.raw_os_error() {
        // What a FIFO without a reader answers to a non-blocking open for writing.
        Some(nix::libc::ENXIO) => std::io::Error::new(
            e.kind(),
            "a FIFO (or a device without a reader), not a regular file",
        ),
        _ => e,
    })?;
    cpuplan::require_own_file(&f)?;
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::OpenOptionsExt;

    #[test]
    fn a_log_that_is_no_regular_file_is_refused_at_once() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let t = std::time::Instant::now();
        let e = open_log(&fifo).unwrap_err().to_string();
        assert!(e.contains("FIFO"), "{e}");
        // With a reader the open succeeds, and the type check refuses it.
        let _reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        let e = open_log(&fifo).unwrap_err().to_string();
        assert!(e.contains("a FIFO, not a regular file"), "{e}");
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        let e = open_log(Path::new("/dev/null")).unwrap_err().to_string();
        assert!(e.contains("a device"), "{e}");
        std::os::unix::fs::symlink(d.path().join("real"), d.path().join("link")).unwrap();
        assert!(open_log(&d.path().join("link")).is_err());
        assert!(!d.path().join("real").exists(), "the link was followed");
        let log = d.path().join("hook.log");
        open_log(&log).unwrap();
        assert!(log.is_file());
        // A hard link or another user's file under the log's name: never appended to.
        let target = d.path().join("elsewhere");
        std::fs::write(&target, "keep").unwrap();
        std::fs::remove_file(&log).unwrap();
        std::fs::hard_link(&target, &log).unwrap();
        let e = open_log(&log).unwrap_err().to_string();
        assert!(e.contains("2 links to it (a hard link)"), "{e}");
        std::fs::remove_file(&log).unwrap();
        std::fs::write(&log, "theirs").unwrap();
        std::os::unix::fs::chown(&log, Some(4242), None).unwrap();
        let e = open_log(&log).unwrap_err().to_string();
        assert!(e.contains("owned by uid 4242"), "{e}");
    }
}
