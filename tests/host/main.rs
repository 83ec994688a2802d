//! The hook, its CLI and its pipeline against fake hosts (planted /proc, cgroupfs and sysfs
//! trees under temp dirs) and the source tree itself: no runtime, no container. `cargo test
//! --test host`.

// The harness (crates/test-support) under the name the modules use: `common::runc`, ...
extern crate cpuplan_test_support as common;

/// Fails this binary at exit when the host's real hook log changed while it ran
/// (`common::log_guard`): an ELF constructor, before `main` and any test thread.
#[used]
#[link_section = ".init_array"]
static LOG_GUARD: extern "C" fn() = common::log_guard::start;

mod bad_input;
mod broken_config;
mod cli;
mod faults;
mod fuzz_regressions;
mod grace_hook;
mod hook;
mod hook_log;
mod inventory;
mod layers;
mod nri_hostile_ids;
mod pipeline;
mod precreate;
mod privileges;
mod systemd_layouts;
mod vendors;
