//! The stub crate's integration tests, one binary: its plugins against a real containerd
//! (`containerd`, the workspace's CRI node of crates/test-support) and a plugin process killed
//! (`killed`, which runs this binary again as the plugin). As root. `cargo test -p nri-plugin
//! --test it`; `containerd::` alone for the containerd tests.

// The harness (crates/test-support) under the name the modules use.
extern crate cpuplan_test_support as common;

mod containerd;
mod killed;
