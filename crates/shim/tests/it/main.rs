//! The shim's integration tests that share the process safely: the C ABI (and its panic guard
//! in a release build), `cpuplan-exec` in and out of a runc container, the examples and the
//! README's snippets. Each runs its subject in a process of its own. `cargo test -p
//! cpuplan-shim --test it`.
//!
//! tests/threads.rs and tests/watch.rs stay binaries of their own: they install plans into this
//! process (the shim's process-wide state), pin its threads and set `CPUPLAN_PLAN` in its
//! environment, which the other tests' threads and children would see.

#[path = "../common/mod.rs"]
mod common;

mod c_abi;
mod c_abi_panic;
mod e2e_runc;
mod example_threads;
mod exec;
mod readme;
