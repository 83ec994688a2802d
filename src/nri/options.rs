//! The options of `cpuplan-nri`, from its command line and, when the runtime launched the
//! plugin from its plugin directory, from the environment NRI gives it (read by the stub crate).

use std::net::SocketAddr;
use std::path::PathBuf;

pub use nri_plugin::options::DEFAULT_SOCKET;

use super::error::NriError;

/// The plugin's name unless `--name` (or `NRI_PLUGIN_NAME`) says otherwise.
pub(crate) const DEFAULT_NAME: &str = "cpuplan";
/// The plugin's index unless `--index` (or `NRI_PLUGIN_IDX`) says otherwise.
pub(crate) const DEFAULT_INDEX: &str = "10";

/// `cpuplan-nri --help`.
pub const HELP: &str = "\
cpuplan-nri: run as an NRI plugin of containerd or CRI-O

usage: cpuplan-nri [--config FILE] [--socket PATH] [--name NAME] [--index NN] [--log FILE]
                   [--state FILE] [--metrics-address IP:PORT|:PORT]
       cpuplan-nri --probe ready|live [--state FILE]

  --socket PATH    the runtime's NRI socket (default /var/run/nri/nri.sock); the plugin
                   reconnects with backoff when the runtime restarts
  --name NAME      the plugin's name (default cpuplan)
  --index NN       the plugin's two-digit index (default 10)
  --log FILE       also append the log to FILE (it always goes to stderr); --log stderr:
                   stderr only, never the config's log (the systemd unit's journal)
  --state FILE     the probes' state file, rewritten every second (default
                   /run/cpuplan-nri/state)
  --metrics-address ADDR
                   serve /metrics, /readyz and /healthz at ADDR (IP:PORT, or :PORT for
                   every address), whatever the config's \"metrics\" says
  --probe WHICH    print whether the plugin writing --state is ready (registered with the
                   runtime) or live (not wedged), and exit 0 if so, 1 if not

Without --metrics-address, the config's \"metrics\": {\"address\": \"IP:PORT\"} (or \":PORT\")
serves /metrics, /readyz and /healthz there.

Launched by the runtime from its plugin directory (as e.g. 10-cpuplan, no arguments), it uses
the socket NRI_PLUGIN_SOCKET names and exits when the runtime closes it. Its configuration is
then the text the runtime gives at Configure (NRI's <plugin_config_path>/10-cpuplan.conf or
cpuplan.conf, the same JSON keys as the hook config), else the hook config; it opens that
configuration's log at Configure. A configuration the runtime gives replaces --config's.
Stops on SIGTERM or SIGINT.
";

/// The options of `cpuplan-nri`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NriOptions {
    /// How the plugin reaches the runtime, and who it is.
    pub stub: nri_plugin::Options,
    /// cpuplan's configuration file (the global `--config`).
    pub config: PathBuf,
    /// A file the log is appended to, besides stderr.
    pub log: Option<PathBuf>,
    /// The probes' state file ([`super::health`]).
    pub state: PathBuf,
    /// `--metrics-address`: where the listener serves, over the config's `metrics.address`.
    pub metrics_address: Option<SocketAddr>,
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
    /// `--state`.
    pub state: Option<PathBuf>,
    /// `--metrics-address`, as given.
    pub metrics_address: Option<String>,
}

impl NriOptions {
    /// The options `args` give, with the environment NRI gives a plugin it launched
    /// (`NRI_PLUGIN_SOCKET`, `NRI_PLUGIN_NAME`, `NRI_PLUGIN_IDX`) taken from `env`.
    pub fn new(
        args: NriArgs,
        config: PathBuf,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<NriOptions, NriError> {
        let stub = nri_plugin::Options::resolve(
            args.socket,
            args.name,
            args.index,
            DEFAULT_NAME,
            DEFAULT_INDEX,
            env,
        )
        .map_err(|e| match e {
            nri_plugin::Error::Identity(m) => NriError::Usage(m),
            other => NriError::Stub(other),
        })?;
        let metrics_address = match args.metrics_address.as_deref() {
            None => None,
            Some(text) => Some(crate::config::listen_address(text).ok_or_else(|| {
                NriError::Usage(format!(
                    "--metrics-address {:?} is not an IP address and port (e.g. \"10.0.0.5:8893\") or :PORT",
                    crate::logging::escape(text)
                ))
            })?),
        };
        Ok(NriOptions {
            stub,
            config,
            log: args.log,
            state: args
                .state
                .unwrap_or_else(|| PathBuf::from(super::health::DEFAULT_STATE)),
            metrics_address,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nri_plugin::Endpoint;

    fn parse(args: NriArgs, env: &[(&str, &str)]) -> Result<NriOptions, NriError> {
        NriOptions::new(args, PathBuf::from("/c.json"), |k| {
            env.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn defaults_and_the_runtime_s_environment() {
        let o = parse(NriArgs::default(), &[]).unwrap();
        assert_eq!(
            o.stub.endpoint,
            Endpoint::Socket(PathBuf::from(DEFAULT_SOCKET))
        );
        assert_eq!(o.stub.full_name(), "10-cpuplan");
        assert_eq!(o.config, PathBuf::from("/c.json"));
        let o = parse(
            NriArgs {
                log: Some("/l".into()),
                ..NriArgs::default()
            },
            &[("NRI_PLUGIN_SOCKET", "3"), ("NRI_PLUGIN_IDX", "42")],
        )
        .unwrap();
        assert_eq!(o.stub.endpoint, Endpoint::PreConnected(3));
        assert_eq!(o.stub.full_name(), "42-cpuplan");
        assert_eq!(o.log, Some(PathBuf::from("/l")));
    }

    #[test]
    fn a_bad_name_or_index_is_a_usage_error() {
        let index = NriArgs {
            index: Some("1".into()),
            ..NriArgs::default()
        };
        assert!(matches!(parse(index, &[]), Err(NriError::Usage(_))));
        let bad_fd = parse(NriArgs::default(), &[("NRI_PLUGIN_SOCKET", "x")]);
        assert!(matches!(bad_fd, Err(NriError::Stub(_))));
    }

    fn metrics_address(text: &str) -> Result<Option<SocketAddr>, String> {
        let args = NriArgs {
            metrics_address: Some(text.into()),
            ..NriArgs::default()
        };
        parse(args, &[])
            .map(|o| o.metrics_address)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_metrics_address_is_ip_and_port_or_a_port_for_every_address() {
        assert_eq!(
            parse(NriArgs::default(), &[]).unwrap().metrics_address,
            None
        );
        let every = |p: u16| Some(SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, p)));
        assert_eq!(metrics_address(":9464"), Ok(every(9464)));
        assert_eq!(metrics_address(":0"), Ok(every(0)));
        assert_eq!(
            metrics_address("10.0.0.5:8893"),
            Ok(Some("10.0.0.5:8893".parse().unwrap()))
        );
        assert_eq!(
            metrics_address("[fd00::5]:8893"),
            Ok(Some("[fd00::5]:8893".parse().unwrap()))
        );
        for bad in [
            ":",
            "::9464",
            ":70000",
            ":x",
            "9464",
            "node:8893",
            "10.0.0.5",
            "",
        ] {
            let e = metrics_address(bad).unwrap_err();
            assert!(
                e.contains(&format!(
                    "--metrics-address {bad:?} is not an IP address and port"
                )),
                "{bad}: {e}"
            );
        }
        // The config's `metrics.address` reads `:PORT` the same way.
        let c = crate::config::HookConfig::parse(
            std::path::Path::new("/c.json"),
            br#"{"metrics": {"address": ":9464"}}"#,
        )
        .unwrap();
        assert_eq!(c.metrics, every(9464));
    }
}
