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
use std::time::{SystemTime, UNIX_EPOCH};

use log::{Level, LevelFilter, Log, Metadata, Record};

/// The most detailed lines the log keeps (the hook config's `log_level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum LogLevel {
    /// Warnings and errors only.
    Warn,
    /// One line per container and stage, and every warning (the default).
    #[default]
    Info,
    /// Also what was read and written along the way.
    Debug,
}

impl LogLevel {
    /// The level named `name` (`warn`, `info` or `debug`).
    pub fn parse(name: &str) -> Option<LogLevel> {
        match name {
            "warn" => Some(LogLevel::Warn),
            "info" => Some(LogLevel::Info),
            "debug" => Some(LogLevel::Debug),
            _ => None,
        }
    }

    fn filter(self) -> LevelFilter {
        match self {
            LogLevel::Warn => LevelFilter::Warn,
            LogLevel::Info => LevelFilter::Info,
            LogLevel::Debug => LevelFilter::Debug,
        }
    }
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

/// One log line (with its newline): the time `at` in RFC 3339 UTC, `level`, `pid` and `message`
/// with its control characters escaped.
pub fn format_line(at: SystemTime, level: Level, pid: u32, message: &str) -> String {
    format!(
        "{} {level} cpuplan-hook[{pid}]: {}\n",
        rfc3339(at),
        escape(message)
    )
}

/// `at` as an RFC 3339 UTC time with milliseconds, e.g. `2026-11-30T10:00:00.123Z` (times
/// before 1970 print as 1970-01-01T00:00:00.000Z).
pub fn rfc3339(at: SystemTime) -> String {
    let d = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// The proleptic Gregorian (year, month, day) of `days` since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod format_tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn times_are_rfc3339_utc_with_milliseconds() {
        let at = |secs: u64, ms: u64| UNIX_EPOCH + Duration::from_millis(secs * 1000 + ms);
        assert_eq!(rfc3339(at(0, 0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(at(1_796_032_800, 123)), "2026-11-30T10:00:00.123Z");
        // A leap day, the end of a year, and a century that is a leap year.
        assert_eq!(rfc3339(at(951_782_400, 5)), "2000-02-29T00:00:00.005Z");
        assert_eq!(rfc3339(at(1_704_067_199, 999)), "2023-12-31T23:59:59.999Z");
        assert_eq!(rfc3339(at(4_107_542_400, 0)), "2100-03-01T00:00:00.000Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH - Duration::from_secs(5)),
            "1970-01-01T00:00:00.000Z"
        );
    }

    #[test]
    fn a_line_has_time_level_pid_and_the_escaped_message() {
        let at = UNIX_EPOCH + Duration::from_millis(1_796_032_800_123);
        assert_eq!(
            format_line(at, Level::Warn, 42, "container a\nb: x\ty"),
            "2026-11-30T10:00:00.123Z WARN cpuplan-hook[42]: container a\\nb: x\\ty\n"
        );
    }

    #[test]
    fn levels_parse_and_order() {
        assert_eq!(LogLevel::parse("debug"), Some(LogLevel::Debug));
        assert_eq!(LogLevel::parse("info"), Some(LogLevel::Info));
        assert_eq!(LogLevel::parse("warn"), Some(LogLevel::Warn));
        assert_eq!(LogLevel::parse("Debug"), None);
        assert_eq!(LogLevel::parse("trace"), None);
        assert_eq!(LogLevel::default(), LogLevel::Info);
        assert!(LogLevel::Warn.filter() < LogLevel::Debug.filter());
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
