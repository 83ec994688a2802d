//! The command line of `cpuplan-hook`.

pub mod args;
pub mod commands;
pub mod help;

pub use args::{Args, UsageError};
pub use commands::main_with;
