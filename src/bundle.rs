//! What the hook reads from a bundle's `config.json`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use oci_spec::runtime::{LinuxDeviceType, Spec};

/// A bundle config that cannot be used, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// Not found, unreadable or not a runtime spec.
    #[error("{}: {message}", path.display())]
    Load {
        /// The config file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A field holds a value the hook cannot use.
    #[error("{}: {field}: {message}", path.display())]
    Field {
        /// The config file.
        path: PathBuf,
        /// The field, in JSON path form.
        field: &'static str,
        /// What is wrong, quoting the value.
        message: String,
    },
}

/// A char device the container is given (`linux.devices`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceNumber {
    /// Major number.
    pub major: i64,
    /// Minor number.
    pub minor: i64,
}

/// The parts of a bundle's config the hook plans from.
#[derive(Debug, Clone)]
pub struct BundleConfig {
    /// The config file read.
    pub path: PathBuf,
    /// `root.path`, made absolute against the bundle.
    pub rootfs: PathBuf,
    /// `linux.resources.cpu.quota / period`, in CPUs.
    pub quota: Option<f64>,
    /// `linux.resources.cpu.cpus`.
    pub cpus: Option<cpuplan::CpuSet>,
    /// `linux.devices` of type `c`.
    pub char_devices: Vec<DeviceNumber>,
    /// `process.env` as `KEY -> VALUE` (the last one wins).
    pub env: HashMap<String, String>,
    /// `annotations`.
    pub annotations: HashMap<String, String>,
    /// `linux.cgroupsPath`.
    pub cgroups_path: Option<String>,
    /// The whole spec, for stages that rewrite it.
    pub spec: Spec,
}

/// The most bytes of `config.json` the hook reads (16 MiB).
pub const MAX_CONFIG: u64 = 16 << 20;

impl BundleConfig {
    /// `<bundle>/config.json`, read and checked.
    pub fn load(bundle: &Path) -> Result<Self, BundleError> {
        let path = bundle.join("config.json");
        let load = |message: String| BundleError::Load {
            path: path.clone(),
            message,
        };
        let meta = std::fs::metadata(&path).map_err(|e| load(format!("cannot read: {e}")))?;
        if meta.len() > MAX_CONFIG {
            return Err(load(format!(
                "{} bytes is over the {MAX_CONFIG}-byte limit",
                meta.len()
            )));
        }
        let bytes = std::fs::read(&path).map_err(|e| load(format!("cannot read: {e}")))?;
        let spec: Spec =
            serde_json::from_slice(&bytes).map_err(|e| load(format!("not a runtime spec: {e}")))?;
        Self::from_spec(path, bundle, spec, true)
    }

    /// The config of `spec`, found at `path` in `bundle`; `need_root` checks `root.path` exists.
    pub fn from_spec(
        path: PathBuf,
        bundle: &Path,
        spec: Spec,
        need_root: bool,
    ) -> Result<Self, BundleError> {
        let field = |field: &'static str, message: String| BundleError::Field {
            path: path.clone(),
            field,
            message,
        };
        let rootfs = match spec.root() {
            Some(r) => bundle.join(r.path()),
            None if need_root => return Err(field("root", "missing".into())),
            None => bundle.join("rootfs"),
        };
        if need_root && !rootfs.is_dir() {
            return Err(field(
                "root.path",
                format!("{:?} is not a directory", rootfs.display().to_string()),
            ));
        }
        let cpu = spec
            .linux()
            .as_ref()
            .and_then(|l| l.resources().as_ref())
            .and_then(|r| r.cpu().as_ref());
        let quota = match cpu.map(|c| (c.quota(), c.period())) {
            None | Some((None, _)) | Some((Some(-1), _)) => None,
            Some((Some(q), _)) if q <= 0 => {
                return Err(field(
                    "linux.resources.cpu.quota",
                    format!("{q} is neither positive nor -1"),
                ))
            }
            Some((Some(q), p)) => {
                let p = p.unwrap_or(100_000);
                if p == 0 {
                    return Err(field(
                        "linux.resources.cpu.period",
                        "0 with a quota set".into(),
                    ));
                }
                Some(q as f64 / p as f64)
            }
        };
        let cpus = match cpu.and_then(|c| c.cpus().as_deref()) {
            None => None,
            Some(text) if text.trim().is_empty() => None,
            Some(text) => Some(
                cpuplan::parse_cpu_list(text)
                    .map_err(|e| field("linux.resources.cpu.cpus", e.to_string()))?,
            ),
        };
        let char_devices = spec
            .linux()
            .as_ref()
            .and_then(|l| l.devices().as_ref())
            .map(|ds| {
                ds.iter()
                    .filter(|d| matches!(d.typ(), LinuxDeviceType::C | LinuxDeviceType::U))
                    .map(|d| DeviceNumber {
                        major: d.major(),
                        minor: d.minor(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut env = HashMap::new();
        if let Some(vars) = spec.process().as_ref().and_then(|p| p.env().as_ref()) {
            for kv in vars {
                if let Some((k, v)) = kv.split_once('=') {
                    env.insert(k.to_string(), v.to_string());
                }
            }
        }
        let annotations = spec.annotations().clone().unwrap_or_default();
        let cgroups_path = spec
            .linux()
            .as_ref()
            .and_then(|l| l.cgroups_path().as_ref())
            .map(|p| p.display().to_string());
        Ok(BundleConfig {
            path,
            rootfs,
            quota,
            cpus,
            char_devices,
            env,
            annotations,
            cgroups_path,
            spec,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, json: &str) {
        std::fs::write(dir.join("config.json"), json).unwrap();
    }

    #[test]
    fn reads_quota_cpus_devices_env() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("rootfs")).unwrap();
        write(
            d.path(),
            r#"{"ociVersion":"1.0.2","root":{"path":"rootfs"},
               "process":{"cwd":"/","args":["sh"],"user":{"uid":0,"gid":0},"env":["A=1","NVIDIA_VISIBLE_DEVICES=0,1","A=2"]},
               "annotations":{"cpuplan.step-thread-core":"off"},
               "linux":{"cgroupsPath":"/x","resources":{"cpu":{"quota":250000,"period":100000,"cpus":"0-3"}},
                        "devices":[{"path":"/dev/nvidia0","type":"c","major":195,"minor":0},
                                   {"path":"/dev/sda","type":"b","major":8,"minor":0}]}}"#,
        );
        let b = BundleConfig::load(d.path()).unwrap();
        assert_eq!(b.rootfs, d.path().join("rootfs"));
        assert_eq!(b.quota, Some(2.5));
        assert_eq!(b.cpus.unwrap().to_string(), "0-3");
        assert_eq!(
            b.char_devices,
            vec![DeviceNumber {
                major: 195,
                minor: 0
            }]
        );
        assert_eq!(b.env["A"], "2");
        assert_eq!(b.env["NVIDIA_VISIBLE_DEVICES"], "0,1");
        assert_eq!(b.annotations["cpuplan.step-thread-core"], "off");
        assert_eq!(b.cgroups_path.as_deref(), Some("/x"));
    }

    #[test]
    fn bad_configs_name_file_and_value() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("rootfs")).unwrap();
        let cases = [
            ("{", "not a runtime spec"),
            (r#"{"ociVersion":"1.0.2"}"#, "root: missing"),
            (r#"{"ociVersion":"1.0.2","root":{"path":"nope"}}"#, "nope"),
            (
                r#"{"ociVersion":"1.0.2","root":{"path":"rootfs"},"linux":{"resources":{"cpu":{"cpus":"3-1"}}}}"#,
                "\"3-1\"",
            ),
            (
                r#"{"ociVersion":"1.0.2","root":{"path":"rootfs"},"linux":{"resources":{"cpu":{"quota":0}}}}"#,
                "quota: 0",
            ),
            (
                r#"{"ociVersion":"1.0.2","root":{"path":"rootfs"},"linux":{"resources":{"cpu":{"quota":-5}}}}"#,
                "-5",
            ),
            (
                r#"{"ociVersion":"1.0.2","root":{"path":"rootfs"},"linux":{"resources":{"cpu":{"quota":5,"period":0}}}}"#,
                "period",
            ),
        ];
        for (json, needle) in cases {
            write(d.path(), json);
            let e = BundleConfig::load(d.path()).unwrap_err().to_string();
            assert!(
                e.contains("config.json") && e.contains(needle),
                "{json}: {e}"
            );
        }
        let missing = tempfile::tempdir().unwrap();
        let e = BundleConfig::load(missing.path()).unwrap_err().to_string();
        assert!(
            e.contains("config.json") && e.contains("cannot read"),
            "{e}"
        );
    }

    #[test]
    fn minus_one_quota_is_no_limit() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("rootfs")).unwrap();
        write(
            d.path(),
            r#"{"ociVersion":"1.0.2","root":{"path":"rootfs"},"linux":{"resources":{"cpu":{"quota":-1}}}}"#,
        );
        assert_eq!(BundleConfig::load(d.path()).unwrap().quota, None);
    }
}
