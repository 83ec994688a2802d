//! The checks of the hook config's values: a key's type, the names of directories, the system
//! directories no directory of cpuplan's may be.

use std::path::{Path, PathBuf};

use super::ConfigError;

/// Host directories no operator directory (`claims_dir`, `nri_dir`, `inventory_dir`) and no
/// plan directory (`dir`) may be: the system's own, where the hook's lock, claim, record and
/// plan files would sit among the system's files (and `/` itself). A directory below one of
/// them (`/run/cpuplan`, `/var/lib/cpuplan`) is fine; every top-level name starting with `lib`
/// is one of them too.
pub const SYSTEM_DIRS: [&str; 36] = [
    "/",
    "/bin",
    "/boot",
    "/dev",
    "/dev/shm",
    "/etc",
    "/home",
    "/lib",
    "/media",
    "/mnt",
    "/opt",
    "/proc",
    "/root",
    "/run",
    "/run/lock",
    "/run/user",
    "/sbin",
    "/srv",
    "/sys",
    "/sys/fs/cgroup",
    "/tmp",
    "/usr",
    "/usr/bin",
    "/usr/include",
    "/usr/lib",
    "/usr/libexec",
    "/usr/local",
    "/usr/sbin",
    "/usr/share",
    "/usr/src",
    "/var",
    "/var/cache",
    "/var/lib",
    "/var/log",
    "/var/run",
    "/var/tmp",
];

/// Whether `a` and `b` overlap: one is the other or lies below it (component-wise).
pub fn paths_overlap(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// A plan directory inside the container must be absolute, normal (no `.`/`..`) and not `/`.
pub(super) fn check_container_dir(dir: &Path) -> Result<(), String> {
    use std::path::Component;
    if !dir.is_absolute() {
        return Err(format!("{} is not an absolute path", dir.display()));
    }
    let mut normal = 0;
    for c in dir.components() {
        match c {
            Component::RootDir => {}
            Component::Normal(_) => normal += 1,
            _ => return Err(format!("{} holds . or .. components", dir.display())),
        }
    }
    if normal == 0 {
        return Err("the container's / cannot be the plan directory".into());
    }
    if is_system_dir(dir) {
        return Err(system_dir(dir));
    }
    Ok(())
}

/// The value `v` of `key` in the config at `path` as a `T`; else an error naming the key and
/// quoting the value, saying what it is not (`what`): the one rule for a key's type.
pub(super) fn typed<T: serde::de::DeserializeOwned>(
    path: &Path,
    key: &'static str,
    v: serde_json::Value,
    what: &str,
) -> Result<T, ConfigError> {
    serde_json::from_value(v.clone()).map_err(|_| ConfigError::Value {
        path: path.to_path_buf(),
        key,
        message: format!("{} is not {what}", shown(&v)),
    })
}

/// A JSON value as a message quotes it: at most 80 characters of its JSON text.
pub(super) fn shown(v: &serde_json::Value) -> String {
    let text = v.to_string();
    match text.char_indices().nth(80) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text,
    }
}

/// What kind of JSON value `v` is, for a file that is not an object.
pub(super) fn kind_of(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Null => "null",
        serde_json::Value::Object(_) => "an object",
    }
}

/// A path a key names must be a name the kernel takes: no NUL byte.
pub(super) fn check_dir_name(p: &Path) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    if p.as_os_str().as_bytes().contains(&0) {
        return Err(format!("{} holds a NUL byte", quoted_path(p)));
    }
    Ok(())
}

/// `p` quoted as messages quote a value.
fn quoted_path(p: &Path) -> String {
    cpuplan::quoted(&p.display().to_string()).to_string()
}

/// What is wrong with naming the system directory `dir`.
fn system_dir(dir: &Path) -> String {
    format!(
        "{} is a system directory: name a directory of cpuplan's own below it",
        quoted_path(dir)
    )
}

/// Whether `p` is one of the [`SYSTEM_DIRS`] (or a top-level `lib*`), compared by its normal
/// components (`/etc/`, `//etc` and `/./etc` are `/etc`).
pub fn is_system_dir(p: &Path) -> bool {
    use std::path::Component;
    let names: Vec<&std::ffi::OsStr> = p
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    let normal: PathBuf = std::iter::once(std::ffi::OsStr::new("/"))
        .chain(names.iter().copied())
        .collect();
    let top_lib = names.len() == 1 && names[0].to_string_lossy().starts_with("lib");
    top_lib || SYSTEM_DIRS.iter().any(|d| normal == Path::new(d))
}

/// A host directory the hook writes in (`claims_dir`, `nri_dir`, `inventory_dir`) must be
/// normal (no `..`: what it names is what is checked) and none of the [`SYSTEM_DIRS`].
pub(super) fn check_operator_dir(dir: &Path) -> Result<(), String> {
    if dir
        .components()
        .any(|c| c == std::path::Component::ParentDir)
    {
        return Err(format!("{} holds a .. component", quoted_path(dir)));
    }
    if is_system_dir(dir) {
        return Err(system_dir(dir));
    }
    Ok(())
}

/// The `metrics` key's value: `"off"` or `null` (no listener), or `{"address": "HOST:PORT"}`
/// with an IP address (`127.0.0.1:9464`, `[::1]:9464`, `0.0.0.0:9464`) and a port.
pub(super) fn metrics_address(
    v: &serde_json::Value,
) -> Result<Option<std::net::SocketAddr>, String> {
    let what = "is not \"off\" or {\"address\": \"IP:PORT\"}";
    let map = match v {
        serde_json::Value::Null => return Ok(None),
        serde_json::Value::String(s) if s == "off" => return Ok(None),
        serde_json::Value::Object(map) => map,
        other => return Err(format!("{} {what}", shown(other))),
    };
    if let Some(k) = map.keys().find(|k| k.as_str() != "address") {
        return Err(format!("unknown field {:?} (it takes \"address\")", k));
    }
    let Some(address) = map.get("address") else {
        return Err(format!("{} has no \"address\"", shown(v)));
    };
    let text = address
        .as_str()
        .ok_or_else(|| format!("address {} is not a string \"IP:PORT\"", shown(address)))?;
    listen_address(text).map(Some).ok_or_else(|| {
        format!(
            "address {} is not an IP address and port (e.g. \"127.0.0.1:9464\")",
            shown(address)
        )
    })
}

/// A listener's address: `IP:PORT`, or `:PORT` for every address (`[::]:PORT`, IPv4 and IPv6,
/// as Go and Prometheus's exporters read it).
pub fn listen_address(text: &str) -> Option<std::net::SocketAddr> {
    match text.strip_prefix(':') {
        Some(port) if !port.starts_with(':') => port
            .parse::<u16>()
            .ok()
            .map(|p| std::net::SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, p))),
        _ => text.parse().ok(),
    }
}
