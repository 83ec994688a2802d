//! What the hook writes into the container: `plan.env` and `plan.json`.

pub mod envfile;
pub mod planjson;
pub mod rootfs;

pub use envfile::{plan_env, plan_env_vars};
pub use planjson::{HookPlan, Inputs};
pub use rootfs::{open_rootfs, write_plan_files, write_plan_files_in, RootfsError};
