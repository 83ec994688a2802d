//! Claiming a decision's GPUs for a live container, and releasing them when it stops.
//!
//! The hook's claims are scoped by the container's bundle path ([`scope`]): the same id in
//! another runtime root (another `runc --root`, another containerd namespace) has another
//! bundle, so neither takes nor releases the other's claims.

use std::path::Path;
use std::time::Duration;

use cpuplan::{ClaimError, ClaimOutcome, Holder};

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
    let (Some(pid), Some(bundle)) = (inputs.container.pid, &inputs.container.bundle) else {
        return ClaimResult::Skipped;
    };
    if decision.claims.is_empty() {
        return ClaimResult::Skipped;
    }
    let holder = match host.holder(&inputs.container.id, &scope(bundle), pid) {
        Ok(Some(h)) => h,
        Ok(None) => return ClaimResult::Failed(format!("pid {pid} is gone or a zombie")),
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
        Ok(ClaimOutcome::Held { address, by }) => {
            // Who holds it goes to the host's log only: the plan files are the tenant's.
            log::info!(
                "container {}: GPU {address} is held by live container {} (pid {}, {})",
                inputs.container.id,
                by.container,
                by.pid,
                describe_scope(&by.scope)
            );
            ClaimResult::held(&address)
        }
        Err(e) => ClaimResult::Failed(e.to_string()),
    };
    if let ClaimResult::Failed(why) = &result {
        log::warn!("container {}: no GPU claim: {why}", inputs.container.id);
    }
    result
}

/// Releases the GPU claims of `container` whose bundle is `bundle` held by `by` (the holder
/// this run claimed with, at a createRuntime that fails after its claim) or by a pid that no
/// longer runs (its init, at poststop); how many there were. One that a live init of the same
/// container and bundle took over (the container started again) stays.
pub fn release(
    config: &HookConfig,
    container: &str,
    bundle: &Path,
    by: Option<&Holder>,
) -> Result<usize, ClaimError> {
    cpuplan::release(
        &config.claims_dir,
        &config.root,
        container,
        &scope(bundle),
        by,
        Duration::from_millis(config.claim_wait_ms),
    )
}

/// The hook's claim scope for a container: its bundle path, as the runtime's state names it.
pub fn scope(bundle: &Path) -> String {
    bundle.display().to_string()
}

/// A holder's scope in words: `bundle /path` for the hook's, `scope nri:x` for another claimer's.
pub fn describe_scope(scope: &str) -> String {
    if scope.is_empty() {
        "no scope: claimed before scopes".into()
    } else if scope.starts_with('/') {
        format!("bundle {}", crate::logging::escape(scope))
    } else {
        format!("scope {}", crate::logging::escape(scope))
    }
}
