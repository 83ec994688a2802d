//! Decide: from [`Inputs`] and the hook config to a [`Decision`], with no file read or written.
//!
//! The cpuset rule picks the CPUs to narrow to, the planner plans over them, and a setting the
//! narrowed CPUs cannot honour is found here, before anything is written: the decision then
//! keeps the cpuset and plans over the whole mask, or, when that fails too, falls back to the
//! `off` plan carrying the cause, so the files say what is really in force.

pub mod course;
pub mod numa;
pub mod problem;
pub mod rank;
pub mod stale;
pub mod update;
pub mod verdict;

use cpuplan::{CpuPlan, CpuSet, Setting};

use crate::config::{CpusetRule, HookConfig};
use crate::read::gpus::Gpu;
use crate::read::Inputs;
pub use course::{Ask, Course};
pub use problem::{Problem, Why};
pub use update::Created;
pub use verdict::{verdict, Refusal};

/// What should be done to one container.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The cpuset to write (the container's narrowed CPUs), if any.
    pub cpuset: Option<CpuSet>,
    /// Why that cpuset, or why none.
    pub cpuset_why: String,
    /// The plan did not fit the GPUs' local CPUs, so the cpuset is kept and the plan is over the
    /// whole mask: a fallback (the NRI plugin's metrics count it).
    pub over_mask: bool,
    /// The plan, over the cpuset when there is one, else over the mask.
    pub plan: CpuPlan,
    /// The GPUs to claim before the plan holds (`auto` pins by GPU, so two containers on one
    /// GPU must not both pin): empty when nothing is to be claimed.
    pub claims: Vec<String>,
    /// What the reader of the plan should know.
    pub notes: Vec<String>,
    /// The planning problem the decision fell back to `off` for, if any.
    pub problem: Option<Problem>,
}

/// How claiming a decision's GPUs went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimResult {
    /// Nothing was claimed (nothing to claim, or no way to hold a claim here).
    Skipped,
    /// Every GPU is held for this container.
    Claimed,
    /// A live container holds one of the GPUs: pin nothing. The text reaches the container's
    /// plan, so it never names the holder (made by [`ClaimResult::held`]).
    Held(String),
    /// The claims could not be taken (lock busy, unwritable dir): plan without one.
    Failed(Problem),
}

impl ClaimResult {
    /// GPU `address` is held by another live container: the words the plan (which its own
    /// tenant reads) carries. The holder's id, pid and scope are the host log's alone.
    pub fn held(address: &str) -> ClaimResult {
        ClaimResult::Held(format!(
            "GPU {address} is held by another container: a second server on one GPU (a \
             time-sliced or MPS replica, another MIG instance or partition of it) shares it unpinned"
        ))
    }
}

/// The decision for `inputs` under `config`.
pub fn decide(inputs: &Inputs, config: &HookConfig) -> Decision {
    if let Some(p) = &inputs.problem {
        return Decision::off(inputs, Problem::Read(p.clone()));
    }
    let addresses = inputs.addresses();
    let (narrowed, mut cpuset_why) = match config.cpuset {
        CpusetRule::Keep => (None, "cpuset kept (cpuset: keep)".to_string()),
        CpusetRule::Numa => numa::numa_cpuset(
            &inputs.gpus,
            &inputs.topology.gpus,
            &inputs.mask,
            inputs.usable,
        ),
    };
    let over = |mask: &CpuSet| {
        cpuplan::deployment_plan_on(
            inputs.setting,
            &addresses,
            mask,
            inputs.usable,
            &inputs.topology,
        )
    };
    let mut over_mask = false;
    let (cpuset, plan) = match narrowed {
        Some(narrowed) => match over(&narrowed) {
            Ok(plan) => (Some(narrowed), plan),
            Err(e) => match over(&inputs.mask) {
                Ok(plan) => {
                    cpuset_why = format!(
                        "cpuset kept: on the GPUs' local CPUs {narrowed}, {e}; planned over the mask {}",
                        inputs.mask
                    );
                    over_mask = true;
                    (None, plan)
                }
                Err(e) => return Decision::off(inputs, e.into()),
            },
        },
        None => match over(&inputs.mask) {
            Ok(plan) => (None, plan),
            Err(e) => return Decision::off(inputs, e.into()),
        },
    };
    let mut plan = plan.with_split(inputs.split);
    let mut notes = inputs.notes.clone();
    let mut claims = Vec::new();
    if inputs.setting == Setting::Auto {
        let (trusted, untrusted): (Vec<&Gpu>, Vec<&Gpu>) = inputs
            .gpus
            .iter()
            .partition(|g| g.sources.iter().any(|s| config.gpu_sources.contains(s)));
        claims = trusted.iter().map(|g| g.address.clone()).collect();
        if !untrusted.is_empty() {
            let why = untrusted_why(&untrusted);
            plan.why = format!("{}; {why}", plan.why);
            notes.push(why);
        }
    }
    notes.push(cpuset_why.clone());
    Decision {
        cpuset,
        cpuset_why,
        over_mask,
        plan,
        claims,
        notes,
        problem: None,
    }
}

/// Why `gpus` are planned for but not claimed: what named them is not among `gpu_sources`.
fn untrusted_why(gpus: &[&Gpu]) -> String {
    let list: Vec<String> = gpus
        .iter()
        .map(|g| {
            let by: Vec<String> = g.sources.iter().map(ToString::to_string).collect();
            format!("{} (named by {})", g.address, by.join(", "))
        })
        .collect();
    format!(
        "not claimed, as no source gpu_sources trusts names them: {}",
        list.join(", ")
    )
}

impl Decision {
    /// The verdict on this decision's planning problem under `on_error`: `Ok` without one.
    pub fn verdict(&self, on_error: crate::config::OnError) -> Result<(), Refusal> {
        match &self.problem {
            Some(p) => verdict(on_error, p),
            None => Ok(()),
        }
    }

    /// One line for the log: the container, what was read and what was decided.
    pub fn summary(&self, inputs: &Inputs) -> String {
        let gpus: Vec<&str> = inputs.gpus.iter().map(|g| g.address.as_str()).collect();
        let quota = inputs
            .quota()
            .map_or_else(|| "none".to_string(), |q| q.to_string());
        let pid = inputs
            .container
            .pid
            .map_or_else(|| "none".to_string(), |p| p.to_string());
        format!(
            "container {}: pid {pid} gpus [{}] mask {} usable {} quota {quota} setting {} ({}): {}; {}",
            inputs.container.id,
            gpus.join(","),
            self.plan.mask,
            self.plan.usable,
            self.plan.setting,
            self.setting_from(inputs),
            self.plan.why,
            self.cpuset_why
        )
    }

    /// Where the plan's setting came from: the input that gave it, or, after a planning problem
    /// (which may come before any input gave one), the problem.
    pub fn setting_from(&self, inputs: &Inputs) -> String {
        if self.problem.is_some() {
            "off after a planning problem".into()
        } else {
            inputs.setting_from.clone()
        }
    }

    /// The `off` plan over the container's mask, carrying `cause`: nothing narrowed, claimed or pinned.
    pub fn off(inputs: &Inputs, cause: Problem) -> Decision {
        let mut notes = inputs.notes.clone();
        notes.push(format!("planning problem: {cause}"));
        Decision {
            cpuset: None,
            cpuset_why: "cpuset kept: planning problem".into(),
            over_mask: false,
            plan: CpuPlan::unpinned(
                Setting::Off,
                inputs.mask.clone(),
                inputs.usable,
                inputs.addresses(),
                format!("step_thread_core off: {cause}"),
            )
            .with_split(inputs.split),
            claims: Vec::new(),
            notes,
            problem: Some(cause),
        }
    }

    /// This decision once claiming its GPUs went as `claim` says: held by another container
    /// pins nothing; a failed claim plans without one, and says so.
    pub fn after_claim(mut self, claim: &ClaimResult) -> Decision {
        match claim {
            ClaimResult::Skipped | ClaimResult::Claimed => {}
            ClaimResult::Held(why) => {
                self.plan = self
                    .plan
                    .unpin(format!("step_thread_core auto pins nothing: {why}"));
            }
            ClaimResult::Failed(why) => {
                self.plan.why = format!("{} (planned without a GPU claim: {why})", self.plan.why);
            }
        }
        self
    }

    /// The decision for `inputs` with the cpuset kept as it is, for the reason `why` (a cpuset
    /// that could not be written); [`Course::keep_cpuset`] is how a front end gets there.
    pub fn keeping_cpuset(inputs: &Inputs, config: &HookConfig, why: String) -> Decision {
        let keep = HookConfig {
            cpuset: CpusetRule::Keep,
            ..config.clone()
        };
        let mut d = decide(inputs, &keep);
        if d.problem.is_none() {
            d.notes.pop();
            d.notes.push(why.clone());
            d.cpuset_why = why;
        }
        d
    }
}

#[cfg(test)]
mod tests;
