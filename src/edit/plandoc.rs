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
    /// Each worker's CPUs (plan order) where the NRI plugin places the container's GPU worker
    /// processes at their exec: its GPU's local CPUs within the container's (`null`: that
    /// worker keeps the container's); absent where no process is placed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_placement: Option<Vec<Option<CpuSet>>>,
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
            worker_placement: None,
        }
    }

    /// The document as the file holds it: pretty JSON and a newline.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut json = serde_json::to_vec_pretty(self).unwrap_or_default();
        json.push(b'\n');
        json
    }
}

#[cfg(test)]
mod tests {
    use crate::edit::tests_support::edit;
    use crate::edit::PLAN_JSON;

    fn plan_json(e: &crate::edit::SpecEdit) -> serde_json::Value {
        let f = e.files.iter().find(|f| f.name == PLAN_JSON).unwrap();
        serde_json::from_slice(&f.bytes).unwrap()
    }

    #[test]
    fn worker_placement_is_a_member_of_plan_json_only_where_processes_are_placed() {
        let plain = edit();
        assert!(plan_json(&plain).get("worker_placement").is_none());
        let set = |l: &str| cpuplan::parse_cpu_list(l).unwrap();
        let placed = edit().with_worker_placement(Some(vec![Some(set("0-3")), None]));
        let v = plan_json(&placed);
        assert_eq!(v["worker_placement"], serde_json::json!(["0-3", null]));
        // The rest of the document is as it was: a new member, nothing else changed.
        let mut without = v.clone();
        without.as_object_mut().unwrap().remove("worker_placement");
        assert_eq!(without, plan_json(&plain));
        assert_eq!(
            placed.doc.worker_placement,
            Some(vec![Some(set("0-3")), None])
        );
    }
}
