//! Following a plan that changes while the container runs: the NRI plugin rewrites the plan
//! files (whole, by rename) when kubelet changes the container's CPUs, with a higher
//! generation (`plan.json`'s `generation`, `plan.env`'s `CPUPLAN_GENERATION`). [`generation`]
//! reads it, [`watch`] waits for it to change, [`refresh`] reads the plan again and installs it.
//! The environment never changes after start: only the files hold a newer plan.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cpuplan::planenv::generation_of_json;

use crate::error::Result;
use crate::plan::{Plan, MAX_PLAN};
use crate::state::install;

/// The generation of the plan file at `path`: 0 where it has none (written before generations,
/// or by the hook, which writes once) or cannot be read. The file is read without blocking (a
/// FIFO or a device there is no plan) and at most 1 MiB of it.
pub fn generation(path: &Path) -> u64 {
    match cpuplan::read_file(path, MAX_PLAN) {
        Ok(bytes) => generation_of_json(&String::from_utf8_lossy(&bytes)),
        Err(_) => 0,
    }
}

/// Waits until the generation of the plan file at `path` is no longer `seen`, polling every
/// `every` (never blocking on the file), for at most `limit` (`None`: for ever); the new
/// generation, or `None` when `limit` passed first.
pub fn watch(path: &Path, seen: u64, every: Duration, limit: Option<Duration>) -> Option<u64> {
    let start = Instant::now();
    loop {
        let now = generation(path);
        if now != seen {
            return Some(now);
        }
        if limit.is_some_and(|l| start.elapsed() >= l) {
            return None;
        }
        std::thread::sleep(every);
    }
}

/// Reads the plan file (`$CPUPLAN_PLAN`, else [`crate::DEFAULT_PLAN`]) again and installs it:
/// the plan threads pin to from now on.
pub fn refresh() -> Result<Arc<Plan>> {
    refresh_from(&Plan::default_path())
}

/// Reads the plan file at `path` again and installs it.
pub fn refresh_from(path: &Path) -> Result<Arc<Plan>> {
    let plan = Plan::load_from(path)?;
    Ok(install(Some(plan)).expect("a plan was installed"))
}
