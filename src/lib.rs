//! `cpuplan-hook`: cpuplan in the container runtime.
//!
//! One pipeline serves every front end: [`read`] everything about a container once into
//! [`read::Inputs`], [`decide`] purely (no I/O) on a [`decide::Decision`], turn it into the
//! runtime-neutral [`edit::SpecEdit`], and let each front end apply it its own way: the OCI
//! [`hook`] to the live container, [`precreate`] into podman's config, [`explain`] to the terminal.

pub mod apply;
pub mod cli;
pub mod config;
pub mod decide;
pub mod edit;
pub mod elf;
pub mod explain;
pub mod hook;
pub mod install;
pub mod logging;
pub mod nri;
pub mod precreate;
pub mod privileges;
pub mod read;
pub mod render;
