//! `cpuplan-hook`: cpuplan in the container runtime.
//!
//! One pipeline serves every front end: `read` everything about a container once into its
//! inputs, `decide` purely (no I/O), turn the decision into the runtime-neutral `edit`, and let
//! each front end apply it its own way (`apply` holds the steps they share): the OCI [`hook`] to
//! the live container, `precreate` into podman's config, `explain` to the terminal, [`nri`] as a
//! container adjustment; `cli` is the command line over them. `docs/design.md` draws the layers.
//!
//! The library is the binary's: its public surface is what the binary, the integration tests
//! and the fuzz targets use, and nothing else.

mod apply;
mod cli;
pub mod config;
mod decide;
mod edit;
pub mod elf;
mod explain;
#[doc(hidden)]
pub mod fuzzing;
pub mod hook;
pub mod install;
mod logging;
pub mod nri;
mod picture;
mod precreate;
pub mod privileges;
mod read;
mod render;

pub use cli::{main, main_with, panic_aborts, CliError, Exit, Program, HOOK, NRI, OPERATOR};
pub use logging::{escape, rfc3339};
pub use read::bundle::MAX_CONFIG;
