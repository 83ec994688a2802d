//! The log line's parts: its time (RFC 3339 UTC), the level the config keeps (`log_level`).

use std::time::{SystemTime, UNIX_EPOCH};

use log::{Level, LevelFilter};

use super::escape;

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

    /// The `log` crate's filter for this level.
    pub(super) fn filter(self) -> LevelFilter {
        match self {
            LogLevel::Warn => LevelFilter::Warn,
            LogLevel::Info => LevelFilter::Info,
            LogLevel::Debug => LevelFilter::Debug,
        }
    }
}

/// The most bytes of a message a log line keeps: messages quote tenant values cut at
/// [`cpuplan::QUOTE_MAX`] bytes, and this bounds whatever else reaches a line.
pub const MAX_MESSAGE: usize = 16 << 10;

/// One log line (with its newline): the time `at` in RFC 3339 UTC, `level`, the program
/// `ident` and its `pid`, and `message` with its control characters escaped, cut at
/// [`MAX_MESSAGE`] bytes with its full length.
pub fn format_line(ident: &str, at: SystemTime, level: Level, pid: u32, message: &str) -> String {
    let text = escape(message);
    let text = if text.len() > MAX_MESSAGE {
        let mut cut = MAX_MESSAGE;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        format!("{}… (cut, {} bytes)", &text[..cut], text.len()).into()
    } else {
        text
    };
    format!("{} {level} {ident}[{pid}]: {text}\n", rfc3339(at))
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
mod tests {
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
            format_line("cpuplan-hook", at, Level::Warn, 42, "container a\nb: x\ty"),
            "2026-11-30T10:00:00.123Z WARN cpuplan-hook[42]: container a\\nb: x\\ty\n"
        );
        assert_eq!(
            format_line("cpuplan-nri", at, Level::Info, 7, "registered"),
            "2026-11-30T10:00:00.123Z INFO cpuplan-nri[7]: registered\n"
        );
    }

    #[test]
    fn a_long_message_is_cut_with_its_length() {
        let line = format_line(
            "cpuplan-hook",
            UNIX_EPOCH,
            Level::Info,
            1,
            &"é".repeat(MAX_MESSAGE),
        );
        assert!(line.len() < MAX_MESSAGE + 100, "{}", line.len());
        assert!(line.ends_with(&format!("… (cut, {} bytes)\n", 2 * MAX_MESSAGE)));
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
