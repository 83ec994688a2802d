//! The options of `cpuplan-hook nri`, from its command line and, when the runtime launched the
//! plugin from its plugin directory, from the environment NRI gives it.

use std::path::PathBuf;

use super::error::NriError;

/// Where the runtime's NRI socket is unless `--socket` says otherwise.
pub const DEFAULT_SOCKET: &str = "/var/run/nri/nri.sock";
/// The plugin's name unless `--name` (or `NRI_PLUGIN_NAME`) says otherwise.
pub const DEFAULT_NAME: &str = "cpuplan";
/// The plugin's index unless `--index` (or `NRI_PLUGIN_IDX`) says otherwise.
pub const DEFAULT_INDEX: &str = "10";
/// The variable holding the pre-connected socket's fd of a plugin the runtime launched.
pub const ENV_SOCKET: &str = "NRI_PLUGIN_SOCKET";
/// The variable holding the name of a plugin the runtime launched.
pub const ENV_NAME: &str = "NRI_PLUGIN_NAME";
/// The variable holding the index of a plugin the runtime launched.
pub const ENV_INDEX: &str = "NRI_PLUGIN_IDX";

/// `cpuplan-hook nri --help`.
pub const HELP: &str = "\
cpuplan-hook nri: run as an NRI plugin of containerd or CRI-O

usage: cpuplan-hook [--config FILE] nri [--socket PATH] [--name NAME] [--index NN]
                    [--log FILE] [--test-handler]

  --socket PATH    the runtime's NRI socket (default /var/run/nri/nri.sock); the plugin
                   reconnects with backoff when the runtime restarts
  --name NAME      the plugin's name (default cpuplan)
  --index NN       the plugin's two-digit index (default 10)
  --log FILE       also append the log to FILE (it always goes to stderr)
  --test-handler   set NRI_TEST=1 and annotation cpuplan.nri/test=1 in every container
                   created, and change nothing else (checks the wiring)

Launched by the runtime from its plugin directory (as e.g. 10-cpuplan, no arguments), it uses
the socket NRI_PLUGIN_SOCKET names and exits when the runtime closes it. Its configuration is
then the text the runtime gives at Configure (NRI's <plugin_config_path>/10-cpuplan.conf or
cpuplan.conf, the same JSON keys as the hook config), else the hook config; it opens that
configuration's log at Configure. A configuration the runtime gives replaces --config's.
Stops on SIGTERM or SIGINT.
";

/// How the plugin reaches the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// Connect (and reconnect) to the runtime's NRI socket at this path.
    Socket(PathBuf),
    /// Use this already-connected socket fd, handed over by the runtime that launched us.
    PreConnected(i32),
}

/// The options of `cpuplan-hook nri`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NriOptions {
    /// How to reach the runtime.
    pub endpoint: Endpoint,
    /// The plugin's name.
    pub name: String,
    /// The plugin's two-digit index.
    pub index: String,
    /// cpuplan's configuration file (the global `--config`).
    pub config: PathBuf,
    /// A file the log is appended to, besides stderr.
    pub log: Option<PathBuf>,
    /// Use the test handler instead of the planner.
    pub test_handler: bool,
}

/// The `nri` command line's options, as given (before defaults and the environment).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NriArgs {
    /// `--socket`.
    pub socket: Option<PathBuf>,
    /// `--name`.
    pub name: Option<String>,
    /// `--index`.
    pub index: Option<String>,
    /// `--log`.
    pub log: Option<PathBuf>,
    /// `--test-handler`.
    pub test_handler: bool,
}

impl NriOptions {
    /// The options `args` give, with the environment NRI gives a plugin it launched
    /// (`NRI_PLUGIN_SOCKET`, `NRI_PLUGIN_NAME`, `NRI_PLUGIN_IDX`) taken from `env`.
    pub fn new(
        args: NriArgs,
        config: PathBuf,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<NriOptions, NriError> {
        let socket_given = args.socket.is_some();
        let mut o = NriOptions {
            endpoint: Endpoint::Socket(
                args.socket.unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET)),
            ),
            name: args
                .name
                .or_else(|| env(ENV_NAME))
                .unwrap_or_else(|| DEFAULT_NAME.into()),
            index: args
                .index
                .or_else(|| env(ENV_INDEX))
                .unwrap_or_else(|| DEFAULT_INDEX.into()),
            config,
            log: args.log,
            test_handler: args.test_handler,
        };
        if let Some(fd) = env(ENV_SOCKET).filter(|v| !v.is_empty()) {
            if socket_given {
                return Err(NriError::Usage(format!(
                    "nri: --socket and {ENV_SOCKET} both given"
                )));
            }
            o.endpoint =
                Endpoint::PreConnected(fd.trim().parse().map_err(|_| NriError::PreConnected {
                    value: fd.clone(),
                    why: "not a file descriptor number".into(),
                })?);
        }
        if o.name.is_empty() || o.name.contains(['/', '\0']) {
            return Err(NriError::Usage(format!(
                "nri: bad plugin name {:?}",
                o.name
            )));
        }
        if o.index.len() != 2 || !o.index.bytes().all(|b| b.is_ascii_digit()) {
            return Err(NriError::Usage(format!(
                "nri: the index must be two digits, not {:?}",
                o.index
            )));
        }
        Ok(o)
    }

    /// The plugin's full name as the runtime shows it, `INDEX-NAME`.
    pub fn full_name(&self) -> String {
        format!("{}-{}", self.index, self.name)
    }
}

/// Whether this process looks launched by an NRI runtime from its plugin directory: no
/// arguments, and `NRI_PLUGIN_SOCKET` set. Such a process runs `nri`.
pub fn launched_by_runtime(words: &[String]) -> bool {
    words.is_empty() && std::env::var_os(ENV_SOCKET).is_some_and(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: NriArgs, env: &[(&str, &str)]) -> Result<NriOptions, NriError> {
        NriOptions::new(args, PathBuf::from("/c.json"), |k| {
            env.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn defaults() {
        let o = parse(NriArgs::default(), &[]).unwrap();
        assert_eq!(o.endpoint, Endpoint::Socket(PathBuf::from(DEFAULT_SOCKET)));
        assert_eq!(o.full_name(), "10-cpuplan");
        assert_eq!(o.config, PathBuf::from("/c.json"));
        assert!(!o.test_handler);
    }

    #[test]
    fn options() {
        let o = parse(
            NriArgs {
                socket: Some("/t/nri.sock".into()),
                name: Some("x".into()),
                index: Some("05".into()),
                log: Some("/l".into()),
                test_handler: true,
            },
            &[],
        )
        .unwrap();
        assert_eq!(o.endpoint, Endpoint::Socket(PathBuf::from("/t/nri.sock")));
        assert_eq!(o.full_name(), "05-x");
        assert_eq!(o.log, Some(PathBuf::from("/l")));
        assert!(o.test_handler);
    }

    #[test]
    fn launched_by_the_runtime() {
        let o = parse(
            NriArgs::default(),
            &[(ENV_SOCKET, "3"), (ENV_NAME, "cpuplan"), (ENV_INDEX, "42")],
        )
        .unwrap();
        assert_eq!(o.endpoint, Endpoint::PreConnected(3));
        assert_eq!(o.full_name(), "42-cpuplan");
    }

    #[test]
    fn bad_input() {
        let index = |i: &str| NriArgs {
            index: Some(i.into()),
            ..NriArgs::default()
        };
        let name = |n: &str| NriArgs {
            name: Some(n.into()),
            ..NriArgs::default()
        };
        let socket = NriArgs {
            socket: Some("/s".into()),
            ..NriArgs::default()
        };
        for (args, env) in [
            (index("1"), vec![]),
            (index("ab"), vec![]),
            (name(""), vec![]),
            (name("a/b"), vec![]),
            (socket, vec![(ENV_SOCKET, "3")]),
            (NriArgs::default(), vec![(ENV_SOCKET, "three")]),
        ] {
            assert!(parse(args.clone(), &env).is_err(), "{args:?} {env:?}");
        }
    }
}
