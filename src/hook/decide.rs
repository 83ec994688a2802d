//! From gathered inputs to a plan: the cpuset rule, GPU claims and `deployment_plan`.

use std::time::Duration;

use cpuplan::{ClaimOutcome, CpuPlan, CpuSet, Holder, PlanFile, Setting};

use crate::config::{CpusetRule, HookConfig};
use crate::hook::inputs::Gathered;
use crate::hook::numa::numa_cpuset;
use crate::hook::problem::Problem;
use crate::output::{HookPlan, Inputs};

/// The cpuset the container should get (if the rule narrows it), and why.
pub fn decide_cpuset(config: &HookConfig, g: &Gathered) -> (Option<CpuSet>, String) {
    match config.cpuset {
        CpusetRule::Keep => (None, "cpuset kept (cpuset: keep)".into()),
        CpusetRule::Numa => numa_cpuset(&g.gpus, g.topology.gpus(), &g.mask, g.usable),
    }
}

/// How the GPU claim went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimResult {
    /// Not attempted (no pid, not auto, or no GPU).
    Skipped,
    /// Held for this container.
    Claimed,
    /// A live container holds one of the GPUs: pin nothing.
    Held(String),
    /// The claims could not be taken (lock busy, unwritable dir): plan without one.
    Failed(String),
}

/// Claims the container's GPUs for `auto` plans of containers with a pid.
pub fn claim(config: &HookConfig, g: &Gathered, container: &str, pid: Option<u32>) -> ClaimResult {
    let Some(pid) = pid else {
        return ClaimResult::Skipped;
    };
    if g.setting != Setting::Auto || g.gpus.is_empty() {
        return ClaimResult::Skipped;
    }
    let start_time = match cpuplan::claims::process_start_time(&config.root, pid) {
        Ok(Some(t)) => t,
        Ok(None) => return ClaimResult::Failed(format!("pid {pid} is gone")),
        Err(e) => return ClaimResult::Failed(e.to_string()),
    };
    let holder = Holder {
        container: container.to_string(),
        pid,
        start_time,
    };
    match cpuplan::claim_gpus(
        &config.claims_dir,
        &config.root,
        &holder,
        &g.gpus,
        Duration::from_millis(config.claim_wait_ms),
    ) {
        Ok(ClaimOutcome::Claimed) => ClaimResult::Claimed,
        Ok(ClaimOutcome::Held { address, by }) => ClaimResult::Held(format!(
            "GPU {address} is held by live container {} (pid {})",
            by.container, by.pid
        )),
        Err(e) => ClaimResult::Failed(e.to_string()),
    }
}

/// The plan over `mask`, given how the claim went.
pub fn plan(g: &Gathered, mask: &CpuSet, claim: &ClaimResult) -> Result<CpuPlan, Problem> {
    let addresses = g.addresses();
    if let ClaimResult::Held(why) = claim {
        return Ok(CpuPlan::unpinned(
            mask.clone(),
            g.usable,
            addresses.len(),
            format!("step_thread_core auto pins nothing: {why}"),
        ));
    }
    let mut plan = cpuplan::deployment_plan_on(g.setting, &addresses, mask, g.usable, &g.topology)?;
    if let ClaimResult::Failed(why) = claim {
        plan.why = format!("{} (planned without a GPU claim: {why})", plan.why);
    }
    Ok(plan)
}

/// The `off` plan for a container that could not be planned, carrying the cause.
pub fn off_plan(mask: CpuSet, usable: usize, workers: usize, cause: &str) -> CpuPlan {
    CpuPlan::unpinned(
        mask,
        usable,
        workers,
        format!("step_thread_core off: {cause}"),
    )
}

/// The hook's `plan.json` for `plan`.
pub fn hook_plan(
    g: &Gathered,
    plan: &CpuPlan,
    container: &str,
    cpuset: Option<CpuSet>,
    cpuset_why: &str,
) -> HookPlan {
    let mut file = PlanFile::new(plan, &g.setting.to_string(), &g.addresses());
    if !cpuset_why.is_empty() {
        file.why = format!("{}; {cpuset_why}", file.why);
    }
    HookPlan {
        plan: file,
        container: container.to_string(),
        inputs: Inputs {
            quota: g.quota(),
            config_quota: g.config_quota,
            cgroup_quota: g.cgroup_quota,
            config_cpus: g.config_cpus.clone(),
            mask: g.mask.clone(),
            cpuset,
            gpus: g.gpus.clone(),
            setting_from: g.setting_from.clone(),
        },
    }
}
