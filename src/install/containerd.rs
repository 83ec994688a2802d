//! `install --containerd`: a base runtime spec derived from the node's own containerd
//! (`ctr oci spec` plus cpuplan's hooks) and a config drop-in that containerd's `imports`
//! setting loads, so that no `config.toml` is merged by hand.
//!
//! The base spec is `ctr oci spec` less what CRI removes from it when no base spec is set (the
//! default rlimits; CRI keeps whatever a base spec holds), so that it changes nothing but the hooks.
//!
//! How containerd reads a drop-in decides what it must hold:
//! - containerd 1.7 (config version 2) replaces a plugin's whole section with an imported
//!   file's: the drop-in therefore carries the CRI plugin's section as the node's config has it
//!   (copied at install time) plus cpuplan's keys. containerd 2.x merges sections key by key and
//!   migrates a version 2 drop-in, so the same file serves it when the root config is version 2.
//! - A root config of version 3 (containerd 2.x only) gets a version 3 drop-in holding only
//!   cpuplan's keys under `io.containerd.cri.v1.runtime`.
//! - A relative import is read relative to the importing file's directory, so the drop-in is
//!   imported as `conf.d/cpuplan.toml` unless an existing `imports` entry already covers it.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use toml_edit::{Array, DocumentMut, Item, Table};

use super::files::{self, read_opt, write_atomic};
use super::import::{
    config_version, fresh, fresh_table, load_order, parse, plugin_section, ConfigError,
};
use super::{import, InstallError, Layout};

/// containerd's main config unless `--containerd-config` says otherwise.
pub const DEFAULT_CONFIG: &str = "/etc/containerd/config.toml";
/// The drop-in, relative to the main config's directory.
pub(crate) const DROP_IN: &str = "conf.d/cpuplan.toml";
/// The base runtime spec, relative to the main config's directory.
pub(crate) const BASE_SPEC: &str = "cpuplan-base-spec.json";
/// The CRI plugin of config version 2 (containerd 1.7, and 2.x through migration).
pub(crate) const CRI_V2: &str = "io.containerd.grpc.v1.cri";
/// The CRI runtime plugin of config version 3 (containerd 2.x).
pub(crate) const CRI_V3: &str = "io.containerd.cri.v1.runtime";
/// The annotations containerd passes from the pod and the container into the OCI spec.
pub(crate) const ANNOTATIONS: &str = "cpuplan.*";
/// The first line of every drop-in install writes (uninstall removes only such a file).
pub(crate) const DROP_IN_MARK: &str = "# Written by `cpuplan install --containerd`";
/// The runc runtime type, for a `runc` handler the config does not describe.
const RUNC_V2: &str = "io.containerd.runc.v2";

/// Where the containerd registration goes.
#[derive(Debug, Clone)]
pub struct Containerd {
    /// containerd's main config (`/etc/containerd/config.toml`).
    pub config: PathBuf,
    /// The runtime handlers whose containers run the hook (empty: the default runtime).
    pub runtimes: Vec<String>,
    /// The node's root, where `ctr` is run (chrooted unless it is `/`).
    pub ctr_root: PathBuf,
}

/// What stops the containerd registration.
#[derive(Debug, thiserror::Error)]
pub enum ContainerdError {
    /// `ctr` could not be found or run, or printed no spec.
    #[error("cannot derive the base spec with ctr under {}: {message}", root.display())]
    Ctr {
        /// The root it was looked for under.
        root: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A containerd config that cannot be read as TOML or is of an unsupported version.
    #[error(transparent)]
    Toml(#[from] ConfigError),
    /// A containerd config whose CRI section cannot hold cpuplan's keys.
    #[error("{}: {message}", path.display())]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A runtime handler the config does not describe.
    #[error("containerd runtime handler {name:?} is not in {} (only \"runc\" can be added without its options)", config.display())]
    UnknownRuntime {
        /// The handler.
        name: String,
        /// The main config.
        config: PathBuf,
    },
    /// A file imported after the drop-in sets the CRI section, which would drop cpuplan's keys.
    #[error("{} is imported after {} and sets the CRI plugin's section: containerd 1.7 would keep only its section", later.display(), drop_in.display())]
    Shadowed {
        /// The later file.
        later: PathBuf,
        /// The drop-in.
        drop_in: PathBuf,
    },
}

impl Containerd {
    /// The drop-in install writes.
    pub fn drop_in(&self) -> PathBuf {
        self.dir().join(DROP_IN)
    }

    /// The base runtime spec install writes.
    pub fn base_spec(&self) -> PathBuf {
        self.dir().join(BASE_SPEC)
    }

    fn dir(&self) -> &Path {
        self.config.parent().unwrap_or(Path::new("/"))
    }
}

/// `ctr oci spec` and `ctr --version`'s version of the ctr under `root` (chrooted there unless it is `/`).
pub fn ctr_default_spec(root: &Path) -> Result<(Value, String), ContainerdError> {
    let err = |message: String| ContainerdError::Ctr {
        root: root.to_path_buf(),
        message,
    };
    let inside = [
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ]
    .iter()
    .map(|d| Path::new(d).join("ctr"))
    .find(|p| under(root, p).is_file())
    .ok_or_else(|| err("no ctr in /usr/local/{s,}bin, /usr/{s,}bin or /{s,}bin".into()))?;
    let run = |args: &[&str]| -> Result<String, ContainerdError> {
        let mut cmd = Command::new(&inside);
        if root != Path::new("/") {
            // chroot(2) in the child, not chroot(8): the image the install runs from (FROM
            // scratch) has no chroot binary.
            use std::os::unix::ffi::OsStrExt;
            let root = std::ffi::CString::new(root.as_os_str().as_bytes())
                .map_err(|_| err("the root holds a NUL byte".into()))?;
            // SAFETY: between fork and exec the closure calls only chroot(2) and chdir(2),
            // which are async-signal-safe, on C strings made before the fork; it allocates nothing.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                    if nix::libc::chroot(root.as_ptr()) != 0 || nix::libc::chdir(c"/".as_ptr()) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let out = cmd
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| err(format!("{}: {e}", inside.display())))?;
        if !out.status.success() {
            return Err(err(format!(
                "{} {}: {}",
                inside.display(),
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let spec: Value = serde_json::from_str(&run(&["oci", "spec"])?)
        .map_err(|e| err(format!("`ctr oci spec` printed no JSON: {e}")))?;
    if !spec.is_object() || spec.get("hooks").is_some() {
        return Err(err(
            "`ctr oci spec` printed no default spec (an object without hooks)".into(),
        ));
    }
    let version = run(&["--version"])?
        .split_whitespace()
        .last()
        .unwrap_or("unknown")
        .to_string();
    Ok((spec, version))
}

/// `path` (absolute, as the node sees it) under `root`.
fn under(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
}

/// The spec CRI starts a container from when no base spec is set: `ctr oci spec`'s `spec`
/// without the default security settings CRI takes out then (containerd's
/// `WithoutDefaultSecuritySettings`: the rlimits, so that containers inherit containerd's
/// `RLIMIT_NOFILE` instead of 1024, an AppArmor profile and a seccomp profile). CRI keeps them
/// from a base spec, so a base spec that holds them would change every container.
pub(crate) fn cri_default_spec(mut spec: Value) -> Value {
    if let Some(p) = spec.get_mut("process").and_then(Value::as_object_mut) {
        p.remove("rlimits");
        p.remove("apparmorProfile");
    }
    if let Some(l) = spec.get_mut("linux").and_then(Value::as_object_mut) {
        l.remove("seccomp");
    }
    spec
}

/// The base spec: CRI's default for containerd's default `spec` (`cri_default_spec`) with the hooks of `layout`.
pub fn base_spec(layout: &Layout, spec: Value) -> Value {
    let mut spec = cri_default_spec(spec);
    spec["hooks"] = layout.containerd_hooks();
    spec
}

/// The table at `keys` below `t`, created (implicit, so without its own header when empty) as needed.
fn table_at<'a>(t: &'a mut Table, keys: &[&str]) -> Option<&'a mut Table> {
    let mut cur = t;
    for k in keys {
        let entry = cur.entry(k).or_insert_with(|| {
            let mut t = Table::new();
            t.set_implicit(true);
            Item::Table(t)
        });
        if let Item::Value(toml_edit::Value::InlineTable(it)) = entry {
            *entry = Item::Table(fresh_table(it));
        }
        cur = entry.as_table_mut()?;
    }
    Some(cur)
}

fn push_unique(t: &mut Table, key: &str, value: &str) {
    let item = t
        .entry(key)
        .or_insert_with(|| toml_edit::value(Array::new()));
    if let Some(a) = item.as_array_mut() {
        if !a.iter().any(|v| v.as_str() == Some(value)) {
            a.push(value);
        }
    }
}

/// The drop-in's text for `c`, whose main config holds `main_doc` (`None`: no main config).
pub(crate) fn drop_in_text(
    c: &Containerd,
    main_doc: Option<&DocumentMut>,
) -> Result<String, ContainerdError> {
    let empty = DocumentMut::new();
    let version = match main_doc {
        Some(d) => config_version(&c.config, d)?,
        None => 2,
    };
    let drop_in = c.drop_in();
    let (plugin, mut section, origin) = if version == 3 {
        (CRI_V3, Table::new(), None)
    } else {
        let files = load_order(&c.config, main_doc.unwrap_or(&empty), &drop_in, true)?;
        let mut last: Option<(&PathBuf, &Item)> = None;
        let mut after_ours = false;
        for (path, doc) in &files {
            if *path == drop_in {
                after_ours = true;
                continue;
            }
            if let Some(s) = plugin_section(doc, CRI_V2) {
                if after_ours {
                    return Err(ContainerdError::Shadowed {
                        later: path.clone(),
                        drop_in,
                    });
                }
                last = Some((path, s));
            }
        }
        let section = match last.map(|(_, s)| fresh(s)) {
            Some(Item::Table(t)) => t,
            _ => Table::new(),
        };
        (CRI_V2, section, last.map(|(p, _)| p.clone()))
    };
    let default_runtime = main_doc
        .and_then(|d| plugin_section(d, plugin))
        .and_then(|s| s.get("containerd"))
        .and_then(|s| s.get("default_runtime_name"))
        .and_then(Item::as_str)
        .or_else(|| {
            section
                .get("containerd")
                .and_then(|s| s.get("default_runtime_name"))
                .and_then(Item::as_str)
        })
        .unwrap_or("runc")
        .to_string();
    let runtimes = if c.runtimes.is_empty() {
        vec![default_runtime]
    } else {
        c.runtimes.clone()
    };
    let spec = c.base_spec().display().to_string();
    for name in &runtimes {
        let known = section
            .get("containerd")
            .and_then(|s| s.get("runtimes"))
            .and_then(|s| s.get(name))
            .is_some()
            || main_doc
                .and_then(|d| plugin_section(d, plugin))
                .and_then(|s| s.get("containerd"))
                .and_then(|s| s.get("runtimes"))
                .and_then(|s| s.get(name))
                .is_some();
        if !known && name != "runc" {
            return Err(ContainerdError::UnknownRuntime {
                name: name.clone(),
                config: c.config.clone(),
            });
        }
        let Some(rt) = table_at(&mut section, &["containerd", "runtimes", name]) else {
            return Err(ContainerdError::Config {
                path: c.config.clone(),
                message: format!("containerd.runtimes.{name} is not a table"),
            });
        };
        rt.set_implicit(false);
        if rt.get("runtime_type").is_none() && !known {
            rt.insert("runtime_type", toml_edit::value(RUNC_V2));
        }
        rt.insert("base_runtime_spec", toml_edit::value(spec.clone()));
        push_unique(rt, "pod_annotations", ANNOTATIONS);
        push_unique(rt, "container_annotations", ANNOTATIONS);
    }
    let mut doc = DocumentMut::new();
    doc.insert("version", toml_edit::value(version));
    let mut plugins = Table::new();
    plugins.set_implicit(true);
    section.set_implicit(false);
    plugins.insert(plugin, Item::Table(section));
    doc.insert("plugins", Item::Table(plugins));
    let mut head = format!(
        "{DROP_IN_MARK}; `uninstall --containerd` removes it.\n\
         # Containers of the runtime handler(s) {} start from this base spec (containerd's\n\
         # default spec plus cpuplan's hooks), and the cpuplan.* pod and container annotations reach it:\n\
         #   {spec}\n",
        runtimes.join(", ")
    );
    if version == 2 {
        head.push_str(&format!(
            "# containerd 1.7 replaces a plugin's whole section with an imported one, so this holds the\n\
             # CRI section as it was at install time, plus cpuplan's keys, taken from\n\
             #   {}\n\
             # Run install again after changing that section there.\n",
            origin.unwrap_or_else(|| c.config.clone()).display()
        ));
    }
    Ok(format!("{head}{doc}"))
}

/// The main config with `entry` imported; `None` when an existing import already covers the
/// drop-in (what `install` writes, for the tests of the import).
#[cfg(test)]
fn with_import(c: &Containerd, doc: &DocumentMut) -> Result<Option<String>, ContainerdError> {
    Ok(import::with_import_of(
        &c.config,
        &c.drop_in(),
        doc,
        "containerd",
    )?)
}

/// The main config without the import install added; `None` when it holds none.
#[cfg(test)]
pub(super) fn without_import(c: &Containerd, doc: &DocumentMut) -> Option<String> {
    import::without_import_of(&c.config, &c.drop_in(), doc)
}

/// Whether the base spec at `path` is absent or names `layout`'s binary in its hooks.
fn spec_ours_or_absent(layout: &Layout, path: &Path) -> Result<bool, InstallError> {
    Ok(match read_opt(path)? {
        None => true,
        Some(t) => {
            let v: Value = serde_json::from_str(&t).unwrap_or(Value::Null);
            v.pointer("/hooks/createRuntime/0/path")
                .and_then(Value::as_str)
                == Some(&layout.binary().display().to_string())
        }
    })
}

fn drop_in_ours_or_absent(path: &Path) -> Result<bool, InstallError> {
    Ok(read_opt(path)?.is_none_or(|t| import::starts_with_mark(&t, DROP_IN_MARK)))
}

/// The drop-in and base spec paths of `c`, if each is absent or was written by install for `layout`.
fn ours_or_absent(layout: &Layout, c: &Containerd) -> Result<(PathBuf, PathBuf), InstallError> {
    let (drop_in, spec_path) = (c.drop_in(), c.base_spec());
    let not_ours = |path: PathBuf| InstallError::NotOurs {
        path,
        ours: layout.binary(),
    };
    if !drop_in_ours_or_absent(&drop_in)? {
        return Err(not_ours(drop_in));
    }
    if !spec_ours_or_absent(layout, &spec_path)? {
        return Err(not_ours(spec_path));
    }
    Ok((drop_in, spec_path))
}

/// Registers the hook with containerd: the base spec, the drop-in, the import; returns what it did.
/// Paths are as the node sees them and are read and written as they are (a relocated node's
/// paths carry its root); only `ctr` runs under [`Containerd::ctr_root`].
pub fn install(layout: &Layout, c: &Containerd) -> Result<Vec<String>, InstallError> {
    let (drop_in, spec_path) = ours_or_absent(layout, c)?;
    let main_text = read_opt(&c.config)?;
    let main_doc = match &main_text {
        Some(t) => Some(parse(&c.config, t)?),
        None => None,
    };
    let text = drop_in_text(c, main_doc.as_ref())?;
    let (default, version) = ctr_default_spec(&c.ctr_root)?;
    let mut spec = serde_json::to_vec_pretty(&base_spec(layout, default)).unwrap_or_default();
    spec.push(b'\n');
    write_atomic("writing the base runtime spec", &spec_path, &spec, 0o644)?;
    let mut said = vec![format!(
        "wrote the base runtime spec {} (`ctr oci spec` of ctr {version} as CRI uses it, plus the hooks)",
        spec_path.display()
    )];
    let main = main_text.as_deref().zip(main_doc.as_ref());
    said.extend(import::add(
        &c.config,
        main,
        &drop_in,
        &text,
        "writing the containerd drop-in",
        "containerd",
    )?);
    said.push(
        "restart containerd (e.g. systemctl restart containerd) to load it: new containers then run the hook, running ones are untouched"
            .into(),
    );
    Ok(said)
}

/// Removes what [`install`] wrote for containerd (refusing files it did not write); returns what it did.
pub(crate) fn uninstall(layout: &Layout, c: &Containerd) -> Result<Vec<String>, InstallError> {
    let (drop_in, spec_path) = ours_or_absent(layout, c)?;
    let mut said = import::remove(&c.config, &drop_in, "containerd")?;
    if spec_path.exists() {
        files::remove("removing", &spec_path)?;
        said.push(format!("removed {}", spec_path.display()));
    }
    if !said.is_empty() {
        said.push("restart containerd to unload it".into());
    }
    Ok(said)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::install::import::string_list;

    fn node(t: &Path) -> Containerd {
        Containerd {
            config: t.join("etc/containerd/config.toml"),
            runtimes: Vec::new(),
            ctr_root: PathBuf::from("/"),
        }
    }

    fn doc(s: &str) -> DocumentMut {
        s.parse().unwrap()
    }

    #[test]
    fn a_v2_drop_in_copies_the_cri_section_and_adds_the_keys() {
        let t = tempfile::tempdir().unwrap();
        let c = node(t.path());
        let main = doc(
            "version = 2\n# a comment\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"p:1\"\n  restrict_oom_score_adj = true\n\
             [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n  pod_annotations = [\"x.*\"]\n\
             [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n  SystemdCgroup = false\n\
             [plugins.\"io.containerd.nri.v1.nri\"]\n  disable = false\n",
        );
        let text = drop_in_text(&c, Some(&main)).unwrap();
        assert!(text.starts_with(DROP_IN_MARK), "{text}");
        let d = doc(&text);
        assert_eq!(d["version"].as_integer(), Some(2));
        let cri = &d["plugins"][CRI_V2];
        assert_eq!(cri["sandbox_image"].as_str(), Some("p:1"));
        assert_eq!(cri["restrict_oom_score_adj"].as_bool(), Some(true));
        let runc = &cri["containerd"]["runtimes"]["runc"];
        assert_eq!(
            runc["base_runtime_spec"].as_str(),
            Some(c.base_spec().to_str().unwrap())
        );
        assert_eq!(
            string_list(runc.get("pod_annotations")),
            ["x.*", "cpuplan.*"]
        );
        assert_eq!(
            string_list(runc.get("container_annotations")),
            ["cpuplan.*"]
        );
        assert_eq!(runc["options"]["SystemdCgroup"].as_bool(), Some(false));
        assert!(d["plugins"].get("io.containerd.nri.v1.nri").is_none());
    }

    #[test]
    fn runtimes_default_and_unknown() {
        let t = tempfile::tempdir().unwrap();
        let mut c = node(t.path());
        // No config at all: runc, described.
        let d = doc(&drop_in_text(&c, None).unwrap());
        let runc = &d["plugins"][CRI_V2]["containerd"]["runtimes"]["runc"];
        assert_eq!(runc["runtime_type"].as_str(), Some(RUNC_V2));
        // The default runtime named by the config.
        let main = doc("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\ndefault_runtime_name = \"nv\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nv]\nruntime_type = \"io.containerd.runc.v2\"\n");
        let d = doc(&drop_in_text(&c, Some(&main)).unwrap());
        let rts = &d["plugins"][CRI_V2]["containerd"]["runtimes"];
        assert!(rts
            .get("nv")
            .and_then(|r| r.get("base_runtime_spec"))
            .is_some());
        assert!(rts.get("runc").is_none());
        c.runtimes = vec!["kata".into()];
        let e = drop_in_text(&c, Some(&main)).unwrap_err();
        assert!(e.to_string().contains("\"kata\""), "{e}");
        // Version 1 is refused; version 3 gets the 2.x plugin and only cpuplan's keys.
        c.runtimes.clear();
        assert!(drop_in_text(&c, Some(&doc("[plugins.cri]\n"))).is_err());
        let d = doc(&drop_in_text(&c, Some(&doc("version = 3\n"))).unwrap());
        assert_eq!(d["version"].as_integer(), Some(3));
        let runc = &d["plugins"][CRI_V3]["containerd"]["runtimes"]["runc"];
        assert!(runc.get("base_runtime_spec").is_some());
    }

    #[test]
    fn the_import_is_added_once_and_removed_exactly() {
        let t = tempfile::tempdir().unwrap();
        let c = node(t.path());
        for before in [
            "version = 2\n\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"p:1\"\n",
            "version = 2\nimports = [\"/etc/other.toml\"]\n",
            "imports = []\nversion = 2\n",
        ] {
            let after = with_import(&c, &doc(before)).unwrap().unwrap();
            assert_eq!(
                string_list(doc(&after).get("imports"))
                    .last()
                    .map(String::as_str),
                Some(DROP_IN),
                "{after}"
            );
            assert_eq!(without_import(&c, &doc(&after)).as_deref(), Some(before));
            assert_eq!(without_import(&c, &doc(before)), None);
        }
        // A glob that covers the drop-in: nothing to add.
        let glob = format!(
            "version = 2\nimports = [\"{}/conf.d/*.toml\"]\n",
            c.dir().display()
        );
        assert_eq!(with_import(&c, &doc(&glob)).unwrap(), None);
        assert_eq!(
            with_import(&c, &doc("version = 2\nimports = [\"conf.d/*.toml\"]\n")).unwrap(),
            None
        );
    }

    #[test]
    fn a_later_import_that_sets_the_cri_section_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let c = node(t.path());
        let conf_d = t.path().join("etc/containerd/conf.d");
        std::fs::create_dir_all(&conf_d).unwrap();
        std::fs::write(
            conf_d.join("zz.toml"),
            "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\nsandbox_image = \"z\"\n",
        )
        .unwrap();
        std::fs::write(
            conf_d.join("aa.toml"),
            "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\nsandbox_image = \"a\"\n",
        )
        .unwrap();
        let main = doc("version = 2\nimports = [\"conf.d/*.toml\"]\n");
        let e = drop_in_text(&c, Some(&main)).unwrap_err();
        assert!(e.to_string().contains("zz.toml"), "{e}");
        std::fs::remove_file(conf_d.join("zz.toml")).unwrap();
        // The section taken is the last one loaded before the drop-in.
        let d = doc(&drop_in_text(&c, Some(&main)).unwrap());
        assert_eq!(d["plugins"][CRI_V2]["sandbox_image"].as_str(), Some("a"));
    }
}
