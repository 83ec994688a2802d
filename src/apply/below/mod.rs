//! Writing files below a directory without following any link out of it: inside a container's
//! rootfs (the hook), or below a host directory (the NRI plugin's plans).
//!
//! The container's mount namespace is entered through `/proc/<pid>/root` (so a tmpfs the
//! runtime mounted on `/run` holds the files), the rootfs is resolved with that as root
//! (`openat2(RESOLVE_IN_ROOT)`), and every component of the plan directory below it is
//! opened one at a time with `O_NOFOLLOW`: a symlink, FIFO or other non-directory planted
//! by the image is refused, never followed. Files are written to a fresh temporary name
//! (`O_CREAT|O_EXCL|O_NOFOLLOW`) and renamed over the final name, so a planted
//! `plan.env` symlink or FIFO is replaced, never opened. Temporary files of that naming left
//! by a hook killed mid-write (its pid gone) are removed by the next write; nothing else is.
//!
//! The parts: [`open`] (the rootfs and the directories below it, one component at a time),
//! [`temps`] (temporary names, and removing a killed writer's), [`write`] (all-or-nothing
//! writes), [`remove`] (a host-directory rootfs's plan files at poststop).

use std::path::PathBuf;

use nix::errno::Errno;

mod open;
mod remove;
mod temps;
mod write;

pub use open::{open_dir_below, open_dir_in, open_rootfs};
pub use remove::remove_plan_files_of;
pub use temps::remove_stale_temps_of;
pub use write::{write_files_at, PlanDir};

/// Why the plan files could not be written.
#[derive(Debug, thiserror::Error)]
pub enum RootfsError {
    /// The container's init is gone, or shares the hook's mount namespace (a reused pid).
    #[error("container {0}; writing nothing")]
    ProcRoot(#[from] ProcRootError),
    /// Writing a file's contents failed (a full or read-only filesystem).
    #[error("{}: cannot write: {source}", path.display())]
    Write {
        /// The file inside the container.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A path component could not be opened or created.
    #[error("{}: {what}: {errno}", path.display())]
    Path {
        /// The path inside the container.
        path: PathBuf,
        /// What went wrong.
        what: &'static str,
        /// The error.
        errno: Errno,
    },
}

use crate::read::own;
use crate::read::procroot::ProcRootError;

#[cfg(test)]
mod tests;
