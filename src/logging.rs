//! The hook's log: one line per event, to the configured file (appended, created 0640) and to stderr.
//!
//! A line is `2026-11-30T10:00:00.123Z INFO cpuplan-hook[PID]: MESSAGE`: an RFC 3339 UTC time
//! with milliseconds, the level, the process. Control characters in the message (a newline in a
//! container-supplied string) are escaped, so one event stays one line.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Mutex;
use std::time::SystemTime;

use log::{Level, LevelFilter, Log, Metadata, Record};

mod format;

pub use format::{format_line, rfc3339, LogLevel};

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
        if !self.enabled(r.metadata()) {
            return;
        }
        let line = format_line(
            SystemTime::now(),
            r.level(),
            std::process::id(),
            &r.args().to_string(),
        );
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
/// A log file that cannot be opened is reported on stderr and otherwise ignored.
pub fn init(file: Option<&Path>) {
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(LevelFilter::Info);
    if let Some(path) = file {
        match OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o640)
            .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
            .open(path)
        {
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
