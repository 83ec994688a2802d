//! The hook's own configuration, `/etc/cpuplan/hook.json`.

use std::path::{Path, PathBuf};

use cpuplan::{PoolSplit, Setting};
use std::fmt;
use std::str::FromStr;

use serde::Deserialize;

pub use crate::logging::LogLevel;

mod checks;
pub use checks::listen_address;
mod hostdirs;
mod lenient;

pub(crate) use checks::paths_overlap;
use checks::{check_container_dir, check_dir_name, check_operator_dir, kind_of, shown, typed};
pub(crate) use hostdirs::records_dir;

/// What names a GPU as the container's: the operator's spec, the runtime's device nodes, the
/// device plugin's volume-mounts, or the container's own environment.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Deserialize, serde::Serialize,
)]
#[serde(rename_all = "lowercase")]
pub enum GpuSource {
    /// A `linux.devices` char device that resolves to the GPU.
    Devices,
    /// A GPU device node (`/dev/nvidiaN`, `/dev/dri/renderDN`) present in the container's `/dev`.
    Nodes,
    /// A bind mount of the host's `/dev/null` at `/var/run/nvidia-container-devices/<id>`: the
    /// NVIDIA device plugin's volume-mounts strategy (`read::gpus` says what makes one the
    /// operator's).
    Mounts,
    /// `NVIDIA_VISIBLE_DEVICES` in the container's environment.
    Env,
    /// A GPU device node in the container's `/dev` that is not the runtime's (a `/dev` or a node
    /// the container's mounts or image put there: `read::nodes`). No `gpu_sources` can
    /// name it, so it is never trusted.
    #[serde(skip)]
    TenantNode,
    /// A mount at `/var/run/nvidia-container-devices/<id>` that is not a bind of the host's
    /// `/dev/null` (an emptyDir's directory or file, a configMap): the tenant's look-alike.
    /// Never trusted.
    #[serde(skip)]
    TenantMount,
}

impl std::fmt::Display for GpuSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GpuSource::Devices => "linux.devices",
            GpuSource::Nodes => "device node",
            GpuSource::Mounts => "a /dev/null mount of the volume-mounts strategy",
            GpuSource::Env => cpuplan::gpu::nvidia::VISIBLE_DEVICES,
            GpuSource::TenantNode => {
                "a device node the container's mounts or image put in its /dev"
            }
            GpuSource::TenantMount => {
                "a mount at /var/run/nvidia-container-devices that is not a bind of /dev/null"
            }
        })
    }
}

/// Where the hook reads its configuration unless `--config` says otherwise.
pub const DEFAULT_CONFIG: &str = "/etc/cpuplan/hook.json";

/// The log file unless the config's `log` says otherwise.
pub const DEFAULT_LOG: &str = "/var/log/cpuplan-hook.log";

/// Whether the hook narrows the container's cpuset to its GPUs' NUMA CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum CpusetRule {
    /// Narrow to the assigned GPUs' local CPUs when they hold at least `usable` CPUs.
    #[default]
    Numa,
    /// Never write the cpuset.
    Keep,
}

/// The `rank_placement` setting: whether the NRI plugin places each worker process of a
/// container on its GPU's CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RankPlacement {
    /// Place the processes that carry a worker signal.
    #[default]
    Auto,
    /// Place nothing.
    Off,
}

impl FromStr for RankPlacement {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "auto" => Ok(RankPlacement::Auto),
            "off" => Ok(RankPlacement::Off),
            _ => Err(format!(
                "{:?} is not auto or off",
                s.chars().take(40).collect::<String>()
            )),
        }
    }
}

impl fmt::Display for RankPlacement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RankPlacement::Auto => "auto",
            RankPlacement::Off => "off",
        })
    }
}

/// What a planning problem does to the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// Log it, write the `off` plan with the cause, and let the container start.
    #[default]
    Allow,
    /// Fail the hook, so the runtime refuses the container.
    Deny,
}

/// The hook configuration, every key optional.
#[derive(Debug, Clone, PartialEq)]
pub struct HookConfig {
    /// The default `step_thread_core` setting.
    pub step_thread_core: Setting,
    /// Whether the NRI plugin places each GPU worker process on its GPU's CPUs (`auto`) or not.
    pub rank_placement: RankPlacement,
    /// The default `pool_split`: `per-process` (one process per GPU worker shares the CPUs
    /// left) or `off` (one process drives every GPU and gets them all).
    pub pool_split: PoolSplit,
    /// The cpuset rule.
    pub cpuset: CpusetRule,
    /// Directory inside the container for `plan.env` and `plan.json`.
    pub dir: PathBuf,
    /// Host directory of GPU claims.
    pub claims_dir: PathBuf,
    /// What a planning problem does.
    pub on_error: OnError,
    /// Log file, or `None` for stderr only.
    pub log: Option<PathBuf>,
    /// The most detailed log lines kept (`log_level`: `warn`, `info` or `debug`).
    pub log_level: LogLevel,
    /// Host root for /proc, /sys and cgroup mounts.
    pub root: PathBuf,
    /// Where sysfs topology, `/sys/dev/char` and `/proc/driver/nvidia` are read.
    pub topology_root: PathBuf,
    /// How long to wait for the claims lock, in milliseconds.
    pub claim_wait_ms: u64,
    /// What may name a GPU that the container then claims; GPUs named only by another source
    /// are planned for but never claimed.
    pub gpu_sources: Vec<GpuSource>,
    /// Host directory of the NRI plugin's per-container plan directories (bind-mounted into them).
    pub nri_dir: PathBuf,
    /// Host directory (root's, 0700, on a tmpfs) where the hook keeps the host inventory.
    pub inventory_dir: PathBuf,
    /// Where the NRI plugin serves its Prometheus metrics and probes (`metrics.address`), or
    /// `None` (`"off"`, the default): no listener.
    pub metrics: Option<std::net::SocketAddr>,
}

/// The GPU sources trusted unless `gpu_sources` says otherwise: the spec's devices, the
/// runtime's device nodes and the device plugin's volume-mounts.
pub(crate) const DEFAULT_GPU_SOURCES: [GpuSource; 3] =
    [GpuSource::Devices, GpuSource::Nodes, GpuSource::Mounts];

impl Default for HookConfig {
    fn default() -> Self {
        HookConfig {
            step_thread_core: Setting::Auto,
            pool_split: PoolSplit::PerProcess,
            rank_placement: RankPlacement::Auto,
            cpuset: CpusetRule::Numa,
            dir: PathBuf::from("/run/cpuplan"),
            claims_dir: PathBuf::from("/run/cpuplan/claims"),
            on_error: OnError::Allow,
            log: Some(PathBuf::from(DEFAULT_LOG)),
            log_level: LogLevel::Info,
            root: PathBuf::from("/"),
            topology_root: PathBuf::from("/"),
            claim_wait_ms: 2000,
            gpu_sources: DEFAULT_GPU_SOURCES.to_vec(),
            nri_dir: PathBuf::from("/run/cpuplan/nri"),
            inventory_dir: PathBuf::from(cpuplan::inventory::store::INVENTORY_DIR),
            metrics: None,
        }
    }
}

/// The file as written, before defaults and checks: every key's value as JSON, so that a value
/// of the wrong type is refused in a line naming its key ([`typed`]). A key it does not have
/// is refused after the values of those it has ([`KEYS`]).
#[derive(Debug, Deserialize)]
struct RawConfig {
    step_thread_core: Option<serde_json::Value>,
    pool_split: Option<serde_json::Value>,
    rank_placement: Option<serde_json::Value>,
    cpuset: Option<serde_json::Value>,
    dir: Option<serde_json::Value>,
    claims_dir: Option<serde_json::Value>,
    on_error: Option<serde_json::Value>,
    log: Option<serde_json::Value>,
    log_level: Option<serde_json::Value>,
    root: Option<serde_json::Value>,
    topology_root: Option<serde_json::Value>,
    claim_wait_ms: Option<serde_json::Value>,
    gpu_sources: Option<serde_json::Value>,
    nri_dir: Option<serde_json::Value>,
    inventory_dir: Option<serde_json::Value>,
    metrics: Option<serde_json::Value>,
}

/// Every key of the hook config, in [`RawConfig`]'s order.
const KEYS: [&str; 16] = [
    "step_thread_core",
    "pool_split",
    "rank_placement",
    "cpuset",
    "dir",
    "claims_dir",
    "on_error",
    "log",
    "log_level",
    "root",
    "topology_root",
    "claim_wait_ms",
    "gpu_sources",
    "nri_dir",
    "inventory_dir",
    "metrics",
];

/// The seconds the shipped registrations give the hook before the runtime kills it: the
/// package's `hooks/oci/*.json` and every registration `install` writes (podman's and CRI-O's
/// hooks directory, containerd's base spec).
pub(crate) const HOOK_TIMEOUT_S: u64 = 10;

/// The part of the hook's registered timeout kept for its work besides waiting for the claims
/// lock (reading, the cpuset, the plan files, a release after a failure), in milliseconds.
pub(crate) const CLAIM_WAIT_RESERVE_MS: u64 = 2000;

/// The longest `claim_wait_ms` the shipped registrations can hold: [`HOOK_TIMEOUT_S`] less
/// [`CLAIM_WAIT_RESERVE_MS`] (8000 ms).
pub(crate) const MAX_CLAIM_WAIT_MS: u64 = HOOK_TIMEOUT_S * 1000 - CLAIM_WAIT_RESERVE_MS;

/// A configuration file that cannot be used, naming the file and the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but cannot be read.
    #[error("cannot read hook config {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Not JSON, or an unknown key / a bad value type.
    #[error("hook config {}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// serde's message, which names the key.
        message: String,
    },
    /// Two keys name overlapping paths (one is the other, or holds it).
    #[error("hook config {}: keys {a:?} and {b:?} overlap: {} and {}", path.display(), a_path.display(), b_path.display())]
    Overlap {
        /// The file.
        path: PathBuf,
        /// The first key.
        a: &'static str,
        /// Its path.
        a_path: PathBuf,
        /// The second key.
        b: &'static str,
        /// Its path.
        b_path: PathBuf,
    },
    /// A key whose value is not allowed.
    #[error("hook config {}: key {key:?}: {message}", path.display())]
    Value {
        /// The file.
        path: PathBuf,
        /// The key.
        key: &'static str,
        /// What is wrong.
        message: String,
    },
}

/// The keys a config that fails to load still gives a run, each where it is valid on its own:
/// what a planning problem does, where it is logged, where the `off` plan goes, the host
/// roots the container is read under and where the host inventory is kept, and where the
/// claims are (what `claims` lists, and what poststop releases).
pub(crate) const KEPT_WHEN_UNUSABLE: [&str; 8] = [
    "on_error",
    "log",
    "log_level",
    "dir",
    "root",
    "topology_root",
    "claims_dir",
    "inventory_dir",
];

/// The most bytes of a hook config read (1 MiB).
pub(crate) const MAX_HOOK_CONFIG: usize = 1 << 20;

impl HookConfig {
    /// The configuration at `path`; defaults when the file does not exist.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        Self::load_from(path, false)
    }

    /// The configuration at `path`, read bounded and without blocking; when it does not exist,
    /// the defaults, unless `must_exist` (a path the user named). Parsed, then held to the
    /// host's rule for its claims directory ([`HookConfig::on_host`]).
    pub(crate) fn load_from(path: &Path, must_exist: bool) -> Result<Self, ConfigError> {
        match cpuplan::read_file(path, MAX_HOOK_CONFIG) {
            Ok(bytes) => Self::parse(path, &bytes)?.on_host(path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !must_exist => {
                Self::default().on_host(path)
            }
            Err(source) => Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// What a config that failed to load still says of `on_error`: its own value where the file
    /// is JSON with a valid `on_error` (so `deny` holds whatever else is wrong), else the default.
    pub(crate) fn on_error_of_unusable(path: &Path) -> OnError {
        Self::of_unusable(path).on_error
    }

    /// The config a run uses when the file at `path` failed to load: the defaults, except the
    /// keys of [`KEPT_WHEN_UNUSABLE`] where each of them is valid on its own (so `deny` holds,
    /// the problem is logged where the operator looks, and the `off` plan carrying it lands
    /// where the containers look for their plan, whatever else is wrong). A file that is not
    /// JSON (a trailing comma, a missing quote) still gives the keys read before the fault
    /// ([`lenient::leading_keys`]).
    pub(crate) fn of_unusable(path: &Path) -> HookConfig {
        let v = cpuplan::read_file(path, MAX_HOOK_CONFIG)
            .map(|b| lenient::leading_keys(&b))
            .unwrap_or_default();
        let only = |pairs: &serde_json::Map<String, serde_json::Value>| {
            let bytes = serde_json::to_vec(pairs).unwrap_or_default();
            Self::parse(path, &bytes)
        };
        let mut kept = serde_json::Map::new();
        for key in KEPT_WHEN_UNUSABLE {
            if let Some(value) = v.get(key) {
                let one = serde_json::Map::from_iter([(key.to_string(), value.clone())]);
                // A claims directory is kept only where it is the operator's alone, too.
                let valid = match only(&one) {
                    Ok(c) if key == "claims_dir" => c.on_host(path).is_ok(),
                    got => got.is_ok(),
                };
                if valid {
                    kept.insert(key.to_string(), value.clone());
                }
            }
        }
        only(&kept).unwrap_or_default()
    }

    /// This configuration where its host directories may be used: refused (naming
    /// `claims_dir`, the directory at fault, its owner and mode) where the claims directory or
    /// the host-plan records directory beside it, or a directory above them, is not the
    /// operator's alone ([`hostdirs`]). The one check of a config that looks at the host; `path`
    /// is named in the error.
    pub fn on_host(self, path: &Path) -> Result<Self, ConfigError> {
        match hostdirs::untrusted(&self.claims_dir) {
            None => Ok(self),
            Some(message) => Err(ConfigError::Value {
                path: path.to_path_buf(),
                key: "claims_dir",
                message,
            }),
        }
    }

    /// The configuration in `bytes`, read from `path` (named in errors); looks at nothing on
    /// the host (see [`HookConfig::on_host`]).
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Self, ConfigError> {
        let parse_err = |message: String| ConfigError::Parse {
            path: path.to_path_buf(),
            message,
        };
        let doc: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| parse_err(e.to_string()))?;
        let Some(unknown) = doc.as_object().map(|m| {
            m.keys().find(|k| !KEYS.contains(&k.as_str())).map(|k| {
                format!(
                    "unknown field `{k}`, expected one of `{}`",
                    KEYS.join("`, `")
                )
            })
        }) else {
            return Err(parse_err(format!(
                "the file holds {}, not an object of keys",
                kind_of(&doc)
            )));
        };
        let raw: RawConfig = serde_json::from_value(doc).map_err(|e| parse_err(e.to_string()))?;
        let value_err = |key: &'static str, message: String| ConfigError::Value {
            path: path.to_path_buf(),
            key,
            message,
        };
        let mut c = HookConfig::default();
        if let Some(v) = raw.step_thread_core {
            let text = match &v {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Number(n) => n.to_string(),
                other => {
                    return Err(value_err(
                        "step_thread_core",
                        format!("{} is not off, auto or a cpu number", shown(other)),
                    ))
                }
            };
            c.step_thread_core = text
                .parse()
                .map_err(|e: cpuplan::CpuPlanError| value_err("step_thread_core", e.to_string()))?;
        }
        if let Some(v) = raw.pool_split {
            c.pool_split = match &v {
                serde_json::Value::String(s) => s.parse(),
                other => Err(cpuplan::PoolSplitError(other.to_string())),
            }
            .map_err(|e| value_err("pool_split", e.to_string()))?;
        }
        if let Some(v) = raw.rank_placement {
            c.rank_placement = match &v {
                serde_json::Value::String(s) => s.parse(),
                other => Err(format!("{other} is not auto or off")),
            }
            .map_err(|e| value_err("rank_placement", e))?;
        }
        if let Some(v) = raw.cpuset {
            c.cpuset = typed(path, "cpuset", v, "\"numa\" or \"keep\"")?;
        }
        let path_of = |key: &'static str, v: serde_json::Value| -> Result<PathBuf, ConfigError> {
            let p: PathBuf = typed(path, key, v, "a path (a string)")?;
            check_dir_name(&p).map_err(|m| value_err(key, m))?;
            Ok(p)
        };
        if let Some(v) = raw.dir {
            let v = path_of("dir", v)?;
            check_container_dir(&v).map_err(|m| value_err("dir", m))?;
            c.dir = v;
        }
        for (key, v, slot) in [
            ("claims_dir", raw.claims_dir, &mut c.claims_dir),
            ("root", raw.root.clone(), &mut c.root),
            ("nri_dir", raw.nri_dir, &mut c.nri_dir),
            ("inventory_dir", raw.inventory_dir, &mut c.inventory_dir),
        ] {
            if let Some(v) = v {
                let v = path_of(key, v)?;
                if !v.is_absolute() {
                    return Err(value_err(
                        key,
                        format!("{} is not an absolute path", v.display()),
                    ));
                }
                if key != "root" {
                    check_operator_dir(&v).map_err(|m| value_err(key, m))?;
                }
                *slot = v;
            }
        }
        c.topology_root = match raw.topology_root.map(|v| path_of("topology_root", v)) {
            Some(v) => {
                let v = v?;
                if !v.is_absolute() {
                    return Err(value_err(
                        "topology_root",
                        format!("{} is not an absolute path", v.display()),
                    ));
                }
                v
            }
            None => c.root.clone(),
        };
        if let Some(v) = raw.on_error {
            c.on_error = typed(path, "on_error", v, "\"allow\" or \"deny\"")?;
        }
        if let Some(v) = raw.log {
            let text: String = typed(path, "log", v, "\"stderr\" or an absolute path")?;
            c.log = match text.as_str() {
                "stderr" => None,
                p if p.starts_with('/') => {
                    check_dir_name(Path::new(p)).map_err(|m| value_err("log", m))?;
                    Some(PathBuf::from(p))
                }
                p => {
                    return Err(value_err(
                        "log",
                        format!("{p:?} is neither \"stderr\" nor an absolute path"),
                    ))
                }
            };
        }
        if let Some(v) = raw.log_level {
            c.log_level = v.as_str().and_then(LogLevel::parse).ok_or_else(|| {
                value_err(
                    "log_level",
                    format!("{} is not \"warn\", \"info\" or \"debug\"", shown(&v)),
                )
            })?;
        }
        if let Some(v) = raw.gpu_sources {
            let list = v.as_array().ok_or_else(|| {
                value_err(
                    "gpu_sources",
                    format!(
                        "{} is not a list of devices, nodes, mounts and env",
                        shown(&v)
                    ),
                )
            })?;
            let mut sources = Vec::new();
            for name in list {
                let source = serde_json::from_value(name.clone()).map_err(|_| {
                    value_err(
                        "gpu_sources",
                        format!("{} is not devices, nodes, mounts or env", shown(name)),
                    )
                })?;
                if !sources.contains(&source) {
                    sources.push(source);
                }
            }
            c.gpu_sources = sources;
        }
        if let Some(v) = raw.claim_wait_ms {
            let ms: u64 = typed(path, "claim_wait_ms", v, "a whole number of milliseconds")?;
            if ms > MAX_CLAIM_WAIT_MS {
                return Err(value_err(
                    "claim_wait_ms",
                    format!(
                        "{ms} is over {MAX_CLAIM_WAIT_MS}: the hook's registrations time it out \
                         after {HOOK_TIMEOUT_S} s, and {CLAIM_WAIT_RESERVE_MS} ms of that is kept \
                         for the rest of its work"
                    ),
                ));
            }
            c.claim_wait_ms = ms;
        }
        if let Some(v) = raw.metrics {
            c.metrics = checks::metrics_address(&v).map_err(|m| value_err("metrics", m))?;
        }
        if let Some(message) = unknown {
            return Err(parse_err(message));
        }
        c.check_overlaps(path)?;
        Ok(c)
    }

    /// `nri_dir`, `claims_dir` and `log` must be apart: the plugin removes what it planned
    /// under `nri_dir` and bind-mounts its subdirectories into containers, so claims or a log
    /// there could be removed or shown to a tenant.
    fn check_overlaps(&self, path: &Path) -> Result<(), ConfigError> {
        let mut keys: Vec<(&'static str, &Path)> =
            vec![("nri_dir", &self.nri_dir), ("claims_dir", &self.claims_dir)];
        if let Some(log) = &self.log {
            keys.push(("log", log));
        }
        for (i, (a, a_path)) in keys.iter().enumerate() {
            for (b, b_path) in &keys[i + 1..] {
                if paths_overlap(a_path, b_path) {
                    return Err(ConfigError::Overlap {
                        path: path.to_path_buf(),
                        a,
                        a_path: a_path.to_path_buf(),
                        b,
                        b_path: b_path.to_path_buf(),
                    });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
