//! `deployment_plan`: which CPUs each worker's step threads and the API server's result threads take.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use crate::cpuset::CpuSet;
use crate::topology::{SysfsTopology, Topology};

mod auto;
mod cores;
mod seed;
mod shares;
mod snapshot;

use cores::Cores;
pub use shares::{PoolSplit, PoolSplitError, Role, Shares};

/// The `step_thread_core` knob: `off`, a CPU number, or `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    /// Pin nothing.
    Off,
    /// Worker 0 on this CPU's core, the next workers on the next cores above it.
    Cpu(usize),
    /// Place each worker by its GPU's rank among the host's GPUs on its NUMA node.
    Auto,
}

impl FromStr for Setting {
    type Err = CpuPlanError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "off" => Ok(Setting::Off),
            "auto" => Ok(Setting::Auto),
            t if !t.is_empty() && t.len() <= 5 && t.bytes().all(|b| b.is_ascii_digit()) => t
                .parse()
                .map(Setting::Cpu)
                .map_err(|_| CpuPlanError::Setting(s.to_string())),
            _ => Err(CpuPlanError::Setting(s.to_string())),
        }
    }
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Setting::Off => f.write_str("off"),
            Setting::Auto => f.write_str("auto"),
            Setting::Cpu(n) => write!(f, "{n}"),
        }
    }
}

/// The CPUs one worker's main, GPU and plan threads share (one core's hardware threads in the mask), and how they were chosen, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepCpus {
    /// The CPUs.
    pub cpus: CpuSet,
    /// How they were chosen.
    pub why: String,
}

/// The process mask, how many of its CPUs the quota lets run, the pinned CPUs and the pool sizes taken from the CPUs left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuPlan {
    /// The `step_thread_core` setting the plan was made with.
    pub setting: Setting,
    /// The CPUs the container may run on.
    pub mask: CpuSet,
    /// How many of them the quota lets run at once.
    pub usable: usize,
    /// Each worker's GPU PCI address in the conductor's worker order; `None` for a CPU worker.
    pub devices: Vec<Option<String>>,
    /// One entry per worker in the conductor's worker order; `None` for an unpinned worker.
    pub workers: Vec<Option<StepCpus>>,
    /// The API server's result threads' core, if pinned.
    pub result: Option<StepCpus>,
    /// How the CPUs left are shared among the deployment's processes.
    pub split: PoolSplit,
    /// How the plan was reached, in a line fit for a log.
    pub why: String,
}

/// A `step_thread_core` value the process mask can't honour, or host files `auto` could not read.
#[derive(Debug, thiserror::Error)]
pub enum CpuPlanError {
    /// The setting is neither `off`, `auto` nor a CPU number.
    #[error("step_thread_core {} is not off, auto or a cpu number", crate::quoted(.0))]
    Setting(String),
    /// The mask cannot honour the setting.
    #[error("step_thread_core {setting}: {reason}")]
    Unfit {
        /// The setting.
        setting: Setting,
        /// Why the mask cannot honour it.
        reason: String,
    },
    /// A host file the plan needs could not be read or parsed.
    #[error(transparent)]
    Host(#[from] crate::error::Error),
}

impl CpuPlan {
    /// The plan made with `setting` that pins none of the workers on `devices`, with `why`.
    pub fn unpinned(
        setting: Setting,
        mask: CpuSet,
        usable: usize,
        devices: Vec<Option<String>>,
        why: impl Into<String>,
    ) -> Self {
        CpuPlan {
            setting,
            mask,
            usable,
            workers: vec![None; devices.len()],
            devices,
            result: None,
            split: PoolSplit::default(),
            why: why.into(),
        }
    }

    /// This plan with every worker and the API server unpinned, saying `why`.
    pub fn unpin(self, why: impl Into<String>) -> Self {
        let split = self.split;
        CpuPlan::unpinned(self.setting, self.mask, self.usable, self.devices, why).with_split(split)
    }

    /// Every pinned CPU: the workers' and the API server's.
    pub fn pinned(&self) -> CpuSet {
        let mut all = CpuSet::new();
        for s in self.workers.iter().flatten().chain(self.result.iter()) {
            all.extend_from(&s.cpus);
        }
        all
    }

    /// The CPUs the quota lets run, less the pinned ones: what the pools are sized from. At least 1.
    pub fn left(&self) -> usize {
        self.usable.saturating_sub(self.pinned().len()).max(1)
    }

    /// The API server's intra-op threads: a quarter of the CPUs left, 1 to 4; where the pools
    /// are split, also no more than leaves each worker process one.
    pub fn preprocess_threads(&self) -> usize {
        let quarter = (self.left() / 4).clamp(1, 4);
        if self.splits() {
            quarter.min(self.left().saturating_sub(self.workers.len()).max(1))
        } else {
            quarter
        }
    }

    /// Threads one PNG deflates on: a quarter of the CPUs left, 1 to 4.
    pub fn png_threads(&self) -> usize {
        (self.left() / 4).clamp(1, 4)
    }

    /// Outputs the data worker encodes at once, so that times `png_threads` stays within the CPUs left.
    pub fn encode_workers(&self) -> usize {
        (self.left() / self.png_threads()).max(1)
    }

    /// Threads a large output read copies over: one encode's share of the CPUs left.
    pub fn copy_workers(&self) -> usize {
        (self.left() / self.encode_workers()).max(1)
    }
}

/// The plan for a deployment whose workers' devices sit at PCI `addresses` (worker order; `None` for a CPU worker), reading the host's topology under `root`.
pub fn deployment_plan(
    setting: Setting,
    addresses: &[Option<String>],
    mask: &CpuSet,
    usable: usize,
    root: &Path,
) -> Result<CpuPlan, CpuPlanError> {
    deployment_plan_on(setting, addresses, mask, usable, &SysfsTopology::new(root))
}

/// [`deployment_plan`] over any [`Topology`] (sysfs, or an in-memory snapshot).
pub fn deployment_plan_on(
    setting: Setting,
    addresses: &[Option<String>],
    mask: &CpuSet,
    usable: usize,
    topo: &dyn Topology,
) -> Result<CpuPlan, CpuPlanError> {
    let ask = Ask {
        addresses,
        mask,
        usable,
        topo,
    };
    match setting {
        Setting::Off => Ok(ask.unpinned(setting, "step_thread_core off".into())),
        _ if addresses.is_empty() => Ok(ask.unpinned(
            setting,
            format!("step_thread_core {setting}: no workers; nothing pinned"),
        )),
        Setting::Cpu(cpu) => cpu_plan(cpu, &ask),
        Setting::Auto => auto::auto_plan(&ask),
    }
}

/// What a plan is asked for: the workers' devices, the mask, the usable CPUs and the topology.
struct Ask<'a> {
    addresses: &'a [Option<String>],
    mask: &'a CpuSet,
    usable: usize,
    topo: &'a dyn Topology,
}

impl Ask<'_> {
    /// The plan made with `setting` that pins nothing, saying `why`.
    fn unpinned(&self, setting: Setting, why: String) -> CpuPlan {
        CpuPlan::unpinned(
            setting,
            self.mask.clone(),
            self.usable,
            self.addresses.to_vec(),
            why,
        )
    }
}

/// The plan for `step_thread_core <cpu>`: worker 0 on `cpu`'s core, worker k on the k-th core above it, the API server on the mask's last core.
fn cpu_plan(cpu: usize, ask: &Ask) -> Result<CpuPlan, CpuPlanError> {
    let (mask, usable) = (ask.mask, ask.usable);
    let setting = Setting::Cpu(cpu);
    let workers = ask.addresses.len();
    let unfit = |reason: String| CpuPlanError::Unfit { setting, reason };
    if !mask.contains(cpu) {
        return Err(unfit(format!("cpu {cpu} is not in the mask {mask}")));
    }
    let cores = Cores::new(ask.topo).all(mask)?;
    let Some(start) = cores.iter().position(|c| c.contains(cpu)) else {
        return Err(unfit(format!("cpu {cpu} is in no core of the mask {mask}")));
    };
    let api = cores.len() - 1;
    if start + workers > api {
        return Err(unfit(format!(
            "cpu {cpu} is too near the top of the mask {mask} for {workers} workers: \
             they would take {workers} cores from core {start} of {}, the API server the last",
            cores.len()
        )));
    }
    let mut pinned = CpuSet::new();
    let mut steps = Vec::with_capacity(workers);
    for (k, core) in cores[start..start + workers].iter().enumerate() {
        pinned.extend_from(core);
        let why = match k {
            0 => format!("cpu {cpu}'s core"),
            k => format!("core {k} above cpu {cpu}'s core"),
        };
        steps.push(Some(StepCpus {
            cpus: core.clone(),
            why,
        }));
    }
    let last = &cores[api];
    pinned.extend_from(last);
    if mask.is_subset(&pinned) {
        return Err(unfit(format!(
            "{workers} workers and the API server would leave no cpu of the mask {mask} unpinned"
        )));
    }
    Ok(CpuPlan {
        setting,
        mask: mask.clone(),
        usable,
        devices: ask.addresses.to_vec(),
        workers: steps,
        result: Some(StepCpus {
            cpus: last.clone(),
            why: "the last core of the mask".to_string(),
        }),
        split: PoolSplit::default(),
        why: format!(
            "step_thread_core {cpu}: {workers} workers on cpus {} from cpu {cpu}'s core up, API server on the last core of the mask ({last})",
            cores[start..start + workers]
                .iter()
                .fold(CpuSet::new(), |acc, c| acc.union(c))
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpuset::parse_cpu_list;
    use crate::gpus::HostGpu;
    use crate::topology::StaticTopology;

    fn set(s: &str) -> CpuSet {
        parse_cpu_list(s).unwrap()
    }

    fn gpu(address: &str, node: Option<u32>, local: &str) -> HostGpu {
        HostGpu {
            address: address.into(),
            node,
            local: Some(set(local)),
            cpu_node: None,
        }
    }

    /// 16 CPUs without SMT.
    fn flat(gpus: Vec<HostGpu>) -> StaticTopology {
        StaticTopology {
            siblings: vec![],
            gpus,
        }
    }

    fn some(a: &[&str]) -> Vec<Option<String>> {
        a.iter().map(|s| Some(s.to_string())).collect()
    }

    #[test]
    fn settings_parse_and_print() {
        assert_eq!("off".parse::<Setting>().unwrap(), Setting::Off);
        assert_eq!(" auto\n".parse::<Setting>().unwrap(), Setting::Auto);
        assert_eq!("12".parse::<Setting>().unwrap(), Setting::Cpu(12));
        for bad in ["", "-1", "on", "123456", "1.5"] {
            let e = bad.parse::<Setting>().unwrap_err();
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
        assert_eq!(Setting::Cpu(7).to_string(), "7");
        assert_eq!(Setting::Auto.to_string(), "auto");
    }

    #[test]
    fn auto_ranks_gpus_within_their_node() {
        let t = flat(vec![
            gpu("0000:01:00.0", Some(0), "0-7"),
            gpu("0000:02:00.0", Some(1), "8-15"),
            gpu("0000:03:00.0", Some(0), "0-7"),
        ]);
        let p = deployment_plan_on(
            Setting::Auto,
            &some(&["0000:03:00.0", "0000:02:00.0"]),
            &set("0-15"),
            16,
            &t,
        )
        .unwrap();
        assert_eq!(p.workers[0].as_ref().unwrap().cpus, set("1"));
        assert_eq!(p.workers[1].as_ref().unwrap().cpus, set("8"));
        assert_eq!(p.result.unwrap().cpus, set("6"));
    }

    #[test]
    fn auto_pins_nothing_where_inconsistent_locality_would_pin_a_cpu_twice() {
        // Two GPUs, each rank 0 on its own "node", sharing the same local CPUs.
        let t = flat(vec![
            gpu("0000:01:00.0", Some(0), "0-7"),
            gpu("0000:02:00.0", None, "0-7"),
        ]);
        let p = deployment_plan_on(
            Setting::Auto,
            &some(&["0000:01:00.0", "0000:02:00.0"]),
            &set("0-7"),
            8,
            &t,
        )
        .unwrap();
        assert!(p.pinned().is_empty());
        assert!(p.why.contains("overlaps"), "{}", p.why);
    }

    #[test]
    fn cpu_number_on_a_flat_topology() {
        let p = deployment_plan_on(
            Setting::Cpu(3),
            &[None, None],
            &set("0-15"),
            16,
            &flat(vec![]),
        )
        .unwrap();
        assert_eq!(p.pinned(), set("3-4,15"));
        assert_eq!(
            p.workers[1].as_ref().unwrap().why,
            "core 1 above cpu 3's core"
        );
        assert_eq!(p.left(), 13);
    }
}
