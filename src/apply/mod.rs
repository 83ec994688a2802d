//! Apply: what a decision asks, done to the host and the container, safely and in one order.
//!
//! The front ends that change a live system share these steps: claiming the decision's GPUs
//! ([`claim`]), checking that a pid is the container's before writing for it ([`identity`]),
//! narrowing its own cgroup's cpuset ([`cpuset`]), and under the systemd driver its unit's
//! `AllowedCPUs` too ([`unit`]), and writing files below a directory without
//! following a link and all or nothing ([`below`]), with a record for poststop where they sit in
//! the rootfs's own filesystem ([`hostplan`]). The OCI hook runs them in the order claim →
//! cpuset → files; the NRI plugin claims and writes its plan directory on the host.

pub mod below;
pub mod claim;
pub mod cpuset;
pub mod hostplan;
pub mod identity;
pub mod unit;
