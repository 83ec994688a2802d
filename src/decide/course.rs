//! A decision over the course of applying it, and the one entry every front end asks
//! ([`Course::new`] with what it [`Ask`]s): each event a front end meets (a claim's outcome, a
//! cpuset it may not write, a write that fails) makes the next decision here, so the front end
//! only reports what happened and never decides again itself.

use super::problem::Problem;
use super::update::{update, Created};
use super::verdict::{verdict, Refusal};
use super::{decide, ClaimResult, Decision};
use crate::config::HookConfig;
use crate::read::Inputs;

/// What a front end asks of the decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// A container being created: the OCI hook, podman's precreate, the NRI plugin's
    /// CreateContainer.
    Create,
    /// What the hook would do, with no pid: the GPU claims are not checked (`explain`).
    Explain,
    /// kubelet changed a planned container's CPUs (the NRI plugin's UpdateContainer): plan again
    /// inside kubelet's set, the claims as they were taken at creation.
    Update(Created),
}

/// The decision for one container as its application goes.
#[derive(Debug)]
pub struct Course<'a> {
    inputs: &'a Inputs,
    config: &'a HookConfig,
    decision: Decision,
    claim: ClaimResult,
}

impl<'a> Course<'a> {
    /// The decision for `inputs` under `config`, as a front end asks it (`ask`), nothing applied
    /// yet. An update's claims are already settled: the course starts with them applied.
    pub fn new(inputs: &'a Inputs, config: &'a HookConfig, ask: Ask) -> Course<'a> {
        let mut course = Course {
            inputs,
            config,
            decision: decide(inputs, config),
            claim: ClaimResult::Skipped,
        };
        match ask {
            Ask::Create => {}
            Ask::Explain => {
                if !course.decision.claims.is_empty() {
                    course
                        .decision
                        .notes
                        .push("no pid: GPU claims were not checked".into());
                }
            }
            Ask::Update(created) => {
                course.decision = update(inputs, config);
                if course.decision.problem.is_none() {
                    course.claimed(created.claim_at_update(&course.decision.claims));
                }
            }
        }
        course
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
    pub fn fail(&mut self, cause: Problem) -> Result<(), Refusal> {
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

    /// How claiming went (what the NRI plugin records for a later update).
    pub fn claim(&self) -> &ClaimResult {
        &self.claim
    }

    /// The cpuset cannot be written, for the reason `why` (no controller, a refused write): the
    /// decision keeps the cpuset and plans over the whole mask, as claimed before.
    pub fn keep_cpuset(&mut self, why: String) {
        self.decision =
            Decision::keeping_cpuset(self.inputs, self.config, why).after_claim(&self.claim);
    }
}
