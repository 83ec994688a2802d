//! The files install writes on the host: each through a fresh temporary (`O_CREAT|O_EXCL|
//! O_NOFOLLOW`) that gets its final owner and mode before any byte is written, renamed over
//! the final name; a file that exists keeps its owner, group and mode.
//!
//! Every change install and uninstall make to the host goes through [`write_as`], [`remove`]
//! or [`remove_dir_if_empty`]; inside [`dry_run`] they change nothing and record the
//! [`Change`] they would have made instead.

use std::cell::RefCell;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::InstallError;

/// An I/O error of `step` on `path`.
pub(super) fn io<'a>(
    step: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> InstallError + 'a {
    move |source| InstallError::Io {
        step,
        path: path.to_path_buf(),
        source,
    }
}

/// The text of `path`, `None` when it does not exist.
pub(super) fn read_opt(path: &Path) -> Result<Option<String>, InstallError> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(InstallError::Io {
            step: "reading",
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Owner, group and mode of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Owner {
    /// The owner's uid.
    pub uid: u32,
    /// The group's gid.
    pub gid: u32,
    /// The permission bits.
    pub mode: u32,
}

impl Owner {
    /// `mode`, owned by this process (what a new file gets).
    pub fn mine(mode: u32) -> Owner {
        Owner {
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
            mode,
        }
    }

    /// The owner, group and mode of the file at `path` (not followed if a link), or
    /// [`Owner::mine`] with `mode` when there is none.
    pub fn of_or(path: &Path, mode: u32) -> Owner {
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.is_file() => Owner {
                uid: m.uid(),
                gid: m.gid(),
                mode: m.mode() & 0o7777,
            },
            _ => Owner::mine(mode),
        }
    }
}

/// A temporary name beside `path` that no earlier call used.
fn temp_path(path: &Path, attempt: u32) -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static COUNT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let dir = path.parent().unwrap_or(Path::new("/"));
    dir.join(format!(
        ".{}.tmp{}.{}.{nanos:x}{attempt}",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id(),
        COUNT.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Opens `path` for writing only if nothing (no file, no link, dangling or not) has that name:
/// `O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0600 until it is set.
fn open_new(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(path)
}

/// Creates a fresh temporary beside `path` (`O_CREAT|O_EXCL|O_NOFOLLOW`, never an existing
/// file or link) with `owner`'s uid, gid and mode set before anything is written to it.
pub(super) fn create_temp(path: &Path, owner: Owner) -> std::io::Result<(PathBuf, std::fs::File)> {
    let mut attempt = 0;
    loop {
        let tmp = temp_path(path, attempt);
        let f = match open_new(&tmp) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 16 => {
                attempt += 1;
                continue;
            }
            Err(e) => return Err(e),
        };
        let set = (|| {
            let m = f.metadata()?;
            if m.uid() != owner.uid || m.gid() != owner.gid {
                std::os::unix::fs::fchown(&f, Some(owner.uid), Some(owner.gid))?;
            }
            f.set_permissions(std::fs::Permissions::from_mode(owner.mode))
        })();
        if let Err(e) = set {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        return Ok((tmp, f));
    }
}

/// One change to the host, as a dry run records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A directory made (a missing parent of a file written).
    CreateDir(PathBuf),
    /// A file written: a new one, or one replaced (keeping its owner, group and mode).
    Write {
        /// The file.
        path: PathBuf,
        /// Whether a file of that name is there already.
        replaces: bool,
        /// The permission bits it gets.
        mode: u32,
    },
    /// A file removed.
    Remove(PathBuf),
    /// An empty directory removed.
    RemoveDir(PathBuf),
}

impl Change {
    /// The path changed.
    pub fn path(&self) -> &Path {
        match self {
            Change::CreateDir(p) | Change::Remove(p) | Change::RemoveDir(p) => p,
            Change::Write { path, .. } => path,
        }
    }
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Change::CreateDir(p) => write!(f, "would create the directory {}", p.display()),
            Change::Write {
                path,
                replaces: false,
                mode,
            } => write!(f, "would write {} (new, mode {mode:04o})", path.display()),
            Change::Write {
                path,
                replaces: true,
                mode,
            } => write!(f, "would replace {} (mode {mode:04o})", path.display()),
            Change::Remove(p) => write!(f, "would remove {}", p.display()),
            Change::RemoveDir(p) => {
                write!(f, "would remove the empty directory {}", p.display())
            }
        }
    }
}

thread_local! {
    /// The changes recorded by the [`dry_run`] in progress on this thread, if any.
    static DRY_RUN: RefCell<Option<Vec<Change>>> = const { RefCell::new(None) };
}

/// Runs `f` with every change to the host recorded instead of made; returns its result and
/// the changes, in order. Reads (files, `ctr oci spec`) happen as in a real run.
pub fn dry_run<T>(f: impl FnOnce() -> T) -> (T, Vec<Change>) {
    DRY_RUN.with(|d| *d.borrow_mut() = Some(Vec::new()));
    let out = f();
    let changes = DRY_RUN.with(|d| d.borrow_mut().take()).unwrap_or_default();
    (out, changes)
}

/// In a dry run: `change(recorded so far)`'s changes recorded, and `true`; else `false`.
fn record(change: impl FnOnce(&[Change]) -> Vec<Change>) -> bool {
    DRY_RUN.with(|d| match d.borrow_mut().as_mut() {
        Some(changes) => {
            let new = change(changes);
            changes.extend(new);
            true
        }
        None => false,
    })
}

/// Whether `path` is there, as far as the changes recorded so far leave it.
fn there(changes: &[Change], path: &Path) -> bool {
    match changes.iter().rev().find(|c| c.path() == path) {
        Some(Change::Remove(_) | Change::RemoveDir(_)) => false,
        Some(_) => true,
        None => path.symlink_metadata().is_ok(),
    }
}

/// Removes the file `path`; errors name `step` and `path`.
pub(super) fn remove(step: &'static str, path: &Path) -> Result<(), InstallError> {
    if record(|_| vec![Change::Remove(path.to_path_buf())]) {
        return Ok(());
    }
    std::fs::remove_file(path).map_err(io(step, path))
}

/// Removes the directory `dir` if it is empty (and says nothing otherwise).
pub(super) fn remove_dir_if_empty(dir: &Path) {
    let dry = record(|changes| {
        let empty = there(changes, dir)
            && std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .all(|e| !there(changes, &e.path()))
            && !changes
                .iter()
                .any(|c| c.path().parent() == Some(dir) && there(changes, c.path()));
        if empty {
            vec![Change::RemoveDir(dir.to_path_buf())]
        } else {
            Vec::new()
        }
    });
    if !dry {
        let _ = std::fs::remove_dir(dir);
    }
}

/// Writes `bytes` to `path` with `owner` through a fresh temporary renamed over it (the
/// directory created as needed); errors name `step` and `path`.
pub(super) fn write_as(
    step: &'static str,
    path: &Path,
    bytes: &[u8],
    owner: Owner,
) -> Result<(), InstallError> {
    let dry = record(|changes| {
        let mut new = Vec::new();
        let missing: Vec<&Path> = path
            .ancestors()
            .skip(1)
            .take_while(|d| !there(changes, d))
            .collect();
        new.extend(
            missing
                .into_iter()
                .rev()
                .map(|d| Change::CreateDir(d.into())),
        );
        new.push(Change::Write {
            path: path.to_path_buf(),
            replaces: there(changes, path),
            mode: owner.mode,
        });
        new
    });
    if dry {
        return Ok(());
    }
    let dir = path.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(dir).map_err(io(step, path))?;
    let (tmp, mut f) = create_temp(path, owner).map_err(io(step, path))?;
    let written = (|| {
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(io(step, path))
}

/// Writes `bytes` to `path`: a new file gets `mode` and this process's owner; an existing one
/// keeps its owner, group and mode.
pub(super) fn write_atomic(
    step: &'static str,
    path: &Path,
    bytes: &[u8],
    mode: u32,
) -> Result<(), InstallError> {
    write_as(step, path, bytes, Owner::of_or(path, mode))
}

/// Writes `bytes` to `path` with exactly `mode` (and this process's owner), whatever the file had.
pub(super) fn write_with_mode(
    step: &'static str,
    path: &Path,
    bytes: &[u8],
    mode: u32,
) -> Result<(), InstallError> {
    write_as(step, path, bytes, Owner::mine(mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_edit_keeps_owner_group_and_mode_and_the_temp_has_them_before_any_text() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("config.toml");
        std::fs::write(&p, "old\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        // Group 1 (daemon) when running as root, as containerd's config may be.
        let gid = if nix::unistd::geteuid().is_root() {
            1
        } else {
            nix::unistd::getegid().as_raw()
        };
        std::os::unix::fs::chown(&p, None, Some(gid)).unwrap();
        let owner = Owner::of_or(&p, 0o644);
        assert_eq!((owner.gid, owner.mode), (gid, 0o640));
        let (tmp, f) = create_temp(&p, owner).unwrap();
        let m = f.metadata().unwrap();
        assert_eq!(
            (m.gid(), m.mode() & 0o7777, m.len()),
            (gid, 0o640, 0),
            "final group and mode while still empty"
        );
        drop(f);
        std::fs::remove_file(tmp).unwrap();
        write_atomic("editing", &p, b"new\n", 0o644).unwrap();
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!((m.gid(), m.mode() & 0o7777), (gid, 0o640));
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new\n");
        let left: Vec<_> = std::fs::read_dir(t.path()).unwrap().flatten().collect();
        assert_eq!(left.len(), 1, "no temporary left: {left:?}");
    }

    #[test]
    fn a_new_file_gets_the_mode_asked_for() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("a/b/file");
        write_atomic("writing", &p, b"x", 0o755).unwrap();
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o755);
        write_with_mode("writing", &p, b"y", 0o644).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o7777, 0o644);
    }

    #[test]
    fn the_temporary_is_never_an_existing_file_or_link() {
        let t = tempfile::tempdir().unwrap();
        let target = t.path().join("target");
        std::fs::write(&target, "keep").unwrap();
        let planted = t.path().join(".config.toml.tmp1");
        std::os::unix::fs::symlink(&target, &planted).unwrap();
        let e = open_new(&planted).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists, "{e}");
        let dangling = t.path().join(".config.toml.tmp2");
        std::os::unix::fs::symlink(t.path().join("nowhere"), &dangling).unwrap();
        assert!(open_new(&dangling).is_err());
        assert!(
            !t.path().join("nowhere").exists(),
            "a dangling link is not followed"
        );
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        let (tmp, f) = create_temp(&t.path().join("config.toml"), Owner::mine(0o600)).unwrap();
        assert!(f.metadata().unwrap().is_file());
        assert!(std::fs::symlink_metadata(tmp).unwrap().is_file());
    }
}
