//! A container's root as its init sees it: `<proc_root>/proc/<pid>/root`, entered only where
//! the pid lives in another mount namespace than this process. A pid in this process's own
//! namespace is no container's init (an exited container's pid reused by a host process), and
//! its `root` would be the host's. The one rule for the hook's plan writes
//! (`apply::below::open_rootfs`) and for reading a running container's plan
//! (`read::running`).

use std::os::fd::{AsRawFd, OwnedFd};

use super::own;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, readlinkat, OFlag};
use nix::sys::stat::Mode;

/// Why the pid's root cannot be entered.
#[derive(Debug, thiserror::Error)]
pub enum ProcRootError {
    /// `/proc/<pid>` or an entry of it cannot be opened or read (the pid is gone).
    #[error("pid {pid}: {}: {what}: {errno}", dir.display())]
    Process {
        /// The pid.
        pid: u32,
        /// Its `/proc` directory.
        dir: PathBuf,
        /// What was being opened.
        what: &'static str,
        /// The error.
        errno: Errno,
    },
    /// The pid shares this process's mount namespace: no container's init (an exited
    /// container's pid reused by a host process).
    #[error("pid {0} is in this process's own mount namespace: not a container's init (exited, and the pid reused?)")]
    SameNamespace(u32),
}

/// `<proc_root>/proc/<pid>/root`, opened `O_PATH`, for a pid of another mount namespace.
pub fn open_proc_root(proc_root: &Path, pid: u32) -> Result<OwnedFd, ProcRootError> {
    let dir_flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let dir = cpuplan::Process::Pid(pid).proc_dir(proc_root);
    let err = |what, errno| ProcRootError::Process {
        pid,
        dir: dir.clone(),
        what,
        errno,
    };
    let procfd =
        own(openat(None, &dir, dir_flags, Mode::empty()).map_err(|e| err("cannot open it", e))?);
    let theirs = readlinkat(Some(procfd.as_raw_fd()), "ns/mnt")
        .map_err(|e| err("cannot read its mount namespace", e))?;
    if cpuplan::own_mnt_ns(proc_root).as_deref() == Some(theirs.as_os_str()) {
        return Err(ProcRootError::SameNamespace(pid));
    }
    // The magic link `root` is followed on purpose: it is the way into the container's root.
    let root = openat(Some(procfd.as_raw_fd()), "root", dir_flags, Mode::empty())
        .map_err(|e| err("cannot open its root", e))?;
    Ok(own(root))
}
