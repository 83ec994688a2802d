//! The CPUs a GPU container may use, and the plan every thread of its workload follows.
//!
//! CPU lists, the cgroup CPU quota, the process mask, SMT siblings, the host's GPUs and
//! their NUMA CPUs from sysfs, GPU claims that outlive the claiming process, and
//! [`deployment_plan`] with its `off` / CPU number / `auto` settings and the pool sizes
//! derived from it; [`PlanFile`] and [`planenv`] are the plan's two file forms.
//!
//! Every host file is read under a root directory (`/` on a real host), so tests
//! point the planner at a fixture tree.

mod cgroup;
mod cgroup_path;
mod claims;
mod cpu_node;
mod cpuset;
pub mod dirents;
mod error;
mod fsutil;
pub mod gpu;
mod gpus;
pub mod inventory;
mod json;
mod mask;
mod mntns;
mod mountinfo;
mod pci;
mod pidns;
mod plan;
pub mod planenv;
mod proc_cgroup;
mod proc_stat;
mod quota;
mod quote;
mod smt;
mod topology;

#[cfg(feature = "fuzzing")]
pub mod fuzzing;

pub use cgroup::{CgroupDir, CgroupMounts, CgroupVersion, Cgroups};
pub use cgroup_path::{cgroups_path_names, expand_slice, lexical_components};
pub use claims::{
    claim_gpus, list_claims, lock_exclusive, release, Claim, ClaimError, ClaimOutcome, Holder,
};
pub use cpu_node::CpuNode;
pub use cpuset::{format_cpu_list, parse_cpu_list, CpuSet, MAX_CPU};
pub use error::{Error, Result};
pub use fsutil::{open, read_file, read_opened, require_own_file, require_regular, Process};
pub use gpu::nvidia::nvidia_host_gpus;
pub use gpus::{host_gpus, host_gpus_in, HostGpu};
pub use json::{PlanFile, PLAN_VERSION};
pub use mask::{process_mask, usable_cpus};
pub use mntns::own_mnt_ns;
pub use mountinfo::{mounts_of_device, MountInfo};
pub use pci::PciAddress;
pub use pidns::own_pid_ns;
pub use plan::{
    deployment_plan, deployment_plan_on, CpuPlan, CpuPlanError, PoolSplit, PoolSplitError, Role,
    Setting, Shares, StepCpus,
};
pub use quota::{cgroup_cpu_quota, v2_quota_under};
pub use quote::{quoted, Quoted, QUOTE_MAX};
pub use smt::smt_siblings;
pub use topology::{
    numa_nodes, online_cpus, StaticTopology, SysfsTopology, Topology, TopologyCache,
};
