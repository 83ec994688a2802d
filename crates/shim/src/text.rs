//! Container-supplied text (paths, the plan's `why`, env keys) made safe to print on one line.
//!
//! The plan files are written into the container, where its image and user can change them.
//! Every such string the shim prints to a terminal or a log, or returns as a message, goes
//! through [`escape`] (or [`Escaped`]): each control character is written as
//! [`char::escape_default`] does (`\n`, `\u{1b}`…), so a newline cannot forge a line and an
//! escape sequence cannot drive the terminal.

use std::borrow::Cow;
use std::fmt;

/// `s` with every control character escaped (`char::escape_default`); other characters unchanged.
pub fn escape(s: &str) -> Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Displays `T` with its control characters escaped ([`escape`]).
#[derive(Debug, Clone, Copy)]
pub struct Escaped<T>(pub T);

impl<T: fmt::Display> fmt::Display for Escaped<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&escape(&self.0.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert!(matches!(escape("plain: 0-3 ünïcode"), Cow::Borrowed(_)));
        assert_eq!(
            escape("a\nfake: line\r\t\u{1b}[31m\0\u{7f}\u{85}"),
            "a\\nfake: line\\r\\t\\u{1b}[31m\\u{0}\\u{7f}\\u{85}"
        );
        assert_eq!(
            Escaped(std::path::Path::new("/run/x\ny").display()).to_string(),
            "/run/x\\ny"
        );
    }
}
