//! Claiming a decision's GPUs, and releasing them: one rule for every front end.
//!
//! A claim names its holder: a container id, the claimer's scope and the pid whose life the
//! claim lasts. The hook's claims are held by the container's init and scoped by its bundle
//! path ([`scope`]): the same id in another runtime root (another `runc --root`, another
//! containerd namespace) has another bundle, so neither takes nor releases the other's claims.
//! The NRI plugin's are held by the plugin itself, scoped `nri:<plugin>`. Who holds a GPU goes
//! to the host's log only: the plan files are the tenant's ([`ClaimResult::held`]).

use std::path::Path;
use std::time::Duration;

use cpuplan::{ClaimError, ClaimOutcome, Holder};

use crate::config::HookConfig;
use crate::decide::ClaimResult;
use crate::logging::escape;
use crate::read::host::Host;
use crate::read::Container;

/// Claims `gpus` in `claims_dir` for `holder` (its pid's liveness read under `root`), waiting at
/// most `wait` for the lock; skipped when there is no GPU to claim. A GPU held by another live
/// container, and a claim that could not be taken, are logged.
pub fn claim(
    claims_dir: &Path,
    root: &Path,
    holder: &Holder,
    gpus: &[String],
    wait: Duration,
) -> ClaimResult {
    if gpus.is_empty() {
        return ClaimResult::Skipped;
    }
    let id = escape(&holder.container);
    let result = match cpuplan::claim_gpus(claims_dir, root, holder, gpus, wait) {
        Ok(ClaimOutcome::Claimed) => ClaimResult::Claimed,
        Ok(ClaimOutcome::Held { address, by }) => {
            log::info!(
                "container {id}: GPU {address} is held by live container {} (pid {}, {})",
                escape(&by.container),
                by.pid,
                describe_scope(&by.scope)
            );
            ClaimResult::held(&address)
        }
        Err(e) => ClaimResult::Failed(e.to_string()),
    };
    if let ClaimResult::Failed(why) = &result {
        log::warn!("container {id}: no GPU claim: {why}");
    }
    result
}

/// Claims `gpus` for the live `container` as the hook does: held by its init pid, scoped by its
/// bundle; skipped without a pid, a bundle or a GPU to claim.
pub fn claim_for_init(
    host: &Host,
    config: &HookConfig,
    container: &Container,
    gpus: &[String],
) -> ClaimResult {
    let (Some(pid), Some(bundle)) = (container.pid, &container.bundle) else {
        return ClaimResult::Skipped;
    };
    if gpus.is_empty() {
        return ClaimResult::Skipped;
    }
    let failed = |why: String| {
        log::warn!("container {}: no GPU claim: {why}", escape(&container.id));
        ClaimResult::Failed(why)
    };
    let holder = match host.holder(&container.id, &scope(bundle), pid) {
        Ok(Some(h)) => h,
        Ok(None) => return failed(format!("pid {pid} is gone or a zombie")),
        Err(e) => return failed(e.to_string()),
    };
    claim(
        &config.claims_dir,
        &host.root,
        &holder,
        gpus,
        Duration::from_millis(config.claim_wait_ms),
    )
}

/// Releases the GPU claims in `claims_dir` of `container` in `scope` held by `by` or by a pid
/// that no longer runs (liveness read under `root`), waiting at most `wait` for the lock; how
/// many there were. A claim another live holder of the same container and scope took over
/// stays: that holder releases it ([`cpuplan::release`]).
pub fn release_scope(
    claims_dir: &Path,
    root: &Path,
    container: &str,
    scope: &str,
    by: Option<&Holder>,
    wait: Duration,
) -> Result<usize, ClaimError> {
    cpuplan::release(claims_dir, root, container, scope, by, wait)
}

/// Releases the GPU claims of `container` whose bundle is `bundle` (the hook's) held by `by`
/// (the holder this run claimed with, at a createRuntime that fails after its claim) or by a
/// pid that no longer runs (its init, at poststop); how many there were. One that a live init
/// of the same container and bundle took over (the container started again) stays.
pub fn release(
    config: &HookConfig,
    container: &str,
    bundle: &Path,
    by: Option<&Holder>,
) -> Result<usize, ClaimError> {
    release_scope(
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
        format!("bundle {}", escape(scope))
    } else {
        format!("scope {}", escape(scope))
    }
}
