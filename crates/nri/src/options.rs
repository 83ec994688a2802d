//! Where the runtime is and who the plugin is: the socket (or the pre-connected socket a
//! runtime that launched the plugin hands over), the plugin's name and its two-digit index,
//! from what the program was told and from the environment NRI gives a plugin it launches.

use std::path::PathBuf;

use crate::error::Error;

/// The runtime's NRI socket unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/var/run/nri/nri.sock";
/// The variable holding the pre-connected socket's fd of a plugin the runtime launched.
pub const ENV_SOCKET: &str = "NRI_PLUGIN_SOCKET";
/// The variable holding the name of a plugin the runtime launched.
pub const ENV_NAME: &str = "NRI_PLUGIN_NAME";
/// The variable holding the index of a plugin the runtime launched.
pub const ENV_INDEX: &str = "NRI_PLUGIN_IDX";

/// How the plugin reaches the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// Connect (and reconnect) to the runtime's NRI socket at this path.
    Socket(PathBuf),
    /// Use this already-connected socket fd, handed over by the runtime that launched us.
    PreConnected(i32),
}

/// Who the plugin is and how it reaches the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// How to reach the runtime.
    pub endpoint: Endpoint,
    /// The plugin's name (`[A-Za-z0-9_.+-]+`).
    pub name: String,
    /// The plugin's two-digit index: plugins are called in ascending order.
    pub index: String,
}

impl Options {
    /// An external plugin `name` with `index` on the default socket; checks both.
    pub fn new(name: &str, index: &str) -> Result<Options, Error> {
        let o = Options {
            endpoint: Endpoint::Socket(PathBuf::from(DEFAULT_SOCKET)),
            name: name.into(),
            index: index.into(),
        };
        o.check()?;
        Ok(o)
    }

    /// The options of a plugin told `socket`, `name` and `index` (each optional), with the
    /// environment NRI gives a plugin it launched read through `env` (`NRI_PLUGIN_SOCKET`,
    /// `NRI_PLUGIN_NAME`, `NRI_PLUGIN_IDX`): what the plugin was told wins over the
    /// environment, the environment over `default_name` and `default_index`; `socket` and
    /// `NRI_PLUGIN_SOCKET` together are an error.
    pub fn resolve(
        socket: Option<PathBuf>,
        name: Option<String>,
        index: Option<String>,
        default_name: &str,
        default_index: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Options, Error> {
        let socket_given = socket.is_some();
        let mut o = Options {
            endpoint: Endpoint::Socket(socket.unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET))),
            name: name
                .or_else(|| env(ENV_NAME))
                .unwrap_or_else(|| default_name.into()),
            index: index
                .or_else(|| env(ENV_INDEX))
                .unwrap_or_else(|| default_index.into()),
        };
        if let Some(fd) = env(ENV_SOCKET).filter(|v| !v.is_empty()) {
            if socket_given {
                return Err(Error::Identity(format!(
                    "nri: a socket and {ENV_SOCKET} both given"
                )));
            }
            o.endpoint =
                Endpoint::PreConnected(fd.trim().parse().map_err(|_| Error::PreConnected {
                    value: fd.clone(),
                    why: "not a file descriptor number".into(),
                })?);
        }
        o.check()?;
        Ok(o)
    }

    /// [`Options::resolve`] with nothing told: the environment, else the defaults.
    pub fn from_env(
        default_name: &str,
        default_index: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Options, Error> {
        Self::resolve(None, None, None, default_name, default_index, env)
    }

    /// The same options on the socket at `path`.
    pub fn with_socket(mut self, path: impl Into<PathBuf>) -> Options {
        self.endpoint = Endpoint::Socket(path.into());
        self
    }

    /// The plugin's full name as the runtime shows it, `INDEX-NAME`.
    pub fn full_name(&self) -> String {
        format!("{}-{}", self.index, self.name)
    }

    /// Whether the name and index are ones NRI accepts.
    fn check(&self) -> Result<(), Error> {
        let name_ok = !self.name.is_empty()
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.+".contains(&b));
        if !name_ok {
            return Err(Error::Identity(format!(
                "nri: bad plugin name {:?} (NRI takes [A-Za-z0-9_.+-]+)",
                self.name
            )));
        }
        if self.index.len() != 2 || !self.index.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::Identity(format!(
                "nri: the index must be two digits, not {:?}",
                self.index
            )));
        }
        Ok(())
    }
}

/// Whether this process looks launched by an NRI runtime from its plugin directory: no
/// arguments (`args_empty`), and `NRI_PLUGIN_SOCKET` set.
pub fn launched_by_runtime(args_empty: bool) -> bool {
    args_empty && std::env::var_os(ENV_SOCKET).is_some_and(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    type Told = (
        Option<&'static str>,
        Option<&'static str>,
        Option<&'static str>,
    );

    fn parse(told: Told, env: &[(&str, &str)]) -> Result<Options, Error> {
        Options::resolve(
            told.0.map(PathBuf::from),
            told.1.map(String::from),
            told.2.map(String::from),
            "demo",
            "10",
            |k| {
                env.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            },
        )
    }

    #[test]
    fn defaults_told_and_launched() {
        let o = parse((None, None, None), &[]).unwrap();
        assert_eq!(o.endpoint, Endpoint::Socket(PathBuf::from(DEFAULT_SOCKET)));
        assert_eq!(o.full_name(), "10-demo");
        let o = parse(
            (Some("/t/nri.sock"), Some("x"), Some("05")),
            &[(ENV_INDEX, "42")],
        )
        .unwrap();
        assert_eq!(o.endpoint, Endpoint::Socket(PathBuf::from("/t/nri.sock")));
        assert_eq!(o.full_name(), "05-x", "what it was told wins");
        let o = parse(
            (None, None, None),
            &[(ENV_SOCKET, "3"), (ENV_NAME, "cpuplan"), (ENV_INDEX, "42")],
        )
        .unwrap();
        assert_eq!(o.endpoint, Endpoint::PreConnected(3));
        assert_eq!(o.full_name(), "42-cpuplan");
        assert_eq!(
            Options::new("a", "01").unwrap().with_socket("/s").endpoint,
            Endpoint::Socket("/s".into())
        );
    }

    #[test]
    fn bad_input() {
        for (told, env) in [
            ((None, None, Some("1")), vec![]),
            ((None, None, Some("ab")), vec![]),
            ((None, Some(""), None), vec![]),
            ((None, Some("a/b"), None), vec![]),
            ((None, Some("a b"), None), vec![]),
            ((Some("/s"), None, None), vec![(ENV_SOCKET, "3")]),
            ((None, None, None), vec![(ENV_SOCKET, "three")]),
        ] {
            assert!(parse(told, &env).is_err(), "{told:?} {env:?}");
        }
    }
}
