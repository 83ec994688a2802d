//! A runtime spec's JSON (a bundle's `config.json`, or `precreate`'s stdin) read into a
//! [`ContainerSpec`]: only the fields the planner uses are kept; everything else (the rest of
//! the environment, other annotations, the other hook stages…) is skipped as it is parsed,
//! so a 16 MiB config costs little more than its own bytes.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use oci_spec::runtime::{LinuxCpu, LinuxDevice, LinuxDeviceType, Root};
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::spec::{
    env_of_interest, CharDevice, ContainerSpec, SpecError, SpecHook, SpecMount, ANNOTATION_PREFIX,
};

/// The most bytes of a runtime spec the hook reads (16 MiB).
pub const MAX_CONFIG: usize = 16 << 20;

/// A bundle config that cannot be used, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// Not found, unreadable, not a regular file, too large, or not a runtime spec.
    #[error("{}: {message}", path.display())]
    Load {
        /// The config file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A field's value the planner cannot use (the one rule of [`ContainerSpec::with_cpu`]).
    #[error(transparent)]
    Spec(#[from] SpecError),
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

/// `<bundle>/config.json`, read (bounded, never blocking) and checked; its `root.path` must be a directory.
pub fn load_bundle(bundle: &Path) -> Result<ContainerSpec, BundleError> {
    let (path, bytes) = read_config(bundle)?;
    let spec = parse_spec(&bytes, &path, bundle)?;
    checked_rootfs(&path, spec.rootfs.as_deref())?;
    Ok(spec)
}

/// `<bundle>/config.json`'s rootfs alone (`root.path` made absolute against `bundle`, checked
/// as [`load_bundle`] checks it), the rest of the spec skipped unparsed: what poststop needs.
pub fn load_rootfs(bundle: &Path) -> Result<PathBuf, BundleError> {
    #[derive(Deserialize)]
    struct RootOnly {
        root: Option<Root>,
    }
    let (path, bytes) = read_config(bundle)?;
    let raw: RootOnly = serde_json::from_slice(&bytes).map_err(|e| BundleError::Load {
        path: path.clone(),
        message: format!("not a runtime spec: {e}"),
    })?;
    let rootfs = raw.root.map(|r| bundle.join(r.path()));
    checked_rootfs(&path, rootfs.as_deref())?;
    Ok(rootfs.unwrap_or_default())
}

/// `<bundle>/config.json` and its bytes, read bounded and without blocking.
fn read_config(bundle: &Path) -> Result<(PathBuf, Vec<u8>), BundleError> {
    let path = bundle.join("config.json");
    let bytes = cpuplan::read_file(&path, MAX_CONFIG).map_err(|e| BundleError::Load {
        path: path.clone(),
        message: format!("cannot read: {e}"),
    })?;
    Ok((path, bytes))
}

/// The one rule for a bundle's rootfs: given, and a directory.
fn checked_rootfs(path: &Path, rootfs: Option<&Path>) -> Result<(), BundleError> {
    let Some(rootfs) = rootfs else {
        return Err(BundleError::Field {
            path: path.to_path_buf(),
            field: "root",
            message: "missing".into(),
        });
    };
    if !rootfs.is_dir() {
        return Err(BundleError::Field {
            path: path.to_path_buf(),
            field: "root.path",
            message: format!(
                "{} is not a directory",
                cpuplan::quoted(&rootfs.display().to_string())
            ),
        });
    }
    Ok(())
}

/// The spec in `bytes`, read from `path` (named in errors); `root.path` is made absolute against `bundle`.
pub fn parse_spec(bytes: &[u8], path: &Path, bundle: &Path) -> Result<ContainerSpec, BundleError> {
    let raw: RawSpec = serde_json::from_slice(bytes).map_err(|e| BundleError::Load {
        path: path.to_path_buf(),
        message: format!("not a runtime spec: {e}"),
    })?;
    let linux = raw.linux.unwrap_or_default();
    let cpu = linux.resources.and_then(|r| r.cpu).unwrap_or_default();
    let spec = ContainerSpec::new(path.display().to_string()).with_cpu(
        cpu.quota(),
        cpu.period(),
        cpu.cpus().as_deref(),
    )?;
    let devices = linux
        .devices
        .unwrap_or_default()
        .into_iter()
        .filter(|d| matches!(d.typ(), LinuxDeviceType::C | LinuxDeviceType::U))
        .map(|d| CharDevice {
            major: d.major(),
            minor: d.minor(),
            path: d.path().to_string_lossy().into_owned(),
        })
        .collect();
    Ok(ContainerSpec {
        rootfs: raw.root.map(|r| bundle.join(r.path())),
        devices,
        env: raw
            .process
            .and_then(|p| p.env)
            .map(|e| e.0)
            .unwrap_or_default(),
        annotations: raw.annotations.map(|a| a.0).unwrap_or_default(),
        cgroups_path: linux.cgroups_path,
        mounts: raw
            .mounts
            .unwrap_or_default()
            .iter()
            .map(|m| {
                SpecMount::new(
                    &m.destination,
                    m.typ.as_deref().unwrap_or_default(),
                    m.options.as_deref().unwrap_or_default(),
                )
                .with_source(m.source.as_deref().unwrap_or_default())
            })
            .collect(),
        hooks: raw
            .hooks
            .map(|h| {
                let all = h.create_runtime.into_iter().chain(h.prestart).flatten();
                all.map(|h| SpecHook {
                    path: PathBuf::from(h.path),
                    timeout: h.timeout,
                })
                .collect()
            })
            .unwrap_or_default(),
        ..spec
    })
}

/// The members of a spec the planner reads: oci-spec's types where the member is small
/// (`root`, `linux.devices`, `linux.resources.cpu`); `mounts` borrowed from the bytes (a spec
/// has a dozen or more, each of five strings, and the planner keeps four of them);
/// `process.env` and `annotations` are kept sparsely (only the entries the planner reads), and
/// everything else is skipped.
#[derive(Deserialize)]
struct RawSpec<'a> {
    root: Option<Root>,
    process: Option<RawProcess>,
    annotations: Option<Annotations>,
    linux: Option<RawLinux>,
    #[serde(borrow)]
    mounts: Option<Vec<RawMount<'a>>>,
    hooks: Option<RawHooks>,
}

/// `hooks`, as far as the hook reads them: the stages it runs at, each hook's path and timeout.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawHooks {
    create_runtime: Option<Vec<RawHook>>,
    prestart: Option<Vec<RawHook>>,
}

#[derive(Deserialize)]
struct RawHook {
    path: String,
    timeout: Option<i64>,
}

/// One of `mounts`, as oci-spec's `Mount` reads it, with the members the planner uses: each
/// string borrowed where the JSON holds it without escapes.
#[derive(Deserialize)]
struct RawMount<'a> {
    #[serde(borrow)]
    destination: Borrowed<'a>,
    #[serde(borrow, default, rename = "type")]
    typ: Option<Borrowed<'a>>,
    #[serde(borrow, default)]
    source: Option<Borrowed<'a>>,
    #[serde(borrow, default)]
    options: Option<Vec<Borrowed<'a>>>,
}

#[derive(Deserialize)]
struct RawProcess {
    env: Option<Env>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawLinux {
    cgroups_path: Option<String>,
    resources: Option<RawResources>,
    devices: Option<Vec<LinuxDevice>>,
}

#[derive(Deserialize)]
struct RawResources {
    cpu: Option<LinuxCpu>,
}

/// `process.env`, keeping only the entries [`env_of_interest`] names (the last one wins).
struct Env(BTreeMap<String, String>);

impl<'de> Deserialize<'de> for Env {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Env;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of KEY=VALUE strings")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Env, A::Error> {
                let mut kept = BTreeMap::new();
                while let Some(Borrowed(kv)) = seq.next_element::<Borrowed>()? {
                    if let Some((k, v)) = kv.split_once('=') {
                        if env_of_interest(k) {
                            kept.insert(k.to_string(), v.to_string());
                        }
                    }
                }
                Ok(Env(kept))
            }
        }
        d.deserialize_seq(V)
    }
}

/// `annotations`, keeping only the `cpuplan.*` keys.
struct Annotations(BTreeMap<String, String>);

impl<'de> Deserialize<'de> for Annotations {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Annotations;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Annotations, A::Error> {
                let mut kept = BTreeMap::new();
                while let Some(Borrowed(k)) = map.next_key::<Borrowed>()? {
                    if k.starts_with(ANNOTATION_PREFIX) {
                        let Borrowed(v) = map.next_value::<Borrowed>()?;
                        kept.insert(k.into_owned(), v.into_owned());
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(Annotations(kept))
            }
        }
        d.deserialize_map(V)
    }
}

/// A string borrowed from the input where it holds no escape (no copy of a skipped entry or
/// of a mount's member). serde's own `Cow<str>` borrows only as a struct's direct member,
/// never inside an `Option` or a `Vec`.
struct Borrowed<'a>(Cow<'a, str>);

impl std::ops::Deref for Borrowed<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Borrowed<'_> {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Borrowed<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Borrowed<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Borrowed(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Borrowed(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Borrowed(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V(std::marker::PhantomData))
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
               "process":{"cwd":"/","args":["sh"],"user":{"uid":0,"gid":0},"env":["A=1","NVIDIA_VISIBLE_DEVICES=0,1","OMP_NUM_THREADS=3","OMP_NUM_THREADS=4"]},
               "annotations":{"cpuplan.step-thread-core":"off","other":"x"},
               "linux":{"cgroupsPath":"/x","resources":{"cpu":{"quota":250000,"period":100000,"cpus":"0-3"}},
                        "devices":[{"path":"/dev/nvidia0","type":"c","major":195,"minor":0},
                                   {"path":"/dev/sda","type":"b","major":8,"minor":0}]}}"#,
        );
        let b = load_bundle(d.path()).unwrap();
        assert_eq!(b.rootfs, Some(d.path().join("rootfs")));
        assert_eq!(b.quota, Some(2.5));
        assert_eq!(b.cpus.unwrap().to_string(), "0-3");
        assert_eq!(
            b.devices,
            vec![CharDevice {
                major: 195,
                minor: 0,
                path: "/dev/nvidia0".into()
            }]
        );
        assert_eq!(b.env["NVIDIA_VISIBLE_DEVICES"], "0,1");
        assert_eq!(b.env["OMP_NUM_THREADS"], "4", "the last one wins");
        assert!(
            !b.env.contains_key("A"),
            "variables of no interest are not kept"
        );
        assert_eq!(b.annotations["cpuplan.step-thread-core"], "off");
        assert!(!b.annotations.contains_key("other"));
        assert_eq!(b.cgroups_path.as_deref(), Some("/x"));
    }

    #[test]
    fn the_rootfs_alone_is_the_one_the_whole_spec_gives() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("rootfs")).unwrap();
        // A value the planner refuses elsewhere does not stop poststop finding the rootfs.
        write(
            d.path(),
            r#"{"root":{"path":"rootfs"},"linux":{"resources":{"cpu":{"cpus":"3-1"}}}}"#,
        );
        assert_eq!(load_rootfs(d.path()).unwrap(), d.path().join("rootfs"));
        assert!(load_bundle(d.path()).is_err());
        write(d.path(), r#"{"root":{"path":"rootfs"}}"#);
        assert_eq!(
            Some(load_rootfs(d.path()).unwrap()),
            load_bundle(d.path()).unwrap().rootfs
        );
        write(d.path(), r#"{"root":{"path":"nothere"}}"#);
        let e = load_rootfs(d.path()).unwrap_err().to_string();
        assert!(
            e.contains("root.path") && e.contains("not a directory"),
            "{e}"
        );
        write(d.path(), r#"{"process":{}}"#);
        let e = load_rootfs(d.path()).unwrap_err().to_string();
        assert!(e.contains("root: missing"), "{e}");
        write(d.path(), "[");
        assert!(load_rootfs(d.path()).is_err());
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
                r#"{"ociVersion":"1.0.2","root":{"path":"rootfs"},"linux":{"resources":{"cpu":{"quota":-5}}}}"#,
                "-5",
            ),
            (
                r#"{"root":{"path":"rootfs"},"process":{"env":["A=1",2]}}"#,
                "not a runtime spec",
            ),
        ];
        for (json, needle) in cases {
            write(d.path(), json);
            let e = load_bundle(d.path()).unwrap_err().to_string();
            assert!(
                e.contains("config.json") && e.contains(needle),
                "{json}: {e}"
            );
        }
        let missing = tempfile::tempdir().unwrap();
        let e = load_bundle(missing.path()).unwrap_err().to_string();
        assert!(
            e.contains("config.json") && e.contains("cannot read"),
            "{e}"
        );
    }

    #[test]
    fn minus_one_and_zero_quotas_are_no_limit_and_a_zero_period_the_default() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("rootfs")).unwrap();
        for (cpu, quota) in [
            (r#"{"quota":-1}"#, None),
            (r#"{"quota":0,"period":100000}"#, None),
            (r#"{"quota":50000,"period":0}"#, Some(0.5)),
        ] {
            write(
                d.path(),
                &format!(
                    r#"{{"ociVersion":"1.0.2","root":{{"path":"rootfs"}},"linux":{{"resources":{{"cpu":{cpu}}}}}}}"#
                ),
            );
            assert_eq!(load_bundle(d.path()).unwrap().quota, quota, "{cpu}");
        }
    }

    #[test]
    fn escaped_strings_are_read_too() {
        let spec = parse_spec(
            br#"{"process":{"env":["NVIDIA_VISIBLE_DEVICES=\u0030","X\u003d1"]},"annotations":{"cpuplan.step-thread-core":"a\u0075to"}}"#,
            Path::new("<stdin>"),
            Path::new("/"),
        )
        .unwrap();
        assert_eq!(spec.env["NVIDIA_VISIBLE_DEVICES"], "0");
        assert_eq!(spec.annotations["cpuplan.step-thread-core"], "auto");
        assert_eq!(spec.rootfs, None);
    }
}
