//! Pinning the calling thread: [`pin_thread`] in the warm-up order, and a plan's worker or API-server CPUs.

use std::fmt;

use cpuplan::CpuSet;

use crate::affinity::{set_thread_affinity, thread_affinity};
use crate::error::{Result, ShimError};
use crate::plan::Plan;
use crate::state::first_use_mask;
use crate::text::Escaped;

/// What a pin call did: pinned the thread, or left it where it was and why.
///
/// Displayed as one line: `why`, the plan's text, with its control characters escaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pinning {
    /// The calling thread now runs on `cpus`.
    Pinned {
        /// The CPUs.
        cpus: CpuSet,
        /// How the plan chose them.
        why: String,
    },
    /// The plan leaves this thread unpinned; nothing was changed.
    Unpinned {
        /// Why, for the log.
        why: String,
    },
}

impl fmt::Display for Pinning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pinning::Pinned { cpus, why } => write!(f, "pinned to cpus {cpus} ({})", Escaped(why)),
            Pinning::Unpinned { why } => write!(f, "left unpinned: {}", Escaped(why)),
        }
    }
}

/// Confine the calling thread to `cpus`, after moving it back to `process_mask` and running `warm` there.
///
/// A thread's intra-op (OpenMP) pool is started by its first parallel op with the
/// mask the thread has then, and a pool confined to one CPU runs a parallel op many
/// times slower. So the thread goes back to the process mask first, `warm` starts
/// the pool there (one op as wide as the pool), and only then does the thread move.
/// `cpus` must lie within `process_mask`, and the kernel must grant all of them.
pub fn pin_thread<R>(cpus: &CpuSet, process_mask: &CpuSet, warm: impl FnOnce() -> R) -> Result<R> {
    first_use_mask();
    if cpus.is_empty() {
        return Err(ShimError::EmptyCpus);
    }
    if !cpus.is_subset(process_mask) {
        return Err(ShimError::OutsideMask {
            cpus: cpus.clone(),
            mask: process_mask.clone(),
            outside: cpus.difference(process_mask),
        });
    }
    set_thread_affinity(process_mask)?;
    let out = warm();
    set_thread_affinity(cpus)?;
    let got = thread_affinity()?;
    if &got != cpus {
        return Err(ShimError::Narrowed {
            asked: cpus.clone(),
            got,
        });
    }
    Ok(out)
}

/// Pin the calling thread to worker `i`'s CPUs; where the plan leaves worker `i` unpinned, do nothing and say why.
pub fn pin_worker(plan: &Plan, i: usize) -> Result<Pinning> {
    pin_worker_with(plan, i, || ())
}

/// [`pin_worker`], running `warm` on the process mask just before the move (not at all when unpinned).
pub fn pin_worker_with(plan: &Plan, i: usize, warm: impl FnOnce()) -> Result<Pinning> {
    let what = format!("worker {i}");
    match plan.file.workers.get(i) {
        Some(Some(w)) => pin_to(plan, &what, &w.cpus, &w.why, warm),
        Some(None) => unpinned(
            &what,
            format!("the plan leaves it unpinned ({})", plan.file.why),
        ),
        None => unpinned(
            &what,
            format!(
                "the plan pins no worker {i} (it lists {} workers; {})",
                plan.workers(),
                plan.file.why
            ),
        ),
    }
}

/// Pin the calling thread to the API server's result CPUs; where the plan leaves them unpinned, do nothing and say why.
pub fn pin_result(plan: &Plan) -> Result<Pinning> {
    pin_result_with(plan, || ())
}

/// [`pin_result`], running `warm` on the process mask just before the move (not at all when unpinned).
pub fn pin_result_with(plan: &Plan, warm: impl FnOnce()) -> Result<Pinning> {
    match &plan.file.result {
        Some(r) => pin_to(
            plan,
            "the API server's result threads",
            &r.cpus,
            &r.why,
            warm,
        ),
        None => unpinned(
            "the API server's result threads",
            format!("the plan leaves them unpinned ({})", plan.file.why),
        ),
    }
}

fn pin_to(
    plan: &Plan,
    what: &str,
    cpus: &CpuSet,
    why: &str,
    warm: impl FnOnce(),
) -> Result<Pinning> {
    match pin_thread(cpus, &plan.file.mask, warm) {
        Ok(()) => {
            log::info!("cpuplan: {what} pinned to cpus {cpus}: {}", Escaped(why));
            Ok(Pinning::Pinned {
                cpus: cpus.clone(),
                why: why.to_string(),
            })
        }
        Err(e) => {
            log::warn!("cpuplan: {what} not pinned: {e}");
            Err(e)
        }
    }
}

fn unpinned(what: &str, why: String) -> Result<Pinning> {
    log::info!("cpuplan: {what} left unpinned: {}", Escaped(&why));
    Ok(Pinning::Unpinned { why })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plans_why_is_displayed_on_one_line() {
        let p = Pinning::Pinned {
            cpus: "1".parse().unwrap(),
            why: "w\nforged".into(),
        };
        assert_eq!(p.to_string(), "pinned to cpus 1 (w\\nforged)");
        let u = Pinning::Unpinned {
            why: "u\r\u{1b}[2K".into(),
        };
        assert_eq!(u.to_string(), "left unpinned: u\\r\\u{1b}[2K");
    }
}
