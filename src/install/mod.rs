//! `install` / `uninstall`: the binary, the hooks.d registrations and a default hook config;
//! with `--containerd`, containerd's registration ([`containerd`]).

pub mod containerd;
pub mod nri;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

/// Where `install` puts things.
#[derive(Debug, Clone)]
pub struct Layout {
    /// `--prefix` (default `/usr/local`).
    pub prefix: PathBuf,
    /// `--hooks-dir` (default `/etc/containers/oci/hooks.d`).
    pub hooks_dir: PathBuf,
    /// The hook config (the global `--config`, default `/etc/cpuplan/hook.json`).
    pub config: PathBuf,
}

/// What the command line gives `install`/`uninstall`, before defaults: `None` takes the default
/// path under `root_prefix` (`/` when `None`).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `--root-prefix`: a relocated node's root, seen the same way by install and the runtime.
    pub root_prefix: Option<PathBuf>,
    /// `--prefix`.
    pub prefix: Option<PathBuf>,
    /// `--hooks-dir`.
    pub hooks_dir: Option<PathBuf>,
    /// The global `--config`, when it is not the default.
    pub config: Option<PathBuf>,
    /// `--containerd`: register with containerd too.
    pub containerd: bool,
    /// `--containerd-config`.
    pub containerd_config: Option<PathBuf>,
    /// `--containerd-runtimes` (empty: the default runtime).
    pub containerd_runtimes: Vec<String>,
    /// `--ctr-root`: where `ctr` runs (chrooted unless `/`).
    pub ctr_root: Option<PathBuf>,
}

impl Options {
    /// The layout and (with `containerd`) containerd's registration, every path absolute: a
    /// runtime runs the registered hook from another directory.
    pub fn resolve(&self) -> Result<(Layout, Option<containerd::Containerd>), InstallError> {
        let abs = |p: &Path| std::path::absolute(p).map_err(io(p));
        let root = abs(self.root_prefix.as_deref().unwrap_or(Path::new("/")))?;
        let path = |given: &Option<PathBuf>, default: &str| match given {
            Some(p) => abs(p),
            None => Ok(root.join(default.trim_start_matches('/'))),
        };
        let layout = Layout {
            prefix: path(&self.prefix, DEFAULT_PREFIX)?,
            hooks_dir: path(&self.hooks_dir, DEFAULT_HOOKS_DIR)?,
            config: path(&self.config, crate::config::DEFAULT_CONFIG)?,
        };
        let containerd = match self.containerd {
            false => None,
            true => Some(containerd::Containerd {
                config: path(&self.containerd_config, containerd::DEFAULT_CONFIG)?,
                runtimes: self.containerd_runtimes.clone(),
                ctr_root: abs(self.ctr_root.as_deref().unwrap_or(Path::new("/")))?,
            }),
        };
        Ok((layout, containerd))
    }
}

/// The default prefix.
pub const DEFAULT_PREFIX: &str = "/usr/local";
/// The default hooks directory of podman and CRI-O.
pub const DEFAULT_HOOKS_DIR: &str = "/etc/containers/oci/hooks.d";
/// The createRuntime/poststop registration's file name.
pub const HOOK_FILE: &str = "cpuplan.json";
/// The precreate registration's file name.
pub const PRECREATE_FILE: &str = "cpuplan-precreate.json";

/// What could not be installed or removed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// A file operation failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A hooks.d file that cpuplan did not write is in the way.
    #[error("{}: not written by cpuplan-hook install (its hook.path is not {}); refusing to overwrite it", path.display(), ours.display())]
    NotOurs {
        /// The file.
        path: PathBuf,
        /// The binary path cpuplan would register.
        ours: PathBuf,
    },
    /// The containerd registration cannot be made.
    #[error(transparent)]
    Containerd(#[from] containerd::ContainerdError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> InstallError + '_ {
    move |source| InstallError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl Layout {
    /// `<prefix>/libexec/cpuplan/cpuplan-hook`.
    pub fn binary(&self) -> PathBuf {
        self.prefix.join("libexec/cpuplan/cpuplan-hook")
    }

    /// One OCI hook entry that runs the installed binary with `args` after its `--config`.
    fn hook_entry(&self, args: &[&str]) -> Value {
        let mut argv = vec![json!("cpuplan-hook"), json!("--config"), json!(self.config)];
        argv.extend(args.iter().map(|a| json!(a)));
        json!({
            "path": self.binary(),
            "args": argv,
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "timeout": 10
        })
    }

    /// An oci-hooks 1.0.0 file running `args` at `stages`, always.
    fn hooks_d(&self, args: &[&str], stages: &[&str]) -> Value {
        json!({
            "version": "1.0.0",
            "hook": self.hook_entry(args),
            "when": {"always": true},
            "stages": stages
        })
    }

    /// The hooks.d JSON for the createRuntime and poststop stages.
    pub fn hook_json(&self) -> Value {
        self.hooks_d(&["hook"], &["createRuntime", "poststop"])
    }

    /// The hooks.d JSON for podman's precreate stage.
    pub fn precreate_json(&self) -> Value {
        self.hooks_d(&["precreate"], &["precreate"])
    }

    /// The lines containerd users add: the hooks of a `base_runtime_spec`.
    pub fn containerd_hooks(&self) -> Value {
        json!({
            "createRuntime": [self.hook_entry(&["hook", "createRuntime"])],
            "poststop": [self.hook_entry(&["hook", "poststop"])]
        })
    }
}

/// The default hook config `install` writes where none exists.
pub fn default_config() -> Value {
    json!({
        "step_thread_core": "auto",
        "cpuset": "numa",
        "dir": "/run/cpuplan",
        "claims_dir": "/run/cpuplan/claims",
        "on_error": "allow",
        "log": "/var/log/cpuplan-hook.log"
    })
}

fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), InstallError> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
    f.write_all(bytes).map_err(io(&tmp))?;
    f.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(io(&tmp))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(io(path))
}

/// Whether the hooks.d file at `path` is absent or was written by install for `layout`.
fn ours_or_absent(layout: &Layout, path: &Path) -> Result<bool, InstallError> {
    match std::fs::read(path) {
        Ok(bytes) => {
            let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            Ok(v.pointer("/hook/path").and_then(Value::as_str)
                == Some(&layout.binary().display().to_string()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(source) => Err(InstallError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Installs `binary` and the registrations; returns the lines it reports.
pub fn install(
    layout: &Layout,
    binary: &Path,
    with_precreate: bool,
) -> Result<Vec<String>, InstallError> {
    let mut files = vec![(layout.hooks_dir.join(HOOK_FILE), layout.hook_json())];
    if with_precreate {
        files.push((
            layout.hooks_dir.join(PRECREATE_FILE),
            layout.precreate_json(),
        ));
    }
    for (path, _) in &files {
        if !ours_or_absent(layout, path)? {
            return Err(InstallError::NotOurs {
                path: path.clone(),
                ours: layout.binary(),
            });
        }
    }
    let mut said = Vec::new();
    let target = layout.binary();
    if std::fs::canonicalize(binary).ok() != std::fs::canonicalize(&target).ok() {
        let bytes = std::fs::read(binary).map_err(io(binary))?;
        write_atomic(&target, &bytes, 0o755)?;
    }
    said.push(format!("installed {}", target.display()));
    for (path, json) in files {
        let mut text = serde_json::to_vec_pretty(&json).unwrap_or_default();
        text.push(b'\n');
        write_atomic(&path, &text, 0o644)?;
        said.push(format!("registered {}", path.display()));
    }
    if !layout.config.exists() {
        let mut text = serde_json::to_vec_pretty(&default_config()).unwrap_or_default();
        text.push(b'\n');
        write_atomic(&layout.config, &text, 0o644)?;
        said.push(format!(
            "wrote the default config {}",
            layout.config.display()
        ));
    } else {
        said.push(format!(
            "kept the existing config {}",
            layout.config.display()
        ));
    }
    said.push(
        "containerd (CRI) nodes: `install --containerd` also registers the hook with containerd"
            .into(),
    );
    Ok(said)
}

/// Removes what [`install`] wrote (the config only if it is still the default); returns what it did.
pub fn uninstall(layout: &Layout) -> Result<Vec<String>, InstallError> {
    let mut said = Vec::new();
    for name in [HOOK_FILE, PRECREATE_FILE] {
        let path = layout.hooks_dir.join(name);
        if !path.exists() {
            continue;
        }
        if !ours_or_absent(layout, &path)? {
            return Err(InstallError::NotOurs {
                path,
                ours: layout.binary(),
            });
        }
        std::fs::remove_file(&path).map_err(io(&path))?;
        said.push(format!("removed {}", path.display()));
    }
    let bin = layout.binary();
    if bin.exists() {
        std::fs::remove_file(&bin).map_err(io(&bin))?;
        said.push(format!("removed {}", bin.display()));
    }
    for dir in [bin.parent(), layout.config.parent()].into_iter().flatten() {
        let _ = std::fs::remove_dir(dir);
    }
    if let Ok(bytes) = std::fs::read(&layout.config) {
        if serde_json::from_slice::<Value>(&bytes).ok() == Some(default_config()) {
            std::fs::remove_file(&layout.config).map_err(io(&layout.config))?;
            said.push(format!(
                "removed the default config {}",
                layout.config.display()
            ));
            if let Some(d) = layout.config.parent() {
                let _ = std::fs::remove_dir(d);
            }
        } else {
            said.push(format!(
                "kept the edited config {}",
                layout.config.display()
            ));
        }
    }
    Ok(said)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(t: &Path) -> Layout {
        Layout {
            prefix: t.join("prefix"),
            hooks_dir: t.join("hooks.d"),
            config: t.join("etc/cpuplan/hook.json"),
        }
    }

    #[test]
    fn install_is_idempotent_and_uninstall_leaves_nothing() {
        let t = tempfile::tempdir().unwrap();
        let l = layout(t.path());
        let bin = t.path().join("src-bin");
        std::fs::write(&bin, b"#!/bin/sh\n").unwrap();
        install(&l, &bin, true).unwrap();
        install(&l, &bin, true).unwrap();
        assert_eq!(std::fs::read(l.binary()).unwrap(), b"#!/bin/sh\n");
        let mode = std::fs::metadata(l.binary()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755);
        let hook: Value =
            serde_json::from_slice(&std::fs::read(l.hooks_dir.join(HOOK_FILE)).unwrap()).unwrap();
        assert_eq!(hook["hook"]["path"], l.binary().display().to_string());
        assert_eq!(hook["stages"], json!(["createRuntime", "poststop"]));
        assert!(l.hooks_dir.join(PRECREATE_FILE).exists());
        assert!(l.config.exists());
        uninstall(&l).unwrap();
        assert!(!l.hooks_dir.join(HOOK_FILE).exists());
        assert!(!l.binary().exists());
        assert!(!l.config.exists());
        assert!(!t.path().join("prefix/libexec/cpuplan").exists());
    }

    #[test]
    fn refuses_a_foreign_hooks_file_and_keeps_an_edited_config() {
        let t = tempfile::tempdir().unwrap();
        let l = layout(t.path());
        std::fs::create_dir_all(&l.hooks_dir).unwrap();
        std::fs::write(
            l.hooks_dir.join(HOOK_FILE),
            r#"{"hook":{"path":"/opt/other"}}"#,
        )
        .unwrap();
        let e = install(&l, Path::new("/bin/sh"), false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("refusing") && e.contains(HOOK_FILE), "{e}");
        assert!(!l.binary().exists(), "nothing installed when refused");
        std::fs::remove_file(l.hooks_dir.join(HOOK_FILE)).unwrap();
        std::fs::create_dir_all(l.config.parent().unwrap()).unwrap();
        std::fs::write(&l.config, r#"{"on_error":"deny"}"#).unwrap();
        install(&l, Path::new("/bin/sh"), false).unwrap();
        uninstall(&l).unwrap();
        assert_eq!(
            std::fs::read_to_string(&l.config).unwrap(),
            r#"{"on_error":"deny"}"#
        );
    }
}
