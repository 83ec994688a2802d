//! `plan.env`: shell-sourceable `KEY='value'` lines, parsed without a shell.
//!
//! Accepted, as `sh` reads them: blank lines, `#` comments, an optional `export `,
//! then `KEY=` and a value made of single-quoted parts (`'...'`, no escapes inside,
//! so `'` is written `'\''`), double-quoted parts without expansions (`"..."` where
//! `\` escapes only `"`, `\`, `$` and `` ` ``), backslash-escaped characters, and
//! plain characters that the shell takes literally (letters, digits, `_./,:+-=@%`).
//! A trailing `# comment` after whitespace is allowed. Anything else (`$`, `;`, a
//! second word, an unterminated quote) is refused with the file and line.

use std::path::Path;

use crate::error::{Result, ShimError};

/// The variables of an env file, in file order (a later assignment of a key wins when applied).
pub fn parse_env(text: &str, path: &Path) -> Result<Vec<(String, String)>> {
    let mut vars = Vec::new();
    let lines: Vec<&str> = text.split('\n').collect();
    let mut i = 0;
    while i < lines.len() {
        let start = i;
        let line = lines[i].strip_suffix('\r').unwrap_or(lines[i]);
        i += 1;
        let body = line.trim_start_matches([' ', '\t']);
        if body.is_empty() || body.starts_with('#') {
            continue;
        }
        let err = |what: &str| ShimError::EnvLine {
            path: path.to_path_buf(),
            line: start + 1,
            what: what.to_string(),
            content: line.to_string(),
        };
        let body = body
            .strip_prefix("export ")
            .map_or(body, |b| b.trim_start());
        let Some((key, rest)) = body.split_once('=') else {
            return Err(err("expected KEY=value"));
        };
        if !is_name(key) {
            return Err(err("not a variable name before '='"));
        }
        // A quoted value may run over several lines: feed the parser more lines until it closes.
        let mut value_text = rest.to_string();
        let value = loop {
            match parse_value(&value_text) {
                Ok(v) => break v,
                Err(ValueError::Unterminated) if i < lines.len() => {
                    value_text.push('\n');
                    value_text.push_str(lines[i]);
                    i += 1;
                }
                Err(ValueError::Unterminated) => return Err(err("unterminated quote")),
                Err(ValueError::Bad(what)) => return Err(err(&what)),
            }
        };
        vars.push((key.to_string(), value));
    }
    Ok(vars)
}

/// `KEY='value'` as the hook writes it: single-quoted, `'` written as `'\''`.
pub fn format_env_line(key: &str, value: &str) -> String {
    format!("{key}='{}'", value.replace('\'', r"'\''"))
}

/// Whether `s` is a shell variable name: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_name(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

enum ValueError {
    Unterminated,
    Bad(String),
}

fn is_plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_./,:+-=@%".contains(c)
}

fn parse_value(text: &str) -> Result<String, ValueError> {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => loop {
                match chars.next() {
                    None => return Err(ValueError::Unterminated),
                    Some('\'') => break,
                    Some(q) => out.push(q),
                }
            },
            '"' => loop {
                match chars.next() {
                    None => return Err(ValueError::Unterminated),
                    Some('"') => break,
                    Some('\\') => match chars.next() {
                        None => return Err(ValueError::Unterminated),
                        Some(e @ ('"' | '\\' | '$' | '`')) => out.push(e),
                        Some('\n') => {}
                        Some(e) => {
                            out.push('\\');
                            out.push(e);
                        }
                    },
                    Some(q @ ('$' | '`')) => {
                        return Err(ValueError::Bad(format!(
                            "{q:?} inside double quotes would be expanded by the shell"
                        )))
                    }
                    Some(q) => out.push(q),
                }
            },
            '\\' => match chars.next() {
                None | Some('\n') => return Err(ValueError::Unterminated),
                Some(e) => out.push(e),
            },
            ' ' | '\t' => {
                let tail: String = chars.collect();
                let tail = tail.trim_start_matches([' ', '\t']);
                if tail.is_empty() || tail.starts_with('#') {
                    return Ok(out);
                }
                return Err(ValueError::Bad(
                    "more than one word after '=' (quote the value)".into(),
                ));
            }
            c if is_plain(c) => out.push(c),
            c => {
                return Err(ValueError::Bad(format!(
                    "{c:?} is special to the shell (quote the value)"
                )))
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<(String, String)>> {
        parse_env(text, Path::new("/run/cpuplan/plan.env"))
    }

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
        assert_eq!(one("CPUPLAN_WORKERS='1,113;;2'"), "1,113;;2");
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
        assert_eq!(one("A='x'\r"), "x");
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
        ] {
            let e = parse(text).unwrap_err();
            let msg = e.to_string();
            assert!(
                matches!(&e, ShimError::EnvLine { line: l, .. } if *l == line),
                "{text:?}: {msg}"
            );
            assert!(msg.contains(what), "{text:?}: {msg}");
            assert!(msg.starts_with("/run/cpuplan/plan.env:"), "{msg}");
        }
    }

    #[test]
    fn format_round_trips() {
        for v in [
            "",
            "plain",
            "it's",
            "''",
            "a'\\''b",
            "two\nlines",
            "$X `y` \"z\"",
        ] {
            assert_eq!(one(&format_env_line("K", v)), v, "{v:?}");
        }
    }
}
