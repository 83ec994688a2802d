//! Claiming a decision's GPUs for a live container, and releasing them when it stops.

use std::time::Duration;

use cpuplan::{ClaimError, ClaimOutcome};

use crate::config::HookConfig;
use crate::decide::{ClaimResult, Decision};
use crate::read::host::Host;
use crate::read::Inputs;

/// Claims `decision`'s GPUs for the container in `inputs` (its init pid holds them); skipped without a pid or a GPU to claim.
pub fn claim(
    host: &Host,
    config: &HookConfig,
    inputs: &Inputs,
    decision: &Decision,
) -> ClaimResult {
    let Some(pid) = inputs.container.pid else {
        return ClaimResult::Skipped;
    };
    if decision.claims.is_empty() {
        return ClaimResult::Skipped;
    }
    let holder = match host.holder(&inputs.container.id, pid) {
        Ok(Some(h)) => h,
        Ok(None) => return ClaimResult::Failed(format!("pid {pid} is gone")),
        Err(e) => return ClaimResult::Failed(e.to_string()),
    };
    let result = match cpuplan::claim_gpus(
        &config.claims_dir,
        &host.root,
        &holder,
        &decision.claims,
        Duration::from_millis(config.claim_wait_ms),
    ) {
        Ok(ClaimOutcome::Claimed) => ClaimResult::Claimed,
        Ok(ClaimOutcome::Held { address, by }) => ClaimResult::Held(format!(
            "GPU {address} is held by live container {} (pid {})",
            by.container, by.pid
        )),
        Err(e) => ClaimResult::Failed(e.to_string()),
    };
    if let ClaimResult::Failed(why) = &result {
        log::warn!("container {}: no GPU claim: {why}", inputs.container.id);
    }
    result
}

/// Releases every GPU claim of `container`; how many there were.
pub fn release(config: &HookConfig, container: &str) -> Result<usize, ClaimError> {
    cpuplan::release(
        &config.claims_dir,
        container,
        Duration::from_millis(config.claim_wait_ms),
    )
}
