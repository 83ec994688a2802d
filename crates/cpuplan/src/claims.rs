//! GPU claims that outlive the claiming process (STUB: to be written).

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::Result;

/// Who holds a claim: a container, its init pid, and that pid's start time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// Container id.
    pub container: String,
    /// Host pid of the container's init.
    pub pid: u32,
    /// Field 22 of `/proc/<pid>/stat` (clock ticks since boot).
    pub start_time: u64,
}

/// One claim as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Claim {
    /// GPU PCI address.
    pub address: String,
    /// Its holder.
    pub holder: Holder,
    /// Whether the holder still runs.
    pub live: bool,
}

/// The result of [`claim_gpus`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// Every address is now held by the holder.
    Claimed,
    /// None taken: `address` is held by the live `by`.
    Held {
        /// The GPU.
        address: String,
        /// Its live holder.
        by: Holder,
    },
}

/// Claim every address for `holder`, all or nothing, under an flock of `dir` waited on at most `wait`.
pub fn claim_gpus(
    dir: &Path,
    root: &Path,
    holder: &Holder,
    addresses: &[String],
    wait: Duration,
) -> Result<ClaimOutcome> {
    let _ = (dir, root, holder, addresses, wait);
    todo!("H3")
}

/// Drop every claim held by `container`; returns how many.
pub fn release(dir: &Path, container: &str, wait: Duration) -> Result<usize> {
    let _ = (dir, container, wait);
    todo!("H3")
}

/// Every claim in `dir`, each with whether its holder is live (pids read under `root`).
pub fn list_claims(dir: &Path, root: &Path) -> Result<Vec<Claim>> {
    let _ = (dir, root);
    todo!("H3")
}

/// Start time (field 22 of `<root>/proc/<pid>/stat`) of pid, `None` when it is gone (STUB).
pub fn process_start_time(root: &Path, pid: u32) -> Result<Option<u64>> {
    let _ = (root, pid);
    todo!("H3")
}
