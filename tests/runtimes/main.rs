//! End to end with the real runtimes on this host: runc containers with the hook registered,
//! podman (private stores, the host lock of `common::hostlock`), containerd through `ctr`, and
//! `install` registering the hook with each. As root. `cargo test --test runtimes`.

// The harness (crates/test-support) under the name the modules use: `common::runc`, ...
extern crate cpuplan_test_support as common;

/// Fails this binary at exit when the host's real hook log changed while it ran
/// (`common::log_guard`): an ELF constructor, before `main` and any test thread.
#[used]
#[link_section = ".init_array"]
static LOG_GUARD: extern "C" fn() = common::log_guard::start;

mod e2e_containerd;
mod e2e_hostile;
mod e2e_podman;
mod e2e_pools;
mod e2e_rootfs;
mod e2e_runc;
mod e2e_trust;
mod install;
mod isolation;
mod load;
