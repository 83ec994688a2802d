//! Why a container is not planned: the typed [`Problem`] a decision falls back to `off` for (or,
//! under `on_error: deny`, is refused for). It stays typed from where it arises to the edge
//! that renders it (the log line, `plan.json`'s field, `explain`'s output, the refusal), and
//! its [`Problem::cause`] is a short, stable name per kind, for counting problems by cause.

use std::sync::Arc;

use crate::config::ConfigError;
use crate::read::ReadError;

/// An error of a layer above decide (the spec's reader, the id check, the cpuset or file
/// writes), kept whole: decide names no higher layer's type.
pub type Source = Arc<dyn std::error::Error + Send + Sync>;

/// Why a container is not planned. Its text is the wrapped error's own, unchanged.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Problem {
    /// The hook config is unusable.
    #[error(transparent)]
    Config(Arc<ConfigError>),
    /// What was read of the container or the host is unusable.
    #[error(transparent)]
    Read(Arc<ReadError>),
    /// The planner cannot honour the setting on the container's CPUs.
    #[error(transparent)]
    Plan(Arc<cpuplan::CpuPlanError>),
    /// The container's spec as the runtime gave it cannot be read or edited (a bundle, NRI's
    /// container message, podman's config on stdin).
    #[error(transparent)]
    Spec(Source),
    /// A container id that no path may be built from.
    #[error(transparent)]
    Id(Source),
    /// The container's rootfs cannot be opened safely.
    #[error(transparent)]
    Rootfs(Source),
    /// The pid is not the container's (another mount namespace, another cgroup).
    #[error(transparent)]
    Identity(Source),
    /// The plan directory is held by another live container.
    #[error("{0}")]
    PlanDirHeld(String),
    /// The GPU claims could not be taken.
    #[error(transparent)]
    Claim(Source),
    /// The cpuset could not be written.
    #[error(transparent)]
    Cpuset(Source),
    /// The plan files (or the plugin's record of them) could not be written.
    #[error(transparent)]
    Files(Source),
    /// The stage itself failed (a panic).
    #[error("{0}")]
    Internal(String),
}

/// A reason in words only, where no error is wrapped (a pid gone, a lock's wait cut short).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Why(pub String);

/// Every cause [`Problem::cause`] names: a bounded set, the metrics' label values.
pub const CAUSES: [&str; 15] = [
    "config",
    "read",
    "devices",
    "setting",
    "empty_mask",
    "plan",
    "spec",
    "id",
    "rootfs",
    "identity",
    "plan_dir_held",
    "claim",
    "cpuset",
    "files",
    "internal",
];

impl Problem {
    /// The problem's kind, one of [`CAUSES`] (a metric's label): a read's problem is named by
    /// what failed (`config`, `setting`, `devices`, `empty_mask`, else `read`).
    pub fn cause(&self) -> &'static str {
        match self {
            Problem::Config(_) => "config",
            Problem::Read(e) => match e.as_ref() {
                ReadError::Config(_) => "config",
                ReadError::Host(_) => "read",
                ReadError::Devices(_) => "devices",
                ReadError::Setting { .. } | ReadError::PoolSplit { .. } => "setting",
                ReadError::EmptyMask => "empty_mask",
            },
            Problem::Plan(_) => "plan",
            Problem::Spec(_) => "spec",
            Problem::Id(_) => "id",
            Problem::Rootfs(_) => "rootfs",
            Problem::Identity(_) => "identity",
            Problem::PlanDirHeld(_) => "plan_dir_held",
            Problem::Claim(_) => "claim",
            Problem::Cpuset(_) => "cpuset",
            Problem::Files(_) => "files",
            Problem::Internal(_) => "internal",
        }
    }

    /// The spec `e` cannot be read or edited.
    pub fn spec(e: impl std::error::Error + Send + Sync + 'static) -> Problem {
        Problem::Spec(Arc::new(e))
    }

    /// The id `e` names cannot be used.
    pub fn id(e: impl std::error::Error + Send + Sync + 'static) -> Problem {
        Problem::Id(Arc::new(e))
    }

    /// The rootfs cannot be opened: `e`.
    pub fn rootfs(e: impl std::error::Error + Send + Sync + 'static) -> Problem {
        Problem::Rootfs(Arc::new(e))
    }

    /// The pid is not the container's: `e`.
    pub fn identity(e: impl std::error::Error + Send + Sync + 'static) -> Problem {
        Problem::Identity(Arc::new(e))
    }

    /// The claims could not be taken: `e`.
    pub fn claim(e: impl std::error::Error + Send + Sync + 'static) -> Problem {
        Problem::Claim(Arc::new(e))
    }

    /// The cpuset could not be written: `e`.
    pub fn cpuset(e: impl std::error::Error + Send + Sync + 'static) -> Problem {
        Problem::Cpuset(Arc::new(e))
    }

    /// The plan files could not be written: `e`.
    pub fn files(e: impl std::error::Error + Send + Sync + 'static) -> Problem {
        Problem::Files(Arc::new(e))
    }
}

impl From<ReadError> for Problem {
    fn from(e: ReadError) -> Problem {
        Problem::Read(Arc::new(e))
    }
}

impl From<ConfigError> for Problem {
    fn from(e: ConfigError) -> Problem {
        Problem::Config(Arc::new(e))
    }
}

impl From<cpuplan::CpuPlanError> for Problem {
    fn from(e: cpuplan::CpuPlanError) -> Problem {
        Problem::Plan(Arc::new(e))
    }
}

/// Two problems are the same where their kind and their text are.
impl PartialEq for Problem {
    fn eq(&self, other: &Problem) -> bool {
        self.cause() == other.cause() && self.to_string() == other.to_string()
    }
}

impl Eq for Problem {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_is_the_wrapped_error_s_and_the_cause_is_bounded() {
        let p = Problem::from(ReadError::EmptyMask);
        assert_eq!(p.to_string(), ReadError::EmptyMask.to_string());
        assert_eq!(p.cause(), "empty_mask");
        let p = Problem::files(Why("EROFS".into()));
        assert_eq!((p.to_string().as_str(), p.cause()), ("EROFS", "files"));
        for p in [
            p,
            Problem::claim(Why("busy".into())),
            Problem::PlanDirHeld("x".into()),
            Problem::Internal("panic".into()),
            Problem::from(ReadError::Setting {
                origin: "env".into(),
                value: "x".into(),
            }),
        ] {
            assert!(CAUSES.contains(&p.cause()), "{}", p.cause());
        }
    }

    #[test]
    fn a_wrapped_error_stays_reachable_as_the_source() {
        let io = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "EACCES");
        let p = Problem::files(cpuplan::Error::Io {
            path: "/x".into(),
            source: io,
        });
        assert_eq!(p.to_string(), "cannot read /x: EACCES");
        let source = std::error::Error::source(&p).expect("the io error");
        assert_eq!(source.to_string(), "EACCES");
    }
}
