//! A small command-line parser: a subcommand, `--flag value` options, `--switch`es, positionals.

use std::collections::HashMap;

/// A command line that does not fit the subcommand: exit status 2 and this one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The parsed words after the subcommand.
#[derive(Debug, Default)]
pub struct Args {
    values: HashMap<&'static str, String>,
    switches: Vec<&'static str>,
    /// Words that are not options.
    pub positional: Vec<String>,
    /// Whether `--help` or `-h` was given.
    pub help: bool,
}

impl Args {
    /// Parses `words` for subcommand `cmd`, which takes the options `valued` (with a value) and `switches`.
    pub fn parse(
        cmd: &str,
        words: &[String],
        valued: &[&'static str],
        switches: &[&'static str],
    ) -> Result<Args, UsageError> {
        let mut a = Args::default();
        let mut i = 0;
        while i < words.len() {
            let w = &words[i];
            i += 1;
            if w == "--help" || w == "-h" {
                a.help = true;
                continue;
            }
            if w == "--" {
                a.positional.extend(words[i..].iter().cloned());
                break;
            }
            let Some(opt) = w.strip_prefix("--") else {
                a.positional.push(w.clone());
                continue;
            };
            let (name, inline) = match opt.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (opt, None),
            };
            if let Some(&key) = valued.iter().find(|k| **k == name) {
                let value = match inline {
                    Some(v) => v,
                    None => {
                        let v = words
                            .get(i)
                            .ok_or_else(|| UsageError(format!("{cmd}: --{name} needs a value")))?;
                        i += 1;
                        v.clone()
                    }
                };
                if a.values.insert(key, value).is_some() {
                    return Err(UsageError(format!("{cmd}: --{name} given twice")));
                }
            } else if let Some(&key) = switches.iter().find(|k| **k == name) {
                if inline.is_some() {
                    return Err(UsageError(format!("{cmd}: --{name} takes no value")));
                }
                a.switches.push(key);
            } else {
                return Err(UsageError(format!(
                    "{cmd}: unknown option --{name} (see {cmd} --help)"
                )));
            }
        }
        Ok(a)
    }

    /// The value of `--name`, if given.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// The value of `--name`, or a usage error naming it.
    pub fn required(&self, cmd: &str, name: &str) -> Result<&str, UsageError> {
        self.value(name)
            .ok_or_else(|| UsageError(format!("{cmd}: --{name} is required (see {cmd} --help)")))
    }

    /// Whether `--name` was given.
    pub fn switch(&self, name: &str) -> bool {
        self.switches.contains(&name)
    }
}

/// Removes a global `--config PATH` (or `--config=PATH`) from anywhere in `words`.
pub fn take_global_config(words: &mut Vec<String>) -> Result<Option<String>, UsageError> {
    let mut found = None;
    let mut i = 0;
    while i < words.len() {
        if words[i] == "--" {
            break;
        }
        if words[i] == "--config" {
            if i + 1 >= words.len() {
                return Err(UsageError("--config needs a value".into()));
            }
            found = Some(words.remove(i + 1));
            words.remove(i);
        } else if let Some(v) = words[i].strip_prefix("--config=") {
            found = Some(v.to_string());
            words.remove(i);
        } else {
            i += 1;
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn options_switches_positionals() {
        let a = Args::parse(
            "plan",
            &w("--setting auto --usable=4 --json x"),
            &["setting", "usable"],
            &["json"],
        )
        .unwrap();
        assert_eq!(a.value("setting"), Some("auto"));
        assert_eq!(a.value("usable"), Some("4"));
        assert!(a.switch("json"));
        assert_eq!(a.positional, vec!["x"]);
        assert!(a
            .required("plan", "mask")
            .unwrap_err()
            .0
            .contains("--mask is required"));
    }

    #[test]
    fn errors() {
        assert!(Args::parse("p", &w("--nope"), &[], &[])
            .unwrap_err()
            .0
            .contains("unknown option --nope"));
        assert!(Args::parse("p", &w("--setting"), &["setting"], &[])
            .unwrap_err()
            .0
            .contains("needs a value"));
        assert!(Args::parse("p", &w("--json=1"), &[], &["json"]).is_err());
        assert!(Args::parse("p", &w("--a 1 --a 2"), &["a"], &[])
            .unwrap_err()
            .0
            .contains("twice"));
    }

    #[test]
    fn global_config_anywhere() {
        let mut v = w("explain --bundle b --config /c.json --json");
        assert_eq!(
            take_global_config(&mut v).unwrap().as_deref(),
            Some("/c.json")
        );
        assert_eq!(v, w("explain --bundle b --json"));
        let mut v = w("--config=/x hook createRuntime");
        assert_eq!(take_global_config(&mut v).unwrap().as_deref(), Some("/x"));
        assert_eq!(v, w("hook createRuntime"));
        assert!(take_global_config(&mut w("--config")).is_err());
    }
}
