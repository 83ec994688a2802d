//! Writing files whole below an open directory: all to temporary names, then renamed.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use nix::fcntl::renameat;

use super::open::open_or_make_below;
use super::temps::{remove_stale_temps, unlink, write_temp};
use super::RootfsError;

/// Writes each `(name, contents)` into `dir` below a rootfs already opened with [`open_rootfs`]
/// (first removing stale temporary files of a killed writer), all or nothing: every file is written whole under a temporary name first, and only then
/// renamed into place; on any failure no temporary file stays and no file of `files` is left
/// (one already renamed is removed, so no file pins CPUs the hook did not keep).
///
/// Returns whether the files are on the rootfs's own filesystem (not on a tmpfs or another
/// mount over the directory): there they outlive the container where the rootfs is a host
/// directory, and poststop has them to remove.
pub fn write_plan_files_in(
    root: &OwnedFd,
    dir: &Path,
    files: &[(&str, &[u8])],
) -> Result<bool, RootfsError> {
    let (dirfd, made) = open_or_make_below(root, Path::new("/"), dir)?;
    if !made {
        // A directory made just now holds no writer's leftovers: no listing.
        let names: Vec<&str> = files.iter().map(|(n, _)| *n).collect();
        remove_stale_temps(&dirfd, dir, &names);
    }
    write_files_at(&dirfd, dir, files)?;
    Ok(same_filesystem(root, &dirfd))
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

/// Writes an edit's `files` into `dir` below `root`, as [`write_plan_files_in`] does (and says).
pub fn write_placed_in(
    root: &OwnedFd,
    dir: &Path,
    files: &[crate::edit::PlacedFile],
) -> Result<bool, RootfsError> {
    let files: Vec<(&str, &[u8])> = files.iter().map(|f| (f.name, f.bytes.as_slice())).collect();
    write_plan_files_in(root, dir, &files)
}
