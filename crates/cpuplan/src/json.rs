//! The plan's JSON form, written by the hook into the container and read by the shim.

use serde::{Deserialize, Serialize};

use crate::cpuset::CpuSet;
use crate::plan::{CpuPlan, PoolSplit, Role, Setting, Shares, StepCpus};

/// The version of [`PlanFile`]'s layout.
pub const PLAN_VERSION: u32 = 1;

/// A plan as JSON: cpu sets as cpu-list strings, derived values spelled out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanFile {
    /// Layout version, [`PLAN_VERSION`].
    pub version: u32,
    /// The `step_thread_core` setting the plan was made with.
    pub setting: String,
    /// The CPUs the container may run on.
    pub mask: CpuSet,
    /// How many of them the quota lets run.
    pub usable: usize,
    /// Each worker's GPU PCI address in worker order, `null` for a CPU worker (absent in files
    /// written before it was added: then the pinned workers' `device`s are all there is).
    #[serde(default)]
    pub devices: Vec<Option<String>>,
    /// One entry per worker; `null` for an unpinned worker.
    pub workers: Vec<Option<WorkerJson>>,
    /// The API server's core, or `null`.
    pub result: Option<ResultJson>,
    /// Every pinned CPU.
    pub pinned: CpuSet,
    /// CPUs left for pools.
    pub left: usize,
    /// Pool sizes derived from `left`.
    pub pools: Pools,
    /// How the CPUs left are shared among the deployment's processes (`off`, every process
    /// sized from all of `left`, in a file written before the split).
    #[serde(default = "split_off")]
    pub pool_split: PoolSplit,
    /// What each process's pool variables hold, and their sum against `left` and `usable`
    /// (derived; all 0 in a file written before the split).
    #[serde(default)]
    pub processes: Shares,
    /// How the plan was reached.
    pub why: String,
}

fn split_off() -> PoolSplit {
    PoolSplit::Off
}

/// One pinned worker in a [`PlanFile`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerJson {
    /// The worker's GPU PCI address, `null` for a CPU worker.
    pub device: Option<String>,
    /// The worker's CPUs.
    pub cpus: CpuSet,
    /// How they were chosen.
    pub why: String,
}

/// The API server's pinned core in a [`PlanFile`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultJson {
    /// The CPUs.
    pub cpus: CpuSet,
    /// How they were chosen.
    pub why: String,
}

/// The pool sizes of a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pools {
    /// The API server's intra-op threads.
    pub preprocess_threads: usize,
    /// Threads one PNG deflates on.
    pub png_threads: usize,
    /// Outputs encoded at once.
    pub encode_workers: usize,
    /// Threads a large output read copies over.
    pub copy_workers: usize,
}

impl PlanFile {
    /// The JSON form of `plan`.
    pub fn new(plan: &CpuPlan) -> Self {
        let addresses = &plan.devices;
        PlanFile {
            version: PLAN_VERSION,
            setting: plan.setting.to_string(),
            mask: plan.mask.clone(),
            usable: plan.usable,
            devices: plan.devices.clone(),
            workers: plan
                .workers
                .iter()
                .enumerate()
                .map(|(i, w)| {
                    w.as_ref().map(|s| WorkerJson {
                        device: addresses.get(i).cloned().flatten(),
                        cpus: s.cpus.clone(),
                        why: s.why.clone(),
                    })
                })
                .collect(),
            result: plan.result.as_ref().map(|s| ResultJson {
                cpus: s.cpus.clone(),
                why: s.why.clone(),
            }),
            pinned: plan.pinned(),
            left: plan.left(),
            pools: Pools {
                preprocess_threads: plan.preprocess_threads(),
                png_threads: plan.png_threads(),
                encode_workers: plan.encode_workers(),
                copy_workers: plan.copy_workers(),
            },
            pool_split: plan.split,
            processes: plan.shares(),
            why: plan.why.clone(),
        }
    }

    /// The threads the pool variables of `process` hold under this plan (derived from the
    /// plan, as [`PlanFile::to_plan`] recomputes it).
    pub fn threads_for(&self, process: Role) -> usize {
        self.to_plan().threads_for(process)
    }

    /// The [`CpuPlan`] this file describes (derived fields are recomputed, not trusted; a
    /// setting that does not parse reads as `off`).
    pub fn to_plan(&self) -> CpuPlan {
        CpuPlan {
            setting: self.setting.parse().unwrap_or(Setting::Off),
            mask: self.mask.clone(),
            usable: self.usable,
            devices: self.worker_devices(),
            workers: self
                .workers
                .iter()
                .map(|w| {
                    w.as_ref().map(|w| StepCpus {
                        cpus: w.cpus.clone(),
                        why: w.why.clone(),
                    })
                })
                .collect(),
            result: self.result.as_ref().map(|r| StepCpus {
                cpus: r.cpus.clone(),
                why: r.why.clone(),
            }),
            split: self.pool_split,
            why: self.why.clone(),
        }
    }

    /// Each worker's device: `devices` when it lists one per worker, else the pinned workers' `device`s.
    pub fn worker_devices(&self) -> Vec<Option<String>> {
        if self.devices.len() == self.workers.len() {
            return self.devices.clone();
        }
        self.workers
            .iter()
            .map(|w| w.as_ref().and_then(|w| w.device.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpuset::parse_cpu_list;

    fn sample() -> CpuPlan {
        CpuPlan {
            setting: Setting::Auto,
            mask: parse_cpu_list("0-55,112-167").unwrap(),
            usable: 16,
            devices: vec![Some("0000:2a:00.0".into()), None],
            workers: vec![
                Some(StepCpus {
                    cpus: parse_cpu_list("1,113").unwrap(),
                    why: "w".into(),
                }),
                None,
            ],
            result: Some(StepCpus {
                cpus: parse_cpu_list("54,166").unwrap(),
                why: "r".into(),
            }),
            split: PoolSplit::PerProcess,
            why: "auto".into(),
        }
    }

    #[test]
    fn json_matches_the_documented_shape() {
        let f = PlanFile::new(&sample());
        let v: serde_json::Value = serde_json::to_value(&f).unwrap();
        assert_eq!(v["version"], 1);
        assert_eq!(v["mask"], "0-55,112-167");
        assert_eq!(v["workers"][0]["device"], "0000:2a:00.0");
        assert_eq!(v["devices"][0], "0000:2a:00.0");
        assert!(v["devices"][1].is_null());
        assert_eq!(v["setting"], "auto");
        assert_eq!(v["workers"][0]["cpus"], "1,113");
        assert!(v["workers"][1].is_null());
        assert_eq!(v["result"]["cpus"], "54,166");
        assert_eq!(v["pinned"], "1,54,113,166");
        assert_eq!(v["left"], 12);
        assert_eq!(v["pools"]["preprocess_threads"], 3);
        assert_eq!(v["pools"]["png_threads"], 3);
        assert_eq!(v["pools"]["encode_workers"], 4);
        assert_eq!(v["pools"]["copy_workers"], 3);
        // Two worker processes and the API server share the 12 CPUs left: 3 + 2 × 4.
        assert_eq!(v["pool_split"], "per-process");
        assert_eq!(v["processes"]["api_server"], 3);
        assert_eq!(v["processes"]["worker"], 4);
        assert_eq!(v["processes"]["workers"], 2);
        assert_eq!(v["processes"]["other"], 4);
        assert_eq!(v["processes"]["sum"], 11);
        assert_eq!(v["processes"]["usable"], 16);
    }

    #[test]
    fn a_file_without_the_split_reads_as_off() {
        let mut v = serde_json::to_value(PlanFile::new(&sample())).unwrap();
        let o = v.as_object_mut().unwrap();
        o.remove("pool_split");
        o.remove("processes");
        let back: PlanFile = serde_json::from_value(v).unwrap();
        assert_eq!(back.pool_split, PoolSplit::Off);
        assert_eq!(back.threads_for(Role::Worker(1)), 12);
        assert_eq!(PlanFile::new(&sample()).threads_for(Role::Other), 4);
    }

    #[test]
    fn round_trips_and_ignores_extra_keys() {
        let f = PlanFile::new(&sample());
        let mut v = serde_json::to_value(&f).unwrap();
        v["container"] = "abc".into();
        let back: PlanFile = serde_json::from_value(v).unwrap();
        assert_eq!(back, f);
        assert_eq!(back.to_plan(), sample());
    }
}
