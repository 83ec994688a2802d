//! The CPUs a GPU container may use, and the plan every thread of its workload follows.
//!
//! A port of the seed's `mstar.utils.cpus` to Rust: CPU lists, the cgroup CPU quota,
//! the process mask, SMT siblings, the host's GPUs and their NUMA CPUs from sysfs,
//! GPU claims that outlive the claiming process, and [`deployment_plan`] with its
//! `off` / CPU number / `auto` settings and the pool sizes derived from it.
//!
//! Every host file is read under a root directory (`/` on a real host), so tests
//! point the planner at a fixture tree.

pub mod cgroup;
pub mod claims;
pub mod cpuset;
pub mod error;
pub mod fsutil;
pub mod gpus;
pub mod json;
pub mod mask;
pub mod mountinfo;
pub mod pci;
pub mod plan;
pub mod proc_cgroup;
pub mod quota;
pub mod smt;
pub mod topology;

pub use claims::{claim_gpus, list_claims, release, Claim, ClaimError, ClaimOutcome, Holder};
pub use cpuset::{format_cpu_list, parse_cpu_list, CpuListError, CpuSet, MAX_CPU};
pub use error::{Error, Result};
pub use fsutil::Process;
pub use gpus::{host_gpus, HostGpu};
pub use json::{PlanFile, PLAN_VERSION};
pub use mask::{process_mask, usable_cpus};
pub use plan::{deployment_plan, deployment_plan_on, CpuPlan, CpuPlanError, Setting, StepCpus};
pub use quota::cgroup_cpu_quota;
pub use smt::smt_siblings;
pub use topology::{StaticTopology, SysfsTopology, Topology};
