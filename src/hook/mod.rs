//! The OCI hook front end: a decision applied to the live container (claim → cpuset → files).

mod run;

pub use run::{run_hook, HookError, Report};
