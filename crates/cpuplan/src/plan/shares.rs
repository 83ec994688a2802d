//! How the CPUs left are shared among a deployment's processes: the API server and one
//! process per worker.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::CpuPlan;

/// The `pool_split` knob: whether each worker runs in a process of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum PoolSplit {
    /// One process per worker (torchrun, vLLM, SGLang, TensorRT-LLM, the seed's conductor):
    /// with two workers or more, each process's pools get its share of the CPUs left.
    #[default]
    #[serde(rename = "per-process")]
    PerProcess,
    /// One process drives every GPU: its pools get every CPU left.
    #[serde(rename = "off")]
    Off,
}

/// A `pool_split` value that is neither `per-process` nor `off`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pool_split {} is not per-process or off", crate::quoted(.0))]
pub struct PoolSplitError(pub String);

impl FromStr for PoolSplit {
    type Err = PoolSplitError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "per-process" => Ok(PoolSplit::PerProcess),
            "off" => Ok(PoolSplit::Off),
            _ => Err(PoolSplitError(s.to_string())),
        }
    }
}

impl fmt::Display for PoolSplit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PoolSplit::PerProcess => "per-process",
            PoolSplit::Off => "off",
        })
    }
}

/// Which process of the deployment a thread count is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The API server (its intra-op pool: `preprocess_threads`).
    ApiServer,
    /// Worker N's process.
    Worker(usize),
    /// Any other process (a launcher, a shell, a process started without saying which it is):
    /// it gets what the container's environment holds, a worker's share.
    Other,
}

/// What each process of the deployment gets: the thread count its pool variables hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Shares {
    /// The API server's intra-op threads (`preprocess_threads`).
    pub api_server: usize,
    /// Each worker process's intra-op threads (`OMP_NUM_THREADS` and the other pool variables).
    pub worker: usize,
    /// How many worker processes there are: one per worker, or one for them all under `off`.
    pub workers: usize,
    /// Any other process: the container's environment's value, a worker's share.
    pub other: usize,
    /// The API server's threads and every worker's, added up.
    pub sum: usize,
    /// The CPUs the pools are sized from (`left`).
    pub left: usize,
    /// The CPUs the quota lets run.
    pub usable: usize,
}

impl CpuPlan {
    /// This plan with the pools shared as `split` says.
    pub fn with_split(mut self, split: PoolSplit) -> Self {
        self.split = split;
        self
    }

    /// Whether the CPUs left are shared among processes: `per-process` with two workers or more.
    pub fn splits(&self) -> bool {
        self.split == PoolSplit::PerProcess && self.workers.len() >= 2
    }

    /// A worker process's intra-op threads: its share of the CPUs left once the API server's
    /// are taken, at least 1; every CPU left where the pools are not split.
    pub fn worker_threads(&self) -> usize {
        if !self.splits() {
            return self.left();
        }
        (self.left().saturating_sub(self.preprocess_threads()) / self.workers.len()).max(1)
    }

    /// The threads the pool variables of `process` hold.
    pub fn threads_for(&self, process: Role) -> usize {
        match process {
            Role::ApiServer => self.preprocess_threads(),
            Role::Worker(_) | Role::Other => self.worker_threads(),
        }
    }

    /// Every process's share, and their sum against `left` and `usable`.
    pub fn shares(&self) -> Shares {
        let workers = match self.split {
            PoolSplit::PerProcess => self.workers.len(),
            PoolSplit::Off => self.workers.len().min(1),
        };
        let (api_server, worker) = (self.preprocess_threads(), self.worker_threads());
        Shares {
            api_server,
            worker,
            workers,
            other: worker,
            sum: api_server + worker * workers,
            left: self.left(),
            usable: self.usable,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpuset::CpuSet;
    use crate::plan::{Setting, StepCpus};

    /// A plan with `workers` unpinned workers and `left` CPUs left of `usable`, the rest pinned
    /// to the API server.
    fn plan(workers: usize, usable: usize, left: usize, split: PoolSplit) -> CpuPlan {
        let mask: CpuSet = (0..usable).collect();
        let mut p = CpuPlan::unpinned(Setting::Off, mask, usable, vec![None; workers], "t")
            .with_split(split);
        if left < usable {
            p.result = Some(StepCpus {
                cpus: (left..usable).collect(),
                why: "r".into(),
            });
        }
        p
    }

    #[test]
    fn split_parses_and_prints() {
        assert_eq!("per-process".parse(), Ok(PoolSplit::PerProcess));
        assert_eq!(" off\n".parse(), Ok(PoolSplit::Off));
        assert_eq!(PoolSplit::default(), PoolSplit::PerProcess);
        for bad in ["", "on", "one", "Per-Process"] {
            let e = bad.parse::<PoolSplit>().unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
        assert_eq!(PoolSplit::Off.to_string(), "off");
        assert_eq!(
            serde_json::to_string(&PoolSplit::PerProcess).unwrap(),
            "\"per-process\""
        );
    }

    #[test]
    fn the_example_hosts_eight_workers_share_the_quota() {
        // 8 GPUs, a 64-CPU quota, 18 CPUs pinned: 46 left.
        let p = plan(8, 64, 46, PoolSplit::PerProcess);
        assert_eq!(p.left(), 46);
        let s = p.shares();
        assert_eq!((s.api_server, s.worker, s.workers, s.other), (4, 5, 8, 5));
        assert_eq!(s.sum, 44);
        assert!(s.sum <= s.left && s.left <= s.usable);
        assert_eq!(p.threads_for(Role::Worker(7)), 5);
        assert_eq!(p.threads_for(Role::ApiServer), 4);
        // One process drives every GPU: all of left, as before.
        let off = plan(8, 64, 46, PoolSplit::Off);
        assert_eq!(off.worker_threads(), 46);
        assert_eq!(off.preprocess_threads(), 4);
        assert_eq!((off.shares().workers, off.shares().sum), (1, 50));
    }

    #[test]
    fn one_gpu_or_none_keeps_left() {
        for n in [0, 1] {
            let p = plan(n, 16, 16, PoolSplit::PerProcess);
            assert!(!p.splits());
            assert_eq!(p.worker_threads(), 16);
            assert_eq!(p.preprocess_threads(), 4);
        }
    }

    #[test]
    fn more_processes_than_cpus_left_get_one_thread_each() {
        // Two GPUs under a 2-CPU quota: the workers get one each.
        let p = plan(2, 2, 2, PoolSplit::PerProcess);
        assert_eq!((p.preprocess_threads(), p.worker_threads()), (1, 1));
        assert_eq!(p.shares().workers * p.worker_threads(), 2);
        // 13 workers and 16 left: the API server's quarter (4) shrinks to 3.
        let p = plan(13, 16, 16, PoolSplit::PerProcess);
        assert_eq!((p.preprocess_threads(), p.worker_threads()), (3, 1));
        assert_eq!(p.shares().sum, 16);
    }

    #[test]
    fn shares_sum_within_left_unless_every_process_has_one() {
        for usable in 1..=96 {
            for left in 1..=usable {
                for n in 0..=24 {
                    let p = plan(n, usable, left, PoolSplit::PerProcess);
                    assert_eq!(p.left(), left);
                    let s = p.shares();
                    let at = format!("usable {usable} left {left} workers {n}: {s:?}");
                    assert!(s.api_server >= 1 && s.worker >= 1, "{at}");
                    assert!(s.api_server <= (left / 4).clamp(1, 4), "{at}");
                    if n < 2 {
                        assert_eq!(s.worker, left, "{at}");
                    } else if n < left {
                        assert!(s.sum <= left, "{at}");
                        // Nothing more than a worker's worth is left over.
                        assert!(left - s.sum < n, "{at}");
                    } else {
                        assert_eq!((s.api_server, s.worker), (1, 1), "{at}");
                    }
                }
            }
        }
    }
}
