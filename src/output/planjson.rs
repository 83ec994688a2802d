//! `plan.json` as the hook writes it: the planner's JSON plus the container and the inputs used.

use cpuplan::{CpuSet, PlanFile};
use serde::Serialize;

/// The inputs a plan was made from, recorded beside it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Inputs {
    /// The tightest quota, in CPUs (config and live cgroup).
    pub quota: Option<f64>,
    /// The quota in the bundle config.
    pub config_quota: Option<f64>,
    /// The quota of the live cgroup and its ancestors.
    pub cgroup_quota: Option<f64>,
    /// `linux.resources.cpu.cpus` of the config.
    pub config_cpus: Option<CpuSet>,
    /// The container's mask before the cpuset rule.
    pub mask: CpuSet,
    /// The cpuset written, if any.
    pub cpuset: Option<CpuSet>,
    /// The container's GPUs, in worker order.
    pub gpus: Vec<String>,
    /// Where the setting came from (annotation, env, config).
    pub setting_from: String,
}

/// The hook's `plan.json`.
#[derive(Debug, Clone, Serialize)]
pub struct HookPlan {
    /// The planner's JSON.
    #[serde(flatten)]
    pub plan: PlanFile,
    /// The container id.
    pub container: String,
    /// The inputs used.
    pub inputs: Inputs,
}
