//! The OCI hook: from a container's state and bundle to its cpuset and plan files.

pub mod cpuset;
pub mod decide;
pub mod inputs;
pub mod numa;
pub mod problem;
pub mod run;
pub mod topo;

pub use problem::Problem;
pub use run::{run_hook, HookError, Report, Stage};
