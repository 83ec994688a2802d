//! In-container shim: applies a cpuplan plan's thread pinning from Rust, C and Python.
//!
//! The hook writes the plan into the container (`/run/cpuplan/plan.json` and
//! `plan.env`). This crate reads it ([`Plan::load`], [`Plan::from_env`], [`Plan::find`]),
//! pins the calling thread to a worker's or the API server's CPUs ([`pin_worker`],
//! [`pin_result`], [`pin_thread`] in the warm-up order), starts threads on the process
//! mask ([`spawn`], [`Builder`], [`on_process_mask`]) and exports the same as a C ABI
//! (`include/cpuplan.h`). The `cpuplan-exec` launcher applies it to any program.
//!
//! The process mask is the installed plan's `mask` ([`install`]); with no plan
//! installed, the calling thread's affinity at this library's first use.

pub mod affinity;
pub mod error;
pub mod ffi;
pub mod launcher;
pub mod pin;
pub mod plan;
pub mod state;
pub mod text;
pub mod thread;
pub mod watch;

pub use affinity::{task_cpus, thread_affinity, thread_id};
pub use error::{Result, ShimError};
pub use pin::{pin_result, pin_result_with, pin_thread, pin_worker, pin_worker_with, Pinning};
pub use plan::{Plan, DEFAULT_PLAN, ENV_FILE, PLAN_VAR};
pub use state::{first_use_mask, install, installed, process_mask};
pub use thread::{on_process_mask, spawn, Builder};
pub use watch::{generation, refresh, refresh_from, watch};

/// The README's Rust example, run as a doctest.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
