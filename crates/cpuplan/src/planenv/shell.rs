//! The shell subset `plan.env` is written in: `KEY='value'` lines that `sh` sources without
//! running anything, and a parser that reads them (and hand-written variants) without a shell.
//!
//! Accepted, as `sh` reads them: blank lines, `#` comments, an optional `export `, then
//! `KEY=` and a value made of single-quoted parts (`'...'`, no escapes inside, so `'` is
//! written `'\''`; newlines are literal), double-quoted parts without expansions (`"..."`
//! where `\` escapes only `"`, `\`, `$`, `` ` `` and a newline), backslash-escaped characters,
//! and plain characters that the shell takes literally (letters, digits, `_./,:+-=@%`). A
//! trailing `# comment` after whitespace is allowed. Anything else (`$`, `;`, a second word, an
//! unterminated quote, a NUL byte) is refused with the line and what is wrong.

/// A line of an env file that a shell would not take as a plain assignment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {what}: {content:?}")]
pub struct LineError {
    /// The 1-based line where the assignment starts.
    pub line: usize,
    /// What is wrong.
    pub what: String,
    /// That line's text.
    pub content: String,
}

/// `value` in single quotes, each `'` written as `'\''`; a NUL, which no environment variable
/// can hold, is dropped. Newlines and every other byte stay literal inside the quotes.
pub fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('\'');
    for c in value.chars() {
        match c {
            '\'' => out.push_str("'\\''"),
            '\0' => {}
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// Whether `s` is a shell variable name: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_name(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

fn is_plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_./,:+-=@%".contains(c)
}

/// The assignments of an env file, in file order (a later assignment of a key wins when applied).
pub fn parse(text: &str) -> Result<Vec<(String, String)>, LineError> {
    let mut p = Parser {
        text,
        pos: 0,
        line: 1,
    };
    let mut vars = Vec::new();
    while let Some(var) = p.assignment()? {
        vars.push(var);
    }
    Ok(vars)
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
    line: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        if c == '\n' {
            self.line += 1;
        }
        Some(c)
    }

    fn error(&self, line: usize, what: impl Into<String>) -> LineError {
        LineError {
            line,
            what: what.into(),
            content: self
                .text
                .split('\n')
                .nth(line - 1)
                .unwrap_or("")
                .trim_end_matches('\r')
                .to_string(),
        }
    }

    fn skip_blanks(&mut self) {
        while matches!(self.peek(), Some(' ' | '\t')) {
            self.bump();
        }
    }

    fn skip_comment(&mut self) {
        while !matches!(self.peek(), None | Some('\n')) {
            self.bump();
        }
    }

    /// The end of a line after a value: blanks, an optional comment, then a newline or the end.
    fn end_of_line(&mut self, line: usize) -> Result<(), LineError> {
        self.skip_blanks();
        match self.peek() {
            None => Ok(()),
            Some('\n') => {
                self.bump();
                Ok(())
            }
            Some('\r') if self.text[self.pos..].starts_with("\r\n") => {
                self.bump();
                self.bump();
                Ok(())
            }
            Some('#') => {
                self.skip_comment();
                Ok(())
            }
            Some(_) => Err(self.error(line, "more than one word after '=' (quote the value)")),
        }
    }

    fn assignment(&mut self) -> Result<Option<(String, String)>, LineError> {
        loop {
            self.skip_blanks();
            match self.peek() {
                None => return Ok(None),
                Some('\n' | '\r') => {
                    self.bump();
                }
                Some('#') => self.skip_comment(),
                Some(_) => break,
            }
        }
        let line = self.line;
        if self.text[self.pos..].starts_with("export ")
            || self.text[self.pos..].starts_with("export\t")
        {
            self.pos += "export".len();
            self.skip_blanks();
        }
        let rest = &self.text[self.pos..];
        let end = rest.find(['=', '\n']).unwrap_or(rest.len());
        if !rest[end..].starts_with('=') {
            return Err(self.error(line, "expected KEY=value"));
        }
        let key = &rest[..end];
        if !is_name(key) {
            return Err(self.error(line, "not a variable name before '='"));
        }
        let key = key.to_string();
        self.pos += end + 1;
        let value = self.value(line)?;
        self.end_of_line(line)?;
        Ok(Some((key, value)))
    }

    fn value(&mut self, line: usize) -> Result<String, LineError> {
        let mut out = String::new();
        loop {
            match self.peek() {
                None | Some(' ' | '\t' | '\n') => return Ok(out),
                Some('\r') if self.text[self.pos..].starts_with("\r\n") => return Ok(out),
                Some('\0') => return Err(self.error(line, "a NUL byte")),
                Some('\'') => {
                    self.bump();
                    loop {
                        match self.bump() {
                            None => return Err(self.error(line, "unterminated quote")),
                            Some('\'') => break,
                            Some('\0') => return Err(self.error(line, "a NUL byte")),
                            Some(c) => out.push(c),
                        }
                    }
                }
                Some('"') => {
                    self.bump();
                    loop {
                        match self.bump() {
                            None => return Err(self.error(line, "unterminated quote")),
                            Some('"') => break,
                            Some('\\') => match self.bump() {
                                None => return Err(self.error(line, "unterminated quote")),
                                Some('\0') => return Err(self.error(line, "a NUL byte")),
                                Some(e @ ('"' | '\\' | '$' | '`')) => out.push(e),
                                Some('\n') => {}
                                Some(e) => {
                                    out.push('\\');
                                    out.push(e);
                                }
                            },
                            Some(q @ ('$' | '`')) => {
                                return Err(self.error(
                                    line,
                                    format!(
                                        "{q:?} inside double quotes would be expanded by the shell"
                                    ),
                                ))
                            }
                            Some('\0') => return Err(self.error(line, "a NUL byte")),
                            Some(c) => out.push(c),
                        }
                    }
                }
                Some('\\') => {
                    self.bump();
                    match self.bump() {
                        None | Some('\n') => return Err(self.error(line, "unterminated quote")),
                        Some('\0') => return Err(self.error(line, "a NUL byte")),
                        Some(e) => out.push(e),
                    }
                }
                Some(c) if is_plain(c) => {
                    self.bump();
                    out.push(c);
                }
                Some(c) => {
                    return Err(self.error(
                        line,
                        format!("{c:?} is special to the shell (quote the value)"),
                    ))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> String {
        let v = parse(text).unwrap();
        assert_eq!(v.len(), 1, "{v:?}");
        v[0].1.clone()
    }

    #[test]
    fn single_quotes_with_the_escaped_quote() {
        assert_eq!(
            one(r"CPUPLAN_WHY='core 2'\''s threads'"),
            "core 2's threads"
        );
        assert_eq!(one("CPUPLAN_WORKERS='1,113;-;2'"), "1,113;-;2");
        assert_eq!(one("A=''"), "");
        assert_eq!(one("A="), "");
        assert_eq!(one("A='$HOME `x` \\n \"'"), "$HOME `x` \\n \"");
    }

    #[test]
    fn plain_and_double_quoted_values() {
        assert_eq!(one("OMP_NUM_THREADS=12"), "12");
        assert_eq!(one("CPUPLAN_MASK=0-55,112-167"), "0-55,112-167");
        assert_eq!(one(r#"A="a b \"c\" \\ \x""#), r#"a b "c" \ \x"#);
        assert_eq!(one(r"A=a\ b"), "a b");
        assert_eq!(one("export A='x'"), "x");
        assert_eq!(one("A=x   # trailing comment"), "x");
        assert_eq!(one("A='x'\r\n"), "x");
        assert_eq!(one("A='x\r\ny'"), "x\r\ny", "a CR inside quotes is kept");
    }

    #[test]
    fn comments_blank_lines_and_order() {
        let v = parse("# plan\n\n  A=1\n\t# more\nB='2'\nA=3\n").unwrap();
        assert_eq!(
            v,
            vec![
                ("A".into(), "1".into()),
                ("B".into(), "2".into()),
                ("A".into(), "3".into())
            ]
        );
    }

    #[test]
    fn a_quoted_value_may_span_lines() {
        let v = parse("A='line one\nline two'\nB=2\n").unwrap();
        assert_eq!(v[0].1, "line one\nline two");
        assert_eq!(v[1], ("B".into(), "2".into()));
    }

    #[test]
    fn refuses_what_a_shell_would_not_take_literally() {
        for (text, line, what) in [
            ("A=1\nB=$HOME\n", 2, "'$' is special"),
            ("A=1;2", 1, "';' is special"),
            ("A=one two", 1, "more than one word"),
            ("A=\"$X\"", 1, "would be expanded"),
            ("A=\"`x`\"", 1, "would be expanded"),
            ("\nA='open\n", 2, "unterminated quote"),
            ("just words", 1, "expected KEY=value"),
            ("1A=2", 1, "not a variable name"),
            ("A-B=2", 1, "not a variable name"),
            ("A=x\\", 1, "unterminated quote"),
            ("A='a\0b'", 1, "NUL"),
            ("A=a\\\0b", 1, "NUL"),
            ("A=\"a\\\0b\"", 1, "NUL"),
            ("A=\"\0\"", 1, "NUL"),
            ("A=\0", 1, "NUL"),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.to_string().contains(what), "{text:?}: {e}");
        }
    }

    proptest::proptest! {
        /// Whatever parses can be put in an environment: `set_var` panics on a NUL or an `=` in a key.
        #[test]
        fn whatever_parses_can_be_set_in_an_environment(text in "(export )?[AB]=[' \"\\\\\\x00x=]{0,8}(\n[AB]=[' \"\\\\\\x00x]{0,8}){0,2}") {
            if let Ok(vars) = parse(&text) {
                for (k, v) in vars {
                    proptest::prop_assert!(is_name(&k), "{text:?}: key {k:?}");
                    proptest::prop_assert!(!v.contains('\0'), "{text:?}: {k}={v:?}");
                }
            }
        }
    }

    #[test]
    fn quote_round_trips_and_drops_nul() {
        for v in [
            "",
            "plain",
            "it's",
            "''",
            "a'\\''b",
            "two\nlines",
            "$X `y` \"z\"",
            "cr\r\n",
        ] {
            assert_eq!(one(&format!("K={}", quote(v))), v, "{v:?}");
        }
        assert_eq!(one(&format!("K={}", quote("a\0b"))), "ab");
    }
}
