//! Opening the rootfs and the directories below it without following a link.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Component, Path};

use nix::errno::Errno;
use nix::fcntl::{openat, openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fchmod, mkdirat, Mode};

use super::{own, RootfsError};
use crate::read::procroot::open_proc_root;

/// Opens the container's rootfs: through `<proc_root>/proc/<pid>/root` when `pid` is given, else the host path.
pub fn open_rootfs(
    proc_root: &Path,
    pid: Option<u32>,
    rootfs: &Path,
) -> Result<OwnedFd, RootfsError> {
    let dir_flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let Some(pid) = pid else {
        let fd =
            openat(None, rootfs, dir_flags, Mode::empty()).map_err(|errno| RootfsError::Path {
                path: rootfs.to_path_buf(),
                what: "cannot open the rootfs",
                errno,
            })?;
        return Ok(own(fd));
    };
    let rootfd = open_proc_root(proc_root, pid)?;
    let rel = rootfs.strip_prefix("/").unwrap_or(rootfs);
    let how = OpenHow::new()
        .flags(dir_flags)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let fd = openat2(rootfd.as_raw_fd(), rel, how).map_err(|errno| RootfsError::Path {
        path: rootfs.to_path_buf(),
        what: "cannot open the rootfs in the container's mount namespace",
        errno,
    })?;
    Ok(own(fd))
}

/// Opens (creating, 0755) each component of `dir` below `root` without following links.
pub fn open_dir_in(root: &OwnedFd, dir: &Path) -> Result<OwnedFd, RootfsError> {
    open_dir_below(root, Path::new("/"), dir)
}

/// Opens directory `dir` below directory `parent` (at `parent_path`, which messages name),
/// as [`open_dir_in`] does below a root.
pub fn open_dir_below(
    parent: &OwnedFd,
    parent_path: &Path,
    dir: &Path,
) -> Result<OwnedFd, RootfsError> {
    open_or_make_below(parent, parent_path, dir).map(|(fd, _)| fd)
}

/// [`open_dir_below`], and whether `dir` itself was made by this call (so it is empty).
pub(super) fn open_or_make_below(
    parent: &OwnedFd,
    parent_path: &Path,
    dir: &Path,
) -> Result<(OwnedFd, bool), RootfsError> {
    let mut made = false;
    walk_dirs(parent, parent_path, dir, true, &mut made)?
        .map(|fd| (fd, made))
        .ok_or_else(|| RootfsError::Path {
            path: dir.to_path_buf(),
            what: "the plan directory cannot be the container's /",
            errno: Errno::EINVAL,
        })
}

/// Opens each component of `dir` below `root` (at `root_path`) with `O_NOFOLLOW`, creating a
/// missing one (0755) when `create`; `Ok(None)` when one is missing and not created, or `dir`
/// is `/`. `made` says whether the last component was made here (by this call's `mkdirat`).
pub(super) fn walk_dirs(
    root: &OwnedFd,
    root_path: &Path,
    dir: &Path,
    create: bool,
    made: &mut bool,
) -> Result<Option<OwnedFd>, RootfsError> {
    let mut cur: Option<OwnedFd> = None;
    let mut sofar = root_path.to_path_buf();
    let last = dir
        .components()
        .enumerate()
        .filter(|(_, c)| matches!(c, Component::Normal(_)))
        .map(|(i, _)| i)
        .last();
    for (i, comp) in dir.components().enumerate() {
        let name = match comp {
            Component::RootDir => continue,
            Component::Normal(n) => n,
            _ => {
                return Err(RootfsError::Path {
                    path: dir.to_path_buf(),
                    what: "the plan directory holds . or ..",
                    errno: Errno::EINVAL,
                })
            }
        };
        sofar.push(name);
        *made = false;
        let parent = cur.as_ref().unwrap_or(root).as_raw_fd();
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        // The plan directory itself is usually new (a container's fresh /run): made first,
        // then opened, without the open that would fail first. EEXIST (it is there, or a link
        // is: the open below refuses that) goes on to the open.
        let first = if create && Some(i) == last {
            match mkdirat(Some(parent), name, Mode::from_bits_truncate(0o755)) {
                Ok(()) => {
                    *made = true;
                    Err(Errno::ENOENT)
                }
                Err(Errno::EEXIST) => openat(Some(parent), name, flags, Mode::empty()),
                Err(errno) => {
                    return Err(RootfsError::Path {
                        path: sofar,
                        what: "cannot create directory",
                        errno,
                    })
                }
            }
        } else {
            openat(Some(parent), name, flags, Mode::empty())
        };
        let fd = match first {
            Ok(fd) => fd,
            Err(Errno::ENOENT) if !create => return Ok(None),
            Err(Errno::ENOENT) => {
                let made_now = *made
                    || match mkdirat(Some(parent), name, Mode::from_bits_truncate(0o755)) {
                        Ok(()) => true,
                        Err(Errno::EEXIST) => false,
                        Err(errno) => {
                            return Err(RootfsError::Path {
                                path: sofar,
                                what: "cannot create directory",
                                errno,
                            })
                        }
                    };
                *made = made_now;
                openat(Some(parent), name, flags, Mode::empty())
                    .map_err(|errno| path_err(parent, name, &sofar, errno))?
            }
            Err(errno) => return Err(path_err(parent, name, &sofar, errno)),
        };
        let fd = own(fd);
        if *made {
            // The mode asked for, whatever the process's umask (a runtime may run the hook
            // under a stricter one, which would hide the plan from the workload's user).
            fchmod(fd.as_raw_fd(), Mode::from_bits_truncate(0o755)).map_err(|errno| {
                RootfsError::Path {
                    path: sofar.clone(),
                    what: "cannot set the directory's mode",
                    errno,
                }
            })?;
        }
        cur = Some(fd);
    }
    Ok(cur)
}

pub(super) fn path_err(
    parent: RawFd,
    name: &std::ffi::OsStr,
    path: &Path,
    errno: Errno,
) -> RootfsError {
    let is_link =
        nix::sys::stat::fstatat(Some(parent), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
            .map(|st| st.st_mode & nix::libc::S_IFMT == nix::libc::S_IFLNK)
            .unwrap_or(false);
    let what = match errno {
        _ if is_link => "is a symlink: refusing to follow it",
        Errno::ELOOP => "is a symlink: refusing to follow it",
        Errno::ENOTDIR => "is not a directory",
        _ => "cannot open directory",
    };
    RootfsError::Path {
        path: path.to_path_buf(),
        what,
        errno,
    }
}
