//! `install` / `uninstall`: the binary, the hooks.d registrations and a default hook config;
//! with `--containerd`, containerd's registration ([`containerd`]).

pub mod containerd;
mod files;
mod hook_config;
mod hooks_dir;
mod hooks_file;
mod import;
pub mod nri;
pub mod packaged;

use std::path::{Path, PathBuf};

pub use files::{dry_run, Change};
use files::{io, write_with_mode};
pub use hook_config::{default_config, DEFAULT_CONFIG_TEXT};
use hooks_file::HooksFile;
pub use packaged::{Packaged, NOT_PACKAGED};

use serde_json::Value;

/// Where `install` puts things.
#[derive(Debug, Clone)]
pub struct Layout {
    /// `--prefix` (default `/usr/local`).
    pub prefix: PathBuf,
    /// `--hooks-dir` (default: where podman reads, `hooks_dir::podman_hooks_dir`).
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
        let abs = |p: &Path| std::path::absolute(p).map_err(io("resolving the path", p));
        let root = abs(self.root_prefix.as_deref().unwrap_or(Path::new("/")))?;
        let path = |given: &Option<PathBuf>, default: &str| match given {
            Some(p) => abs(p),
            None => Ok(root.join(default.trim_start_matches('/'))),
        };
        let hooks_dir = match &self.hooks_dir {
            Some(p) => abs(p)?,
            None => {
                let env = std::env::var_os("CONTAINERS_CONF").map(PathBuf::from);
                let (dir, _) = hooks_dir::podman_hooks_dir(&root, env.as_deref())?;
                root.join(dir.strip_prefix("/").unwrap_or(&dir))
            }
        };
        let layout = Layout {
            prefix: path(&self.prefix, DEFAULT_PREFIX)?,
            hooks_dir,
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

impl Options {
    /// The files of the Debian package on the node under the root prefix (dpkg's list there).
    pub fn packaged(&self) -> Result<Packaged, InstallError> {
        let root = self.root_prefix.as_deref().unwrap_or(Path::new("/"));
        let root = std::path::absolute(root).map_err(io("resolving the path", root))?;
        Ok(Packaged::read(&root))
    }

    /// Where `install` registered before it looked for podman's hooks dir
    /// (`/etc/containers/oci/hooks.d`, which Debian 12's podman 4.3 does not read), under the
    /// root prefix; `None` when `--hooks-dir` is given.
    pub(crate) fn legacy_hooks_dir(&self) -> Result<Option<PathBuf>, InstallError> {
        if self.hooks_dir.is_some() {
            return Ok(None);
        }
        let root = self.root_prefix.as_deref().unwrap_or(Path::new("/"));
        let root = std::path::absolute(root).map_err(io("resolving the path", root))?;
        Ok(Some(root.join(LEGACY_HOOKS_DIR.trim_start_matches('/'))))
    }
}

/// The hooks dir `install` wrote to before it followed podman's.
pub(crate) const LEGACY_HOOKS_DIR: &str = "/etc/containers/oci/hooks.d";

/// Removes the registrations an earlier install wrote into `legacy` (when it is not the hooks
/// dir in use now, and only files that register `layout`'s binary); returns what it did.
pub(crate) fn remove_legacy(layout: &Layout, legacy: &Path) -> Result<Vec<String>, InstallError> {
    let mut said = Vec::new();
    if legacy == layout.hooks_dir {
        return Ok(said);
    }
    for name in [HOOK_FILE, PRECREATE_FILE] {
        let path = legacy.join(name);
        match std::fs::read(&path) {
            Ok(bytes) if ours(layout, &bytes) => {
                files::remove("removing the hooks.d file", &path)?;
                said.push(format!(
                    "removed {} (an earlier install's, in {LEGACY_HOOKS_DIR}, which podman may not read)",
                    path.display()
                ));
            }
            _ => {}
        }
    }
    Ok(said)
}

/// The default prefix.
pub const DEFAULT_PREFIX: &str = "/usr/local";
/// The default hooks directory of podman and CRI-O (install's when no containers.conf sets one).
pub use hooks_dir::DEFAULT_HOOKS_DIR;
/// The createRuntime/poststop registration's file name.
pub const HOOK_FILE: &str = "cpuplan.json";
/// The precreate registration's file name.
pub(crate) const PRECREATE_FILE: &str = "cpuplan-precreate.json";

/// What could not be installed or removed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// A file operation failed: `step` says which (e.g. "writing the hooks.d file").
    #[error("{step} {}: {source}", path.display())]
    Io {
        /// What was being done.
        step: &'static str,
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A hooks.d file that cpuplan did not write is in the way.
    #[error("{}: not written by cpuplan install (its hook.path is not {}); refusing to overwrite it", path.display(), ours.display())]
    NotOurs {
        /// The file.
        path: PathBuf,
        /// The binary path cpuplan would register.
        ours: PathBuf,
    },
    /// A file install would write is the Debian package's.
    #[error("{}: {}; the package registers the hook already (its config: /etc/cpuplan/hook.json), so cpuplan install is not needed", path.display(), packaged::HINT.split(':').next().unwrap_or_default())]
    Packaged {
        /// The package's file.
        path: PathBuf,
    },
    /// The binary to install asks for a dynamic loader (and `--allow-dynamic` was not given).
    #[error("checking the binary {}: it is dynamically linked (its ELF PT_INTERP asks for {interp}), so the loader would run it as root with whatever LD_PRELOAD or LD_LIBRARY_PATH reaches it; install a static build (scripts/build-static.sh), or pass --allow-dynamic", path.display())]
    Dynamic {
        /// The binary.
        path: PathBuf,
        /// The loader it names.
        interp: String,
    },
    /// The binary to install is not a 64-bit ELF file (and `--allow-dynamic` was not given).
    #[error("checking the binary: {0}; install a static build (scripts/build-static.sh), or pass --allow-dynamic")]
    NotElf(#[source] crate::elf::ElfError),
    /// The containerd registration cannot be made.
    #[error(transparent)]
    Containerd(#[from] containerd::ContainerdError),
    /// containerd's config cannot be read or edited.
    #[error(transparent)]
    Config(#[from] import::ConfigError),
}

impl Layout {
    /// `<prefix>/libexec/cpuplan/cpuplan-hook`.
    pub fn binary(&self) -> PathBuf {
        self.prefix.join("libexec/cpuplan/cpuplan-hook")
    }

    /// One OCI hook that runs the installed binary with `args` after its `--config`.
    fn hook_entry(&self, args: &[&str]) -> oci_spec::runtime::Hook {
        hooks_file::hook(&self.binary(), &self.config, args)
    }

    /// An oci-hooks file running `args` at `stages`, always.
    fn hooks_d(&self, args: &[&str], stages: &[&str]) -> Value {
        let file = HooksFile::always(self.hook_entry(args), stages);
        serde_json::to_value(file).expect("an oci-hooks file serializes")
    }

    /// The hooks.d JSON for the createRuntime and poststop stages.
    pub(crate) fn hook_json(&self) -> Value {
        self.hooks_d(&["hook"], &["createRuntime", "poststop"])
    }

    /// The hooks.d JSON for podman's precreate stage.
    pub(crate) fn precreate_json(&self) -> Value {
        self.hooks_d(&["precreate"], &["precreate"])
    }

    /// The lines containerd users add: the hooks of a `base_runtime_spec`.
    pub(crate) fn containerd_hooks(&self) -> Value {
        let hooks = oci_spec::runtime::HooksBuilder::default()
            .create_runtime(vec![self.hook_entry(&["hook", "createRuntime"])])
            .poststop(vec![self.hook_entry(&["hook", "poststop"])])
            .build()
            .expect("hooks with two stages are complete");
        serde_json::to_value(hooks).expect("OCI hooks serialize")
    }
}

/// Whether the hooks.d file at `path` is absent or was written by install for `layout`.
fn ours_or_absent(layout: &Layout, path: &Path) -> Result<bool, InstallError> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(ours(layout, &bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(source) => Err(InstallError::Io {
            step: "reading the hooks.d file",
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Whether the hooks.d JSON `bytes` registers `layout`'s binary.
fn ours(layout: &Layout, bytes: &[u8]) -> bool {
    HooksFile::parse(bytes).is_some_and(|f| f.hook.path() == &layout.binary())
}

/// What `install` is asked for besides the layout.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct InstallFlags {
    /// `--with-precreate`: register podman's precreate stage too (without it, a precreate file
    /// an earlier install wrote is removed: install is declarative).
    pub with_precreate: bool,
    /// `--allow-dynamic`: install a binary that is not static (with a warning) instead of refusing.
    pub allow_dynamic: bool,
}

/// The prefix of the lines [`install`] returns that are warnings.
pub(crate) const WARNING: &str = "warning: ";

/// Refuses (or, with `allow_dynamic`, warns about) a `binary` that asks for a dynamic loader or
/// is not ELF; `None` when it is static.
fn check_static(binary: &Path, allow_dynamic: bool) -> Result<Option<String>, InstallError> {
    let problem = match crate::elf::interpreter(binary) {
        Ok(None) => return Ok(None),
        Ok(Some(interp)) => InstallError::Dynamic {
            path: binary.to_path_buf(),
            interp,
        },
        Err(e @ crate::elf::ElfError::Format { .. }) => InstallError::NotElf(e),
        Err(crate::elf::ElfError::Io { path, source }) => {
            return Err(InstallError::Io {
                step: "reading the binary",
                path,
                source,
            })
        }
    };
    if !allow_dynamic {
        return Err(problem);
    }
    let text = problem.to_string();
    let text = text
        .split_once("; install a static")
        .map_or(&*text, |(a, _)| a);
    Ok(Some(format!(
        "{WARNING}--allow-dynamic: installing it anyway ({text})"
    )))
}

/// Installs `binary` and the registrations; returns the lines it reports (warnings start with
/// [`WARNING`]). Declarative: the precreate registration exists afterwards exactly when
/// `flags.with_precreate`.
pub(crate) fn install(
    layout: &Layout,
    binary: &Path,
    flags: InstallFlags,
    packaged: &Packaged,
) -> Result<Vec<String>, InstallError> {
    let hook_file = layout.hooks_dir.join(HOOK_FILE);
    let precreate_file = layout.hooks_dir.join(PRECREATE_FILE);
    let mut files = vec![(hook_file, layout.hook_json())];
    if flags.with_precreate {
        files.push((precreate_file.clone(), layout.precreate_json()));
    }
    let writes = files.iter().map(|(p, _)| p.clone());
    let writes: Vec<PathBuf> = writes
        .chain([
            precreate_file.clone(),
            layout.binary(),
            layout.config.clone(),
        ])
        .collect();
    if let Some(path) = writes.into_iter().find(|p| packaged.owns(p)) {
        return Err(InstallError::Packaged { path });
    }
    for (path, _) in &files {
        if !ours_or_absent(layout, path)? {
            return Err(InstallError::NotOurs {
                path: path.clone(),
                ours: layout.binary(),
            });
        }
    }
    let mut said: Vec<String> = check_static(binary, flags.allow_dynamic)?
        .into_iter()
        .collect();
    let target = layout.binary();
    if std::fs::canonicalize(binary).ok() != std::fs::canonicalize(&target).ok() {
        let bytes = std::fs::read(binary).map_err(io("reading the binary", binary))?;
        write_with_mode("writing the binary", &target, &bytes, 0o755)?;
    }
    said.push(format!("installed {}", target.display()));
    for (path, json) in files {
        let mut text = serde_json::to_vec_pretty(&json).unwrap_or_default();
        text.push(b'\n');
        write_with_mode("writing the hooks.d file", &path, &text, 0o644)?;
        said.push(format!("registered {}", path.display()));
    }
    if !flags.with_precreate {
        match std::fs::read(&precreate_file) {
            Ok(bytes) if ours(layout, &bytes) => {
                files::remove("removing the hooks.d file", &precreate_file)?;
                said.push(format!(
                    "removed {} (an earlier install's; no --with-precreate now)",
                    precreate_file.display()
                ));
            }
            Ok(_) => said.push(format!(
                "left {}: cpuplan install did not write it",
                precreate_file.display()
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(InstallError::Io {
                    step: "reading the hooks.d file",
                    path: precreate_file,
                    source,
                })
            }
        }
    }
    said.push(hook_config::write_default_or_keep(layout)?);
    said.push(
        "containerd (CRI) nodes: `install --containerd` also registers the hook with containerd"
            .into(),
    );
    Ok(said)
}

/// Removes what [`install`] wrote (the config only if install wrote it and it is unchanged);
/// returns what it did, or a line saying there was nothing to remove. The Debian package's
/// files (`packaged`) are kept, each with a line saying to use the package manager.
pub(crate) fn uninstall(layout: &Layout, packaged: &Packaged) -> Result<Vec<String>, InstallError> {
    let mut said = Vec::new();
    let mut kept = false;
    let mut keep = |path: &Path, said: &mut Vec<String>| {
        let owned = packaged.owns(path);
        if owned {
            said.push(format!("kept {}: {}", path.display(), packaged::HINT));
            kept = true;
        }
        owned
    };
    for name in [HOOK_FILE, PRECREATE_FILE] {
        let path = layout.hooks_dir.join(name);
        if !path.exists() || keep(&path, &mut said) {
            continue;
        }
        if !ours_or_absent(layout, &path)? {
            return Err(InstallError::NotOurs {
                path,
                ours: layout.binary(),
            });
        }
        files::remove("removing the hooks.d file", &path)?;
        said.push(format!("removed {}", path.display()));
    }
    let bin = layout.binary();
    if bin.exists() && !keep(&bin, &mut said) {
        files::remove("removing the binary", &bin)?;
        said.push(format!("removed {}", bin.display()));
    }
    if !(layout.config.exists() && keep(&layout.config, &mut said)) {
        said.extend(hook_config::remove_if_ours(layout)?);
    }
    for dir in [bin.parent(), layout.config.parent()].into_iter().flatten() {
        files::remove_dir_if_empty(dir);
    }
    if kept && !said.iter().any(|l| l.starts_with("removed")) {
        said.insert(0, format!("nothing removed: cpuplan is {}", packaged::HINT));
    } else if !said.iter().any(|l| l.starts_with("removed")) {
        said.insert(
            0,
            format!(
                "nothing to remove: no {} and no {HOOK_FILE} or {PRECREATE_FILE} in {}",
                bin.display(),
                layout.hooks_dir.display()
            ),
        );
    }
    Ok(said)
}

#[cfg(test)]
mod tests;
