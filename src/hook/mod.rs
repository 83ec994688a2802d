//! The OCI hook front end: a decision applied to the live container (claim → cpuset → files).

pub mod claim;
pub mod cpuset;
pub mod identity;
pub mod rootfs;
pub mod run;

pub use run::{run_hook, HookError, Report, Stage};
