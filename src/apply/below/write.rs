//! Writing files whole below an open directory: all to temporary names, then renamed.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;

use nix::fcntl::renameat;

use super::open::open_or_make_below;
use super::temps::{remove_stale_temps, unlink, write_temp};
use super::RootfsError;

/// A plan directory opened below a rootfs already opened with [`open_rootfs`](super::open_rootfs),
/// made as needed, ready for the plan files.
#[derive(Debug)]
pub struct PlanDir {
    fd: OwnedFd,
    path: PathBuf,
    on_rootfs: bool,
}

impl PlanDir {
    /// Opens `dir` below `root` (each component without following a link, made 0755 where
    /// missing) and, where it was there already, removes the stale temporary files of a killed
    /// writer of `names`.
    pub fn open(root: &OwnedFd, dir: &Path, names: &[&str]) -> Result<PlanDir, RootfsError> {
        let (fd, made) = open_or_make_below(root, Path::new("/"), dir)?;
        if !made {
            // A directory made just now holds no writer's leftovers: no listing.
            remove_stale_temps(&fd, dir, names);
        }
        let on_rootfs = same_filesystem(root, &fd);
        Ok(PlanDir {
            fd,
            path: dir.to_path_buf(),
            on_rootfs,
        })
    }

    /// Whether it is on the rootfs's own filesystem (not on a tmpfs or another mount over the
    /// directory): files there outlive the container where the rootfs is a host directory, and
    /// another container on the same rootfs sees them.
    pub fn on_rootfs(&self) -> bool {
        self.on_rootfs
    }

    /// The directory's identity (device and inode), the same for every container that sees it.
    pub fn identity(&self) -> Result<(u64, u64), Errno> {
        let st = nix::sys::stat::fstat(self.fd.as_raw_fd())?;
        Ok((st.st_dev as u64, st.st_ino as u64))
    }

    /// Writes each `(name, contents)` into it, all or nothing ([`write_files_at`]).
    pub fn write(&self, files: &[(&str, &[u8])]) -> Result<(), RootfsError> {
        write_files_at(&self.fd, &self.path, files)
    }

    /// Writes an edit's `files` into it, as [`PlanDir::write`] does.
    pub fn write_placed(&self, files: &[crate::edit::PlacedFile]) -> Result<(), RootfsError> {
        let files: Vec<(&str, &[u8])> =
            files.iter().map(|f| (f.name, f.bytes.as_slice())).collect();
        self.write(&files)
    }
}

/// Writes each `(name, contents)` into `dir` below a rootfs already opened with [`open_rootfs`]
/// (first removing stale temporary files of a killed writer), all or nothing: every file is written whole under a temporary name first, and only then
/// renamed into place; on any failure no temporary file stays and no file of `files` is left
/// (one already renamed is removed, so no file pins CPUs the hook did not keep).
///
/// Returns whether the files are on the rootfs's own filesystem ([`PlanDir::on_rootfs`]).
#[cfg(test)]
pub fn write_plan_files_in(
    root: &OwnedFd,
    dir: &Path,
    files: &[(&str, &[u8])],
) -> Result<bool, RootfsError> {
    let names: Vec<&str> = files.iter().map(|(n, _)| *n).collect();
    let plan_dir = PlanDir::open(root, dir, &names)?;
    plan_dir.write(files)?;
    Ok(plan_dir.on_rootfs())
}

/// Whether `a` and `b` are on one filesystem (one `st_dev`); a failed `fstat` says yes, the
/// answer that keeps poststop's removal.
fn same_filesystem(a: &OwnedFd, b: &OwnedFd) -> bool {
    match (
        nix::sys::stat::fstat(a.as_raw_fd()),
        nix::sys::stat::fstat(b.as_raw_fd()),
    ) {
        (Ok(a), Ok(b)) => a.st_dev == b.st_dev,
        _ => true,
    }
}

/// Writes each `(name, contents)` whole into the open directory `dirfd` (at `dir`, which
/// messages name): all to temporary names first, then each renamed into place; on a failure
/// the temporaries and the files already renamed are removed.
pub fn write_files_at(
    dirfd: &OwnedFd,
    dir: &Path,
    files: &[(&str, &[u8])],
) -> Result<(), RootfsError> {
    let mut temps: Vec<(String, &str)> = Vec::with_capacity(files.len());
    for (name, contents) in files {
        match write_temp(dirfd, dir, name, contents) {
            Ok(tmp) => temps.push((tmp, name)),
            Err(e) => {
                for (tmp, _) in &temps {
                    unlink(dirfd, tmp);
                }
                return Err(e);
            }
        }
    }
    for (i, (tmp, name)) in temps.iter().enumerate() {
        let renamed = renameat(
            Some(dirfd.as_raw_fd()),
            tmp.as_str(),
            Some(dirfd.as_raw_fd()),
            *name,
        );
        if let Err(errno) = renamed {
            for (tmp, _) in &temps[i..] {
                unlink(dirfd, tmp);
            }
            for (_, done) in &temps[..i] {
                unlink(dirfd, done);
            }
            return Err(RootfsError::Path {
                path: dir.join(name),
                what: "cannot rename into place",
                errno,
            });
        }
    }
    Ok(())
}
