//! Where the one-shot hook keeps the host inventory between starts: one file in a root-only
//! directory on a tmpfs (`/run/cpuplan/inventory` by default, gone at reboot).
//!
//! Trust: the inventory is the operator's. It is used only when the directory is a directory
//! (not a link) owned by root with mode 0700, in a parent owned by root that others cannot
//! write, and the file a regular file (opened with `O_NOFOLLOW`, without blocking) owned by root
//! that neither group nor others can write, of at most [`MAX_FILE`] bytes, that is a whole
//! inventory of this version ([`super::format`]). Anything else is read afresh, and the caller logs why.
//! Written atomically: a temporary file made with `O_EXCL`/`O_NOFOLLOW` in the directory,
//! then renamed over the name (a planted link, FIFO or foreign file is replaced, never opened).

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::format::{decode, encode, MAX_FILE};
use super::stamp::{boot_id, fnv1a64, Stamp};
use super::{HostInventory, InventoryError};

/// The default directory of the inventory files.
pub const INVENTORY_DIR: &str = "/run/cpuplan/inventory";

/// The file in `dir` that holds the inventory of the host under `root` and `topology_root`
/// (one file per pair of roots, so that two configurations never overwrite each other's).
pub fn file_in(dir: &Path, root: &Path, topology_root: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let mut key = root.as_os_str().as_bytes().to_vec();
    key.push(0);
    key.extend_from_slice(topology_root.as_os_str().as_bytes());
    dir.join(format!("host-{:016x}", fnv1a64(&key)))
}

fn untrusted(path: &Path, why: impl Into<String>) -> InventoryError {
    InventoryError::Untrusted {
        path: path.to_path_buf(),
        why: why.into(),
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> InventoryError + '_ {
    move |source| InventoryError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Checks that `dir` is a root-owned 0700 directory (not a link) in a parent owned by root
/// that group and others cannot write.
pub fn check_dir(dir: &Path) -> Result<(), InventoryError> {
    let meta = std::fs::symlink_metadata(dir).map_err(io(dir))?;
    if meta.file_type().is_symlink() {
        return Err(untrusted(dir, "a symbolic link"));
    }
    if !meta.is_dir() {
        return Err(untrusted(dir, "not a directory"));
    }
    if meta.uid() != 0 {
        return Err(untrusted(
            dir,
            format!("owned by uid {}, not root", meta.uid()),
        ));
    }
    if meta.mode() & 0o7777 != 0o700 {
        return Err(untrusted(
            dir,
            format!("mode {:04o}, not 0700", meta.mode() & 0o7777),
        ));
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        let p = std::fs::metadata(parent).map_err(io(parent))?;
        if p.uid() != 0 || p.mode() & 0o022 != 0 {
            return Err(untrusted(
                parent,
                format!(
                    "the parent is owned by uid {} with mode {:04o} (root's, not writable by others, is needed)",
                    p.uid(),
                    p.mode() & 0o7777
                ),
            ));
        }
    }
    Ok(())
}

/// The inventory in `path` (a file [`file_in`] names in a directory [`check_dir`] accepts),
/// read bounded and without blocking, when it is a whole one that can be trusted.
pub fn load_file(path: &Path) -> Result<HostInventory, InventoryError> {
    let flags = nix::libc::O_RDONLY | nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK;
    let f = crate::fsutil::open(path, flags | nix::libc::O_NOCTTY, 0).map_err(|e| {
        match e.raw_os_error() {
            Some(nix::libc::ELOOP) => untrusted(path, "a symbolic link"),
            _ => io(path)(e),
        }
    })?;
    let meta = f.metadata().map_err(io(path))?;
    if !meta.is_file() {
        return Err(untrusted(path, "not a regular file"));
    }
    if meta.uid() != 0 {
        return Err(untrusted(
            path,
            format!("owned by uid {}, not root", meta.uid()),
        ));
    }
    if meta.permissions().mode() & 0o022 != 0 {
        return Err(untrusted(
            path,
            format!(
                "mode {:04o}: group or others may write it",
                meta.mode() & 0o7777
            ),
        ));
    }
    if meta.len() > MAX_FILE as u64 {
        return Err(InventoryError::Corrupt {
            path: path.to_path_buf(),
            why: format!("{} bytes, over the {MAX_FILE}-byte limit", meta.len()),
        });
    }
    // Sized by the descriptor's own statx: the file is written whole and renamed into place,
    // so one read takes all of it, and a read that returns less than asked is its end (a short
    // read that was not would leave a body the decoder refuses). One byte more than its size
    // is asked for, so a file that grew since is seen.
    let mut buf = vec![0u8; meta.len() as usize + 1];
    let len = crate::fsutil::read_once(&f, &mut buf).map_err(io(path))?;
    if len == buf.len() {
        return Err(InventoryError::Corrupt {
            path: path.to_path_buf(),
            why: format!("it grew past its {} bytes while it was read", meta.len()),
        });
    }
    let bytes = &buf[..len];
    decode(bytes).map_err(|why| InventoryError::Corrupt {
        path: path.to_path_buf(),
        why,
    })
}

/// Writes `inv` to `path` in `dir` atomically, making `dir` (root's, 0700) where it is missing.
pub fn save(dir: &Path, path: &Path, inv: &HostInventory) -> Result<(), InventoryError> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent() {
                std::fs::create_dir_all(parent).map_err(io(parent))?;
            }
            match std::fs::DirBuilder::new().mode(0o700).create(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io(dir)(e)),
            }
            // The umask may have taken bits off; it can only have made it stricter.
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(io(dir))?;
        }
        Err(e) => return Err(io(dir)(e)),
        Ok(_) => {}
    }
    check_dir(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    use nix::libc::{O_CREAT, O_EXCL, O_NOFOLLOW, O_WRONLY};
    let mut f = crate::fsutil::open(&tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0o600)
        .map_err(io(&tmp))?;
    let written = std::io::Write::write_all(&mut f, &encode(inv))
        .map_err(io(&tmp))
        .and_then(|()| std::fs::rename(&tmp, path).map_err(io(path)));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// How the inventory of a start was come by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Came {
    /// Read from its file: the stamp and the boot matched.
    File,
    /// Read from the host now and written (there was no file, or the reason given).
    Written(Option<String>),
    /// Read from the host now, but not kept (why); it still served this start.
    NotKept(String),
    /// No inventory: the host is read afresh (why).
    Fresh(String),
}

/// An inventory for one start, with how it came and what the stamp saw.
#[derive(Debug, Clone)]
pub struct Obtained {
    /// The inventory (`None`: read the host afresh).
    pub inventory: Option<HostInventory>,
    /// Its file.
    pub path: PathBuf,
    /// How it came.
    pub came: Came,
    /// What the stamp saw now.
    pub stamp: Stamp,
}

impl Obtained {
    /// One line for the log and `explain`: whether it was used, and why it was read again.
    pub fn describe(&self) -> String {
        let p = self.path.display();
        match &self.came {
            Came::File => format!("host inventory {p} used (stamp and boot match)"),
            Came::Written(None) => format!("host inventory read and written to {p}"),
            Came::Written(Some(why)) => {
                format!("host inventory read again and written to {p}: {why}")
            }
            Came::NotKept(why) => format!("host inventory read, not kept in {p}: {why}"),
            Came::Fresh(why) => format!("no host inventory ({why}): the host was read afresh"),
        }
    }
}

/// The inventory of the host under `root` and `topology_root` for one start: the file in
/// `dir` where it can be trusted and still describes the host (same boot, same stamp), else
/// the host read now and written (`refresh`: always read now). Never fails: what goes wrong
/// is in [`Obtained::came`].
pub fn obtain(dir: &Path, root: &Path, topology_root: &Path, refresh: bool) -> Obtained {
    get(dir, root, topology_root, refresh, true)
}

/// [`obtain`] for a command that only looks (`explain`): the file where it can be trusted and
/// still describes the host, else the host read now and not written ([`Came::NotKept`]: the
/// hook and `precreate` write it at their next start).
pub fn obtain_read_only(dir: &Path, root: &Path, topology_root: &Path) -> Obtained {
    get(dir, root, topology_root, false, false)
}

fn get(dir: &Path, root: &Path, topology_root: &Path, refresh: bool, keep: bool) -> Obtained {
    let path = file_in(dir, root, topology_root);
    let stamp = Stamp::read(root, topology_root);
    let mut out = Obtained {
        inventory: None,
        path: path.clone(),
        came: Came::File,
        stamp,
    };
    if !nix::unistd::geteuid().is_root() {
        out.came = Came::Fresh("not running as root, so no inventory file can be trusted".into());
        return out;
    }
    let why = if refresh {
        Some("--refresh".to_string())
    } else {
        match check_dir(dir).and_then(|()| load_file(&path)) {
            Ok(inv) => {
                let boot = boot_id(root);
                if !inv.is_of(root, topology_root) {
                    Some("it was read under other roots".into())
                } else if inv.boot_id != boot {
                    Some(format!("another boot ({} -> {boot})", inv.boot_id))
                } else if let Some(changed) = inv.stamp.changed(&out.stamp) {
                    Some(format!("the stamp changed: {changed}"))
                } else {
                    out.inventory = Some(inv);
                    return out;
                }
            }
            Err(e) if e.is_missing() => None,
            Err(e) => Some(e.to_string()),
        }
    };
    match HostInventory::read(root, topology_root) {
        Ok(inv) if !keep => {
            let why = why.unwrap_or_else(|| "there is none".into());
            out.came = Came::NotKept(format!(
                "{why}; a look writes nothing (the hook writes it at its next start)"
            ));
            out.stamp = inv.stamp.clone();
            out.inventory = Some(inv);
        }
        Ok(inv) => {
            out.came = match save(dir, &path, &inv) {
                Ok(()) => Came::Written(why),
                Err(e) => Came::NotKept(match why {
                    Some(w) => format!("{w}; {e}"),
                    None => e.to_string(),
                }),
            };
            out.stamp = inv.stamp.clone();
            out.inventory = Some(inv);
        }
        Err(e) => out.came = Came::Fresh(e.to_string()),
    }
    out
}
