//! A value quoted in a message: Rust's `{:?}` form (escapes included), cut at [`QUOTE_MAX`]
//! bytes with its full length, so a 250 KB annotation makes a short line, not a 250 KB one.

use std::fmt;

/// The most bytes of a value a message quotes.
pub const QUOTE_MAX: usize = 256;

/// `value` quoted for a message, as [`quoted`] makes it.
#[derive(Debug, Clone, Copy)]
pub struct Quoted<'a>(&'a str);

/// `value` quoted: `"text"` up to [`QUOTE_MAX`] bytes, else its first [`QUOTE_MAX`] bytes (cut at
/// a character boundary) as `"text"… (cut, N bytes)`.
pub fn quoted(value: &str) -> Quoted<'_> {
    Quoted(value)
}

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        if s.len() <= QUOTE_MAX {
            return write!(f, "{s:?}");
        }
        let mut cut = QUOTE_MAX;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        write!(f, "{:?}… (cut, {} bytes)", &s[..cut], s.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_values_are_debug_quoted_and_long_ones_cut_with_their_length() {
        assert_eq!(quoted("a\"b\n").to_string(), r#""a\"b\n""#);
        let exact = "x".repeat(QUOTE_MAX);
        assert_eq!(quoted(&exact).to_string(), format!("{exact:?}"));
        let long = "y".repeat(250_000);
        assert_eq!(
            quoted(&long).to_string(),
            format!("{:?}… (cut, 250000 bytes)", "y".repeat(QUOTE_MAX))
        );
        // A cut never splits a character.
        let wide = "é".repeat(200);
        let q = quoted(&wide).to_string();
        assert!(q.ends_with("… (cut, 400 bytes)"), "{q}");
        assert_eq!(q.matches('é').count(), QUOTE_MAX / 2);
    }
}
