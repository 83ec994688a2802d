//! `plan.json` as cpuplan writes it: the planner's JSON plus the container and the inputs used.

use cpuplan::{CpuSet, PlanFile};
use serde::Serialize;

use crate::decide::Decision;
use crate::read::Inputs;

/// The inputs a plan was made from, recorded beside it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct InputsRecord {
    /// The tightest quota, in CPUs (spec and live cgroup).
    pub quota: Option<f64>,
    /// The quota in the spec.
    pub config_quota: Option<f64>,
    /// The quota of the live cgroup and its ancestors.
    pub cgroup_quota: Option<f64>,
    /// `linux.resources.cpu.cpus` of the spec.
    pub config_cpus: Option<CpuSet>,
    /// The container's mask before the cpuset rule.
    pub mask: CpuSet,
    /// The cpuset written, if any.
    pub cpuset: Option<CpuSet>,
    /// The container's GPUs, in worker order.
    pub gpus: Vec<String>,
    /// Where the setting came from (annotation, env, config).
    pub setting_from: String,
    /// What the GPU read left out or placed on a GPU's parent, and why (an id of
    /// `NVIDIA_VISIBLE_DEVICES` or of a volume-mount that names no GPU, a MIG instance, an AMD
    /// partition); omitted when there is nothing to say.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu_notes: Vec<String>,
}

/// The `plan.json` document.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PlanDoc {
    /// The planner's JSON.
    #[serde(flatten)]
    pub plan: PlanFile,
    /// The container id.
    pub container: String,
    /// The files' generation (`cpuplan::planenv::GENERATION_JSON`): 1 when first written, one
    /// more at each rewrite (the NRI plugin's UpdateContainer).
    pub generation: u64,
    /// The inputs used.
    pub inputs: InputsRecord,
}

impl PlanDoc {
    /// The document for `decision` on `inputs`.
    pub fn new(inputs: &Inputs, decision: &Decision) -> PlanDoc {
        let mut plan = PlanFile::new(&decision.plan);
        if !decision.cpuset_why.is_empty() {
            plan.why = format!("{}; {}", plan.why, decision.cpuset_why);
        }
        PlanDoc {
            plan,
            container: inputs.container.id.clone(),
            generation: 1,
            inputs: InputsRecord {
                quota: inputs.quota(),
                config_quota: inputs.spec.quota,
                cgroup_quota: inputs.cgroup_quota,
                config_cpus: inputs.spec.cpus.clone(),
                mask: inputs.mask.clone(),
                cpuset: decision.cpuset.clone(),
                gpus: inputs.gpus.iter().map(|g| g.address.clone()).collect(),
                setting_from: decision.setting_from(inputs),
                gpu_notes: inputs.gpu_notes.clone(),
            },
        }
    }

    /// The document as the file holds it: pretty JSON and a newline.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut json = serde_json::to_vec_pretty(self).unwrap_or_default();
        json.push(b'\n');
        json
    }
}
