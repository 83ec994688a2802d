//! An update of a planned container's CPUs (kubelet's CPU manager sets a new shared pool, an
//! in-place resize a new quota): the cpuset rule inside kubelet's set, and the claims as they
//! were taken at creation (they never change on an update).

use super::problem::{Problem, Why};
use super::{decide, ClaimResult, Decision};
use crate::config::HookConfig;
use crate::read::Inputs;

/// How claiming went when the container was created, as the NRI plugin's record keeps it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Created {
    /// The GPUs claimed for it (empty: none was taken).
    pub claims: Vec<String>,
    /// Why nothing was pinned: a GPU held by another container (the plan's words).
    pub held: Option<String>,
}

impl Created {
    /// What a creation's claim left: the GPUs `wanted` where they were claimed, the words of
    /// a GPU held elsewhere.
    pub fn of(claim: &ClaimResult, wanted: &[String]) -> Created {
        Created {
            claims: match claim {
                ClaimResult::Claimed => wanted.to_vec(),
                _ => Vec::new(),
            },
            held: match claim {
                ClaimResult::Held(why) => Some(why.clone()),
                _ => None,
            },
        }
    }

    /// How claiming went at creation, for an update's decision that `wanted` GPUs claimed: an
    /// update claims nothing.
    pub fn claim_at_update(&self, wanted: &[String]) -> ClaimResult {
        match (&self.held, self.claims.is_empty(), wanted.is_empty()) {
            (Some(why), _, _) => ClaimResult::Held(why.clone()),
            (None, false, _) => ClaimResult::Claimed,
            (None, true, false) => ClaimResult::Failed(Problem::claim(Why(
                "no claim was taken at creation, and claims do not change on an update".into(),
            ))),
            (None, true, true) => ClaimResult::Skipped,
        }
    }
}

/// The decision for an update whose spec is kubelet's new CPUs (its set, its quota): a set no
/// larger than the quota's usable CPUs (floor(quota), at least 1) is exclusive and stays as
/// kubelet gives it; any other set is narrowed by the cpuset rule as at creation.
pub fn update(inputs: &Inputs, config: &HookConfig) -> Decision {
    let exclusive = inputs.spec.cpus.as_ref().filter(|set| {
        inputs
            .spec
            .quota
            .is_some_and(|q| set.len() <= (q.floor() as usize).max(1))
    });
    match exclusive {
        Some(set) => Decision::keeping_cpuset(
            inputs,
            config,
            format!(
                "cpuset kept: kubelet's {set} is exclusive (no larger than the quota's usable CPUs)"
            ),
        ),
        None => decide(inputs, config),
    }
}
