//! Errors from finding a container's GPUs: each names its source and quotes the value.

use std::path::PathBuf;

use crate::error::Error;
use crate::quote::quoted;

/// A host file, a `linux.devices` entry or `NVIDIA_VISIBLE_DEVICES` that does not name GPUs as it should.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// A host file or directory that could not be read, or whose content is not what the driver or
    /// kernel writes there (the planner's error, which names the file and quotes the content).
    #[error(transparent)]
    Host(#[from] Error),
    /// An entry of `NVIDIA_VISIBLE_DEVICES` that is no GPU id at all (the strict parser's,
    /// [`super::nvidia::parse_visible_devices`]; the inventory makes it a note on the entry).
    #[error("NVIDIA_VISIBLE_DEVICES={}: {} is not a GPU index, GPU-/MIG- uuid, PCI bus id or <gpu>:<mig>", quoted(.value), quoted(.entry))]
    VisibleJunk {
        /// The whole variable.
        value: String,
        /// The entry.
        entry: String,
    },
    /// A `linux.devices` char device that should name a GPU but names none.
    #[error("linux.devices char device {major}:{minor}: {why}")]
    Device {
        /// Its major number.
        major: i64,
        /// Its minor number.
        minor: i64,
        /// What is wrong with it.
        why: String,
    },
}

impl DeviceError {
    /// A [`DeviceError::Host`] I/O error for `path`.
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| DeviceError::Host(Error::Io { path, source })
    }

    /// A [`DeviceError::Host`] for a file at `path` whose content is not `what` it should be.
    pub(crate) fn malformed(
        path: impl Into<PathBuf>,
        what: impl Into<String>,
        content: impl Into<String>,
    ) -> Self {
        DeviceError::Host(Error::malformed(path, what, content))
    }
}
