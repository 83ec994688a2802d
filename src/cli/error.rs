//! Why a command failed, and the exit status each cause gives.

use crate::hook::HookError;

/// A failed command: a usage error or a bad input exits 2, a refused container 1.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The command line does not fit the command (the message may span lines: the usage follows).
    #[error("{0}")]
    Usage(String),
    /// A file or value given is unusable: the typed error names the source and the value.
    #[error(transparent)]
    Input(Box<dyn std::error::Error + Send + Sync>),
    /// The hook refused the container (`on_error: deny`, or a malformed state).
    #[error(transparent)]
    Hook(#[from] HookError),
    /// What the command was asked to do failed (not its input): exit 1.
    #[error("{0}")]
    Failed(String),
    /// Writing the output failed.
    #[error("cannot write the output: {0}")]
    Output(#[from] std::io::Error),
}

impl CliError {
    /// The process exit status for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) | CliError::Input(_) => 2,
            CliError::Hook(_) | CliError::Failed(_) | CliError::Output(_) => 1,
        }
    }

    /// A bad input: its typed error.
    pub fn input(e: impl std::error::Error + Send + Sync + 'static) -> CliError {
        CliError::Input(Box::new(e))
    }
}

impl From<super::UsageError> for CliError {
    fn from(e: super::UsageError) -> Self {
        CliError::Usage(e.0)
    }
}

macro_rules! input_errors {
    ($($t:ty),*) => {$(
        impl From<$t> for CliError {
            fn from(e: $t) -> Self {
                CliError::input(e)
            }
        }
    )*};
}

input_errors!(
    crate::config::ConfigError,
    crate::read::bundle::BundleError,
    cpuplan::Error,
    cpuplan::CpuPlanError,
    cpuplan::ClaimError,
    crate::install::InstallError
);
