//! The OCI hook front end: a decision applied to the live container (claim → cpuset → files).

mod run;

pub use run::{run_hook, HookError, Report, Stage};

/// The safe writes below a directory, where `src/nri/plandir.rs` still looks for them: they
/// are [`crate::apply::below`]'s (this shim goes once the NRI front end names that module).
pub mod rootfs {
    pub use crate::apply::below::{
        open_dir_below, open_dir_in, open_rootfs, remove_stale_temps_of, write_files_at,
        RootfsError,
    };
}
