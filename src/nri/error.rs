//! The NRI plugin's errors.

/// Why the NRI plugin could not start or go on.
#[derive(Debug, thiserror::Error)]
pub enum NriError {
    /// The command line of `cpuplan-nri` is wrong.
    #[error("{0}")]
    Usage(String),
    /// The plan directory's instance lock (another plugin serves it, or it cannot be taken).
    #[error("{}: {what}", path.display())]
    Instance {
        /// The lock file.
        path: std::path::PathBuf,
        /// What went wrong.
        what: String,
    },
    /// The runtime's plugin configuration is unusable (it names the key).
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The stub could not connect, register or go on.
    #[error(transparent)]
    Stub(#[from] nri_plugin::Error),
}
