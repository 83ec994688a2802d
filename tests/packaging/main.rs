//! What ships: the Debian package (installed and purged under the host lock), the tarball,
//! the Kubernetes manifests as kustomize renders them, and the Python wheel's own pytest suite.
//! As root. `cargo test --test packaging`.

// The harness (crates/test-support) under the name the modules use: `common::runc`, ...
extern crate cpuplan_test_support as common;

/// Fails this binary at exit when the host's real hook log changed while it ran
/// (`common::log_guard`): an ELF constructor, before `main` and any test thread.
#[used]
#[link_section = ".init_array"]
static LOG_GUARD: extern "C" fn() = common::log_guard::start;

mod deb;
mod dist;
mod kubernetes;
mod python_wheel;
