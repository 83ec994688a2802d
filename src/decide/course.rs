//! A decision over the course of applying it: each event a front end meets (a claim's outcome,
//! a cpuset it may not write, a write that fails) makes the next decision here, so the front
//! end only reports what happened and never decides again itself.

use super::verdict::{verdict, Refusal};
use super::{decide, ClaimResult, Decision};
use crate::config::HookConfig;
use crate::read::Inputs;

/// The decision for one container as its application goes.
#[derive(Debug)]
pub struct Course<'a> {
    inputs: &'a Inputs,
    config: &'a HookConfig,
    decision: Decision,
    claim: ClaimResult,
}

impl<'a> Course<'a> {
    /// The decision for `inputs` under `config`, nothing applied yet.
    pub fn new(inputs: &'a Inputs, config: &'a HookConfig) -> Course<'a> {
        Course {
            inputs,
            config,
            decision: decide(inputs, config),
            claim: ClaimResult::Skipped,
        }
    }

    /// The decision in force.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// The decision in force, as the course ends.
    pub fn into_decision(self) -> Decision {
        self.decision
    }

    /// Whether the decision in force is the `off` plan of a planning problem.
    pub fn is_off(&self) -> bool {
        self.decision.problem.is_some()
    }

    /// The verdict on the decision's own planning problem, if it has one.
    pub fn verdict(&self) -> Result<(), Refusal> {
        self.decision.verdict(self.config.on_error)
    }

    /// `cause` stops the plan: the refusal under `deny`, else the `off` plan carrying it.
    pub fn fail(&mut self, cause: String) -> Result<(), Refusal> {
        verdict(self.config.on_error, &cause)?;
        self.decision = Decision::off(self.inputs, cause);
        Ok(())
    }

    /// Claiming the decision's GPUs went as `claim` says: held by another container pins
    /// nothing; a failed claim plans without one, and says so.
    pub fn claimed(&mut self, claim: ClaimResult) {
        self.decision = self.decision.clone().after_claim(&claim);
        self.claim = claim;
    }

    /// The cpuset cannot be written, for the reason `why` (no controller, a refused write): the
    /// decision keeps the cpuset and plans over the whole mask, as claimed before.
    pub fn keep_cpuset(&mut self, why: String) {
        self.decision =
            Decision::keeping_cpuset(self.inputs, self.config, why).after_claim(&self.claim);
    }
}
