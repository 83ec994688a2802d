//! Claiming a decision's GPUs, and releasing them: one rule for every front end.
//!
//! A claim names its holder: a container id, the claimer's scope and the pid whose life the
//! claim lasts. The hook's claims are held by the container's init and scoped by its bundle
//! path ([`scope`]): the same id in another runtime root (another `runc --root`, another
//! containerd namespace) has another bundle, so neither takes nor releases the other's claims.
//! The NRI plugin's are held by the plugin itself, scoped `nri:<plugin>`. Who holds a GPU goes
//! to the host's log only: the plan files are the tenant's ([`ClaimResult::held`]).

use std::path::Path;
use std::time::{Duration, Instant};

use cpuplan::{ClaimError, ClaimOutcome, Holder};

use crate::config::{HookConfig, CLAIM_WAIT_RESERVE_MS, HOOK_TIMEOUT_S};
use crate::decide::{ClaimResult, Problem, Why};
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
        Err(e) => ClaimResult::Failed(Problem::claim(e)),
    };
    if let ClaimResult::Failed(why) = &result {
        log::warn!("container {id}: no GPU claim: {why}");
    }
    result
}

/// A claim that failed where the wait for its lock was cut short by the hook's deadline.
#[derive(Debug, thiserror::Error)]
#[error("{failed} ({cut})")]
struct CutShort {
    /// How the claim failed.
    #[source]
    failed: Problem,
    /// How the wait was cut.
    cut: String,
}

/// The hook's own deadline: when it started and the timeout its registration gives it, after
/// which the runtime kills it (and, whatever `on_error` says, the container does not start).
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    started: Instant,
    timeout: Duration,
}

impl Deadline {
    /// The deadline of a hook that started at `started` under a registration of `timeout`
    /// seconds; without one (or one the runtime would not take), the shipped registrations'
    /// [`HOOK_TIMEOUT_S`].
    pub fn new(started: Instant, timeout: Option<i64>) -> Deadline {
        let secs = timeout
            .and_then(|t| u64::try_from(t).ok())
            .filter(|t| *t > 0)
            .unwrap_or(HOOK_TIMEOUT_S);
        Deadline {
            started,
            timeout: Duration::from_secs(secs),
        }
    }

    /// The time left before the runtime kills the hook.
    pub fn left(&self) -> Duration {
        self.timeout.saturating_sub(self.started.elapsed())
    }

    /// How long to wait for the claims lock: `claim_wait_ms`, cut so that the wait ends
    /// [`CLAIM_WAIT_RESERVE_MS`] before the timeout (the rest of the hook's work), measured
    /// from the hook's start; with the cut in words where it cut.
    pub fn wait(&self, claim_wait_ms: u64) -> (Duration, Option<String>) {
        let wanted = Duration::from_millis(claim_wait_ms);
        let left = self
            .timeout
            .saturating_sub(Duration::from_millis(CLAIM_WAIT_RESERVE_MS))
            .saturating_sub(self.started.elapsed());
        if wanted <= left {
            return (wanted, None);
        }
        let why = format!(
            "claim_wait_ms {claim_wait_ms} cut to {} ms by the hook's registered timeout of {} s",
            left.as_millis(),
            self.timeout.as_secs()
        );
        (left, Some(why))
    }
}

/// Claims `gpus` for the live `container` as the hook does: held by its init pid, scoped by its
/// bundle, waiting for the lock no longer than `deadline` leaves; skipped without a pid, a
/// bundle or a GPU to claim.
pub fn claim_for_init(
    host: &Host,
    config: &HookConfig,
    container: &Container,
    gpus: &[String],
    deadline: &Deadline,
) -> ClaimResult {
    let (Some(pid), Some(bundle)) = (container.pid, &container.bundle) else {
        return ClaimResult::Skipped;
    };
    if gpus.is_empty() {
        return ClaimResult::Skipped;
    }
    let failed = |why: Problem| {
        log::warn!("container {}: no GPU claim: {why}", escape(&container.id));
        ClaimResult::Failed(why)
    };
    let holder = match host.holder(&container.id, &scope(bundle), pid) {
        Ok(Some(h)) => h,
        Ok(None) => {
            return failed(Problem::claim(Why(format!(
                "pid {pid} is gone or a zombie"
            ))))
        }
        Err(e) => return failed(Problem::claim(e)),
    };
    let (wait, cut) = deadline.wait(config.claim_wait_ms);
    match (
        claim(&config.claims_dir, &host.root, &holder, gpus, wait),
        cut,
    ) {
        (ClaimResult::Failed(why), Some(cut)) => {
            ClaimResult::Failed(Problem::claim(CutShort { failed: why, cut }))
        }
        (result, _) => result,
    }
}

/// Releases the GPU claims of `container` whose bundle is `bundle` (the hook's) held by `by`
/// (the holder this run claimed with, at a createRuntime that fails after its claim) or by a
/// pid that no longer runs (its init, at poststop), waiting for the lock no longer than
/// `deadline` leaves; how many there were. One that a live init of the same container and
/// bundle took over (the container started again) stays.
pub fn release(
    config: &HookConfig,
    container: &str,
    bundle: &Path,
    by: Option<&Holder>,
    deadline: &Deadline,
) -> Result<usize, ClaimError> {
    cpuplan::release(
        &config.claims_dir,
        &config.root,
        container,
        &scope(bundle),
        by,
        deadline.wait(config.claim_wait_ms).0,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_ends_before_the_registered_timeout_less_the_reserve() {
        let now = Instant::now();
        // The shipped 10 s: a wait below check-config's bound is kept whole at the start; the
        // bound itself ends 2 s before the timeout, counted from the hook's start.
        let (w, cut) = Deadline::new(now, None).wait(7000);
        assert!(cut.is_none() && w == Duration::from_millis(7000), "{w:?}");
        let (w, _) = Deadline::new(now, None).wait(crate::config::MAX_CLAIM_WAIT_MS);
        assert!(
            w <= Duration::from_millis(8000) && w > Duration::from_millis(7900),
            "{w:?}"
        );
        // A 4 s registration: 2 s are left, and the cut is said.
        let (w, cut) = Deadline::new(now, Some(4)).wait(8000);
        assert!(
            w <= Duration::from_secs(2) && w > Duration::from_millis(1900),
            "{w:?}"
        );
        let cut = cut.unwrap();
        assert!(
            cut.contains("claim_wait_ms 8000 cut to") && cut.contains("timeout of 4 s"),
            "{cut}"
        );
        // A hook that already spent its time waits not at all; a timeout no runtime takes
        // is the shipped one.
        let late = now - Duration::from_secs(3);
        assert_eq!(Deadline::new(late, Some(4)).wait(100).0, Duration::ZERO);
        assert_eq!(Deadline::new(now, Some(0)).timeout, Duration::from_secs(10));
        assert_eq!(
            Deadline::new(now, Some(-5)).timeout,
            Duration::from_secs(10)
        );
    }
}
