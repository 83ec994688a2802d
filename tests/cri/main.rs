//! Kubernetes nodes without kubelet: private containerd 1.7 and 2.x nodes driven through CRI
//! (`common::cri`), with the OCI hook registered (`cri_*`), the NRI plugin (`nri_*`) or the
//! DaemonSet's own command line (`daemonset`). As root. `cargo test --test cri`.

// The harness (crates/test-support) under the name the modules use: `common::runc`, ...
extern crate cpuplan_test_support as common;

/// Fails this binary at exit when the host's real hook log changed while it ran
/// (`common::log_guard`): an ELF constructor, before `main` and any test thread.
#[used]
#[link_section = ".init_array"]
static LOG_GUARD: extern "C" fn() = common::log_guard::start;

pub(crate) use common::on_both;

mod cri_dev;
mod cri_gpu;
mod cri_node;
mod daemonset;
mod nri_gpu;
mod nri_listener;
mod nri_metrics;
mod nri_node;
mod nri_order;
mod nri_protocol;
mod nri_ranks;
mod nri_trust;
mod nri_update;
