//! Errors from reading and parsing host files: each names the file and quotes the value.

use std::path::PathBuf;

use crate::cpuset::CpuListError;

/// A host file that could not be read or does not hold what it should.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read (other than being absent where absence is allowed).
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file was read but its content is not what the kernel writes there.
    #[error("{}: {what}: {}", path.display(), crate::quoted(.content))]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What was expected.
        what: String,
        /// The content (or the offending part of it), quoted in the message.
        content: String,
    },
    /// A cpu list in a file that does not parse.
    #[error("{}: {source}", path.display())]
    CpuList {
        /// The file.
        path: PathBuf,
        /// The parse error, which quotes the text.
        #[source]
        source: CpuListError,
    },
}

/// Result with the planner's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether this is a file (or PCI function) that is not there, as opposed to one that is unreadable or malformed.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }

    /// A [`Error::Malformed`] for `path`.
    pub fn malformed(
        path: impl Into<PathBuf>,
        what: impl Into<String>,
        content: impl Into<String>,
    ) -> Self {
        Error::Malformed {
            path: path.into(),
            what: what.into(),
            content: content.into(),
        }
    }
}
