//! At poststop, the plan files a host-directory rootfs holds, removed when they are its container's.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;
use nix::unistd::{unlinkat, UnlinkatFlags};

use super::open::{open_rootfs, walk_dirs};
use super::{own, RootfsError};

/// The most bytes of a plan.json read at poststop to see whose it is.
pub(super) const MAX_OWNER_FILE: u64 = 1 << 20;

/// The `container` that the JSON file `name` in `dirfd` names (a regular file, read without
/// following a link or blocking on a FIFO, at most [`MAX_OWNER_FILE`] bytes); `None` otherwise.
pub(super) fn named_container(dirfd: &OwnedFd, name: &str) -> Option<String> {
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let fd = own(openat(Some(dirfd.as_raw_fd()), name, flags, Mode::empty()).ok()?);
    let st = nix::sys::stat::fstat(fd.as_raw_fd()).ok()?;
    if st.st_mode & nix::libc::S_IFMT != nix::libc::S_IFREG {
        return None;
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(std::fs::File::from(fd), MAX_OWNER_FILE),
        &mut bytes,
    )
    .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    v.get("container")?.as_str().map(str::to_string)
}

/// At poststop, from a rootfs seen at its host path (the container is gone): removes the plan
/// files `names` from `dir` when `owner_file` (plan.json) names `container`, that is when the
/// createRuntime stage wrote them into the rootfs itself, a host directory (`podman --rootfs`,
/// or a bundle without a tmpfs on `/run`), where they would outlive the container and be read
/// by the next one. Never follows a link out of the rootfs, creates nothing, and removes no
/// file a plan of another container (or none) is in. Returns whether it removed them.
pub fn remove_plan_files_of(
    rootfs: &Path,
    dir: &Path,
    names: &[&str],
    owner_file: &str,
    container: &str,
) -> Result<bool, RootfsError> {
    let root = open_rootfs(Path::new("/"), None, rootfs)?;
    let Some(dirfd) = walk_dirs(&root, Path::new("/"), dir, false, &mut false)? else {
        return Ok(false);
    };
    if named_container(&dirfd, owner_file).as_deref() != Some(container) {
        return Ok(false);
    }
    for name in names {
        match unlinkat(Some(dirfd.as_raw_fd()), *name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(errno) => {
                return Err(RootfsError::Path {
                    path: dir.join(name),
                    what: "cannot remove",
                    errno,
                })
            }
        }
    }
    Ok(true)
}
