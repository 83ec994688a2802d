//! This process's installed plan and its process mask.
//!
//! The process mask is the installed plan's `mask` while a plan is installed;
//! otherwise it is the affinity of the thread that first used this library (any
//! call into it), captured once. Threads that pinned themselves move back onto it
//! before they start pools, and threads started through [`crate::spawn`] start on it.

use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use cpuplan::{CpuSet, MAX_CPU};

use crate::affinity::thread_affinity;
use crate::plan::Plan;
use crate::text::Escaped;

static FIRST_USE_MASK: OnceLock<CpuSet> = OnceLock::new();
static INSTALLED: RwLock<Option<Arc<Plan>>> = RwLock::new(None);

/// The calling thread's affinity at this library's first use (every CPU if the kernel would not say).
pub fn first_use_mask() -> &'static CpuSet {
    FIRST_USE_MASK.get_or_init(|| match thread_affinity() {
        Ok(mask) => mask,
        Err(e) => {
            log::warn!("cpuplan: {e}; taking every cpu as the process mask");
            CpuSet::range(0, MAX_CPU).unwrap_or_default()
        }
    })
}

/// Makes `plan` this process's plan (`None`: back to none); returns the installed plan.
pub fn install(plan: Option<Plan>) -> Option<Arc<Plan>> {
    first_use_mask();
    let plan = plan.map(Arc::new);
    *INSTALLED.write().unwrap_or_else(PoisonError::into_inner) = plan.clone();
    if let Some(p) = &plan {
        log::info!(
            "cpuplan: installed the plan from {} (mask {}, usable {}, left {}): {}",
            Escaped(&p.source),
            p.file.mask,
            p.file.usable,
            p.file.left,
            Escaped(&p.file.why)
        );
    }
    plan
}

/// This process's plan, if one is installed.
pub fn installed() -> Option<Arc<Plan>> {
    first_use_mask();
    INSTALLED
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// The CPUs this process's threads run on unless pinned: the installed plan's mask, else [`first_use_mask`].
pub fn process_mask() -> CpuSet {
    match installed() {
        Some(plan) => plan.file.mask.clone(),
        None => first_use_mask().clone(),
    }
}
