//! The shim's errors: each names the file or variable and quotes the value.
//!
//! Paths and texts from the container are displayed with their control characters escaped
//! ([`crate::text`]): a message is one line whatever the plan files hold.

use std::path::PathBuf;

use cpuplan::CpuSet;

use crate::text::Escaped;

/// Why a plan could not be loaded or a thread could not be moved.
#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    /// No plan was found where one was looked for; callers run unpinned.
    #[error("no plan: {}", Escaped(.0))]
    NoPlan(String),
    /// A plan file exists but could not be read.
    #[error("cannot read {}: {source}", Escaped(path.display()))]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A plan file that is not a plan's JSON.
    #[error("{}: not a cpuplan plan: {}", Escaped(path.display()), Escaped(source))]
    Json {
        /// The file.
        path: PathBuf,
        /// The JSON error, with its line and column.
        #[source]
        source: serde_json::Error,
    },
    /// A plan file of a layout version this shim does not read.
    #[error("{}: plan version {found}, this shim reads version {expected}", Escaped(path.display()))]
    Version {
        /// The file.
        path: PathBuf,
        /// The version in the file.
        found: u32,
        /// The version this shim reads.
        expected: u32,
    },
    /// A line of an env file that is not `KEY=value` in the accepted quoting.
    #[error("{}:{line}: {}: {content:?}", Escaped(path.display()), Escaped(what))]
    EnvLine {
        /// The file.
        path: PathBuf,
        /// The 1-based line number.
        line: usize,
        /// What is wrong.
        what: String,
        /// The offending line.
        content: String,
    },
    /// A `CPUPLAN_*` variable whose value does not parse.
    #[error(
        "{}: {}={value:?}: {}",
        Escaped(source_name),
        Escaped(name),
        Escaped(what)
    )]
    Var {
        /// Where the variables came from (a file, or "the environment").
        source_name: String,
        /// The variable.
        name: String,
        /// Its value.
        value: String,
        /// What was expected.
        what: String,
    },
    /// A variable from an env file that no environment can hold: a key that is not a name, or a NUL in the value.
    #[error("{}: {name:?}: {what}", Escaped(path.display()))]
    EnvVar {
        /// The file.
        path: PathBuf,
        /// The variable.
        name: String,
        /// What is wrong.
        what: &'static str,
    },
    /// Asked to pin to no CPU at all.
    #[error("cannot pin a thread to an empty cpu set")]
    EmptyCpus,
    /// Asked to pin to CPUs outside the process mask.
    #[error("cpus {cpus} are not all in the process mask {mask} (outside it: {outside})")]
    OutsideMask {
        /// The CPUs asked for.
        cpus: CpuSet,
        /// The process mask.
        mask: CpuSet,
        /// The CPUs asked for that the mask lacks.
        outside: CpuSet,
    },
    /// The kernel refused an affinity change.
    #[error("sched_setaffinity to cpus {cpus}: {source}")]
    SetAffinity {
        /// The CPUs asked for.
        cpus: CpuSet,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The kernel would not report the thread's affinity.
    #[error("sched_getaffinity: {0}")]
    GetAffinity(#[source] std::io::Error),
    /// The kernel kept only some of the CPUs asked for (they are outside the cgroup's cpuset).
    #[error("asked to run on cpus {asked}, the kernel allows only {got} of them")]
    Narrowed {
        /// The CPUs asked for.
        asked: CpuSet,
        /// The CPUs the thread got.
        got: CpuSet,
    },
}

/// Result with the shim's [`ShimError`].
pub type Result<T, E = ShimError> = std::result::Result<T, E>;

impl ShimError {
    /// The errno the C ABI returns (negated) for this error.
    pub fn errno(&self) -> i32 {
        use nix::libc;
        match self {
            ShimError::NoPlan(_) => libc::ENOENT,
            ShimError::Io { source, .. }
            | ShimError::SetAffinity { source, .. }
            | ShimError::GetAffinity(source) => source.raw_os_error().unwrap_or(libc::EIO),
            ShimError::Json { .. }
            | ShimError::Version { .. }
            | ShimError::EnvLine { .. }
            | ShimError::EnvVar { .. }
            | ShimError::Var { .. }
            | ShimError::EmptyCpus
            | ShimError::OutsideMask { .. }
            | ShimError::Narrowed { .. } => libc::EINVAL,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_text_in_a_message_stays_on_one_line() {
        let path = || PathBuf::from("/run/a\nforged: line");
        let errors = [
            ShimError::NoPlan("/x\ny does not exist".into()),
            ShimError::Io {
                path: path(),
                source: std::io::Error::from_raw_os_error(nix::libc::EACCES),
            },
            ShimError::Json {
                path: path(),
                source: serde_json::from_str::<u8>("\"x\"").unwrap_err(),
            },
            ShimError::Version {
                path: path(),
                found: 9,
                expected: 1,
            },
            ShimError::EnvLine {
                path: path(),
                line: 2,
                what: "w\nx".into(),
                content: "c\nd".into(),
            },
            ShimError::Var {
                source_name: "/s\nt".into(),
                name: "N\r".into(),
                value: "v\n".into(),
                what: "w\u{1b}[2K".into(),
            },
            ShimError::EnvVar {
                path: path(),
                name: "K\n".into(),
                what: "a NUL byte in the value",
            },
        ];
        for e in errors {
            let m = e.to_string();
            assert!(!m.chars().any(char::is_control), "{m:?}");
            assert!(m.contains("\\n") || m.contains("\\r"), "{m:?}");
        }
    }
}
