//! `explain`: the plan the hook would make for a bundle on this host, with no pid, writing nothing.

use std::path::Path;

use cpuplan::{CpuPlan, CpuSet};

use crate::bundle::BundleConfig;
use crate::config::HookConfig;
use crate::hook::decide::{self, ClaimResult};
use crate::hook::inputs::{gather, Gathered};
use crate::hook::Problem;
use crate::output::HookPlan;

/// A plan made without a pid, and what was skipped.
pub struct Explained {
    /// The inputs.
    pub gathered: Gathered,
    /// The plan.
    pub plan: CpuPlan,
    /// The cpuset the hook would write, if any.
    pub cpuset: Option<CpuSet>,
    /// The plan as `plan.json` would hold it.
    pub file: HookPlan,
    /// What was skipped, for the reader.
    pub notes: Vec<String>,
}

/// The plan for the bundle at `bundle_dir` (its `config.json`) with `config`, with no pid: live cgroup and claims skipped.
pub fn explain(config: &HookConfig, bundle_dir: &Path) -> Result<Explained, Problem> {
    let bundle = BundleConfig::load(bundle_dir)?;
    explain_bundle(config, &bundle, "(explain)")
}

/// [`explain`] for an already loaded bundle config (also the `precreate` stage's planner).
pub fn explain_bundle(
    config: &HookConfig,
    bundle: &BundleConfig,
    container: &str,
) -> Result<Explained, Problem> {
    let g = gather(config, bundle, None, None)?;
    let (cpuset, cpuset_why) = decide::decide_cpuset(config, &g);
    let mask = cpuset.clone().unwrap_or_else(|| g.mask.clone());
    let plan = decide::plan(&g, &mask, &ClaimResult::Skipped)?;
    let file = decide::hook_plan(&g, &plan, container, cpuset.clone(), &cpuset_why);
    let mut notes = g.notes.clone();
    notes.push("no pid: GPU claims were not checked".into());
    notes.push(cpuset_why);
    Ok(Explained {
        gathered: g,
        plan,
        cpuset,
        file,
        notes,
    })
}
