//! The workspace's test harness, one crate shared by every package's integration tests (a
//! dev-dependency only): the fake host the hook runs against, the real runtimes (runc, podman,
//! containerd's `ctr`), a private containerd node driven through CRI (with NRI on), the
//! Helm chart as Helm renders it, and the guards the suite keeps (the host lock, the real
//! hook log). docs/testing.md maps which test uses what.
//!
//! The modules that drive the hook as a library need the `hook` feature (the root package's
//! tests turn it on).

pub mod as_user;
pub mod cgroups;
pub mod containerd;
pub mod cri;
pub mod cri_hook;
#[cfg(feature = "hook")]
pub mod fakehost;
pub mod gpu_paths;
pub mod helm;
pub mod hookbin;
pub mod hostlock;
pub mod log_guard;
pub mod nri_node;
#[cfg(feature = "hook")]
pub mod nriplugin;
pub mod operator_dir;
#[cfg(feature = "hook")]
pub mod pipeline_cases;
pub mod podman;
pub mod procs;
pub mod runc;
pub mod statics;
