//! `plan.env`: the plan as environment variables, defined once for the writers (the hook,
//! `precreate`, the NRI plugin) and the readers (the shim, `cpuplan-exec`).
//!
//! The file is `KEY='value'` lines in [`shell`]'s subset, so `. /run/cpuplan/plan.env` in any
//! POSIX shell sets exactly these values and runs nothing. The `CPUPLAN_*` variables carry the
//! plan; the thread variables size common pools from it (`OMP_NUM_THREADS` and the other
//! [`POOL_VARS`] = a process's share of `left`, `GOMAXPROCS` = `usable`), and `CUDA_DEVICE_ORDER=PCI_BUS_ID` makes CUDA
//! number GPUs in PCI address order, the order of the plan's workers.

pub mod shell;

use crate::cpuset::{format_cpu_list, parse_cpu_list, CpuSet};
pub use crate::json::Pools;
use crate::json::{ResultJson, WorkerJson};
use crate::{PlanFile, PoolSplit, Role, Shares, PLAN_VERSION};

pub use shell::LineError;

/// The `step_thread_core` setting the plan was made with.
pub const SETTING: &str = "CPUPLAN_SETTING";
/// The CPUs the container may run on.
pub const MASK: &str = "CPUPLAN_MASK";
/// How many of them the quota lets run.
pub const USABLE: &str = "CPUPLAN_USABLE";
/// The CPUs the quota lets run, less the pinned ones.
pub const LEFT: &str = "CPUPLAN_LEFT";
/// Every pinned CPU.
pub const PINNED: &str = "CPUPLAN_PINNED";
/// Each worker's CPUs, `;`-separated, `-` for an unpinned worker.
pub const WORKERS: &str = "CPUPLAN_WORKERS";
/// Each worker's GPU PCI address, `;`-separated, `-` for a CPU worker.
pub const DEVICES: &str = "CPUPLAN_DEVICES";
/// The API server's CPUs, empty when unpinned.
pub const RESULT: &str = "CPUPLAN_RESULT";
/// The API server's intra-op threads.
pub const PREPROCESS_THREADS: &str = "CPUPLAN_PREPROCESS_THREADS";
/// Threads one PNG deflates on.
pub const PNG_THREADS: &str = "CPUPLAN_PNG_THREADS";
/// Outputs encoded at once.
pub const ENCODE_WORKERS: &str = "CPUPLAN_ENCODE_WORKERS";
/// Threads a large output read copies over.
pub const COPY_WORKERS: &str = "CPUPLAN_COPY_WORKERS";
/// How the CPUs left are shared among the deployment's processes (`per-process` or `off`).
pub const POOL_SPLIT: &str = "CPUPLAN_POOL_SPLIT";
/// A worker process's intra-op threads: what the [`POOL_VARS`] hold.
pub const WORKER_THREADS: &str = "CPUPLAN_WORKER_THREADS";
/// How the plan was reached.
pub const WHY: &str = "CPUPLAN_WHY";
/// The container's own `step_thread_core` setting (read by the hook, not written).
pub const STEP_THREAD_CORE: &str = "CPUPLAN_STEP_THREAD_CORE";
/// The plan file a process reads instead of the default (read by the shim, set by `cpuplan-exec`).
pub const PLAN_PATH: &str = "CPUPLAN_PLAN";
/// The claims directory the Python package's `cpuplan.host.claim_gpus` uses (default the hook's).
pub const CLAIMS_DIR: &str = "CPUPLAN_CLAIMS_DIR";
/// The plan files' generation, in `plan.env` (and as [`GENERATION_JSON`] in `plan.json`): 1
/// when they are first written, one more at each rewrite (the NRI plugin's UpdateContainer), so
/// a reader that sees it change reads the plan again. Never in a container's environment, which
/// cannot change after start: that is always the first generation's plan.
pub const GENERATION: &str = "CPUPLAN_GENERATION";
/// The member of `plan.json` holding the generation.
pub const GENERATION_JSON: &str = "generation";
/// The prefix of every variable this module defines for the plan.
pub const PREFIX: &str = "CPUPLAN_";

/// Thread-pool sizes set to a process's share of the plan's `left` ([`PlanEnv::worker_threads`]
/// in the container's environment and `plan.env`): OpenMP, MKL, OpenBLAS, BLIS, numexpr, rayon,
/// and Python's `os.cpu_count()` / `os.process_cpu_count()` (3.13 and later), which size
/// `concurrent.futures`' default pools.
pub const POOL_VARS: [&str; 7] = [
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "RAYON_NUM_THREADS",
    "PYTHON_CPU_COUNT",
];

/// The thread variables of a process whose pools get `threads`: each of [`POOL_VARS`].
pub fn thread_vars(threads: usize) -> Vec<(&'static str, String)> {
    POOL_VARS
        .iter()
        .map(|k| (*k, threads.to_string()))
        .collect()
}
/// Go's scheduler size, set to the plan's `usable`.
pub const GOMAXPROCS: &str = "GOMAXPROCS";
/// CUDA's device numbering, set to [`CUDA_ORDER`] so `cuda:N` is the N-th GPU in PCI order.
pub const CUDA_DEVICE_ORDER: &str = "CUDA_DEVICE_ORDER";
/// The value of [`CUDA_DEVICE_ORDER`].
pub const CUDA_ORDER: &str = "PCI_BUS_ID";

/// Whether `key` is a variable `plan.env` writes (the `CPUPLAN_*` plan variables and the thread variables).
pub fn is_plan_var(key: &str) -> bool {
    (key.starts_with(PREFIX) && ![STEP_THREAD_CORE, PLAN_PATH, CLAIMS_DIR].contains(&key))
        || POOL_VARS.contains(&key)
        || key == GOMAXPROCS
        || key == CUDA_DEVICE_ORDER
}

/// The first line of `plan.env`.
const HEADER: &str =
    "# Written by cpuplan: the container's CPU plan. Source it: . /run/cpuplan/plan.env\n";

/// Exactly what `plan.env` carries: a [`PlanFile`] less the per-worker reasons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanEnv {
    /// The setting the plan was made with.
    pub setting: String,
    /// The CPUs the container may run on.
    pub mask: CpuSet,
    /// How many of them the quota lets run.
    pub usable: usize,
    /// The CPUs the quota lets run, less the pinned ones.
    pub left: usize,
    /// Every pinned CPU.
    pub pinned: CpuSet,
    /// Each worker's CPUs, `None` when unpinned.
    pub workers: Vec<Option<CpuSet>>,
    /// Each worker's GPU PCI address, `None` for a CPU worker; as long as `workers`.
    pub devices: Vec<Option<String>>,
    /// The API server's CPUs, if pinned.
    pub result: Option<CpuSet>,
    /// Pool sizes.
    pub pools: Pools,
    /// How the CPUs left are shared among the deployment's processes.
    pub split: PoolSplit,
    /// A worker process's intra-op threads, what [`POOL_VARS`] hold ([`CpuPlan::worker_threads`]).
    ///
    /// [`CpuPlan::worker_threads`]: crate::CpuPlan::worker_threads
    pub worker_threads: usize,
    /// How the plan was reached.
    pub why: String,
    /// The files' generation ([`GENERATION`]); 0 where none is known (a process environment,
    /// a file written before generations). Written to `plan.env` when not 0, never in
    /// [`PlanEnv::vars`].
    pub generation: u64,
}

/// The generation of a `plan.json` text (its [`GENERATION_JSON`] member): 0 when it has none
/// or is no JSON object.
pub fn generation_of_json(text: &str) -> u64 {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| v.get(GENERATION_JSON).and_then(serde_json::Value::as_u64))
        .unwrap_or(0)
}

/// `plan.env` (or a process environment) that does not hold a plan.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanEnvError {
    /// A line a shell would not take as a plain assignment.
    #[error(transparent)]
    Line(#[from] LineError),
    /// `CPUPLAN_MASK` is not set: there is no plan.
    #[error("{MASK} is not set")]
    NoPlan,
    /// A variable whose value is not what the plan needs.
    #[error("{name}={value:?}: {what}")]
    Var {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
        /// What is wrong.
        what: String,
    },
}

fn join<T>(items: &[Option<T>], f: impl Fn(&T) -> String) -> String {
    items
        .iter()
        .map(|i| i.as_ref().map_or_else(|| "-".to_string(), &f))
        .collect::<Vec<_>>()
        .join(";")
}

impl PlanEnv {
    /// What `plan.env` carries of `file`.
    pub fn new(file: &PlanFile) -> PlanEnv {
        PlanEnv {
            setting: file.setting.clone(),
            mask: file.mask.clone(),
            usable: file.usable,
            left: file.left,
            pinned: file.pinned.clone(),
            workers: file
                .workers
                .iter()
                .map(|w| w.as_ref().map(|w| w.cpus.clone()))
                .collect(),
            devices: file.worker_devices(),
            result: file.result.as_ref().map(|r| r.cpus.clone()),
            pools: file.pools,
            split: file.pool_split,
            worker_threads: match file.processes.worker {
                0 => file.threads_for(Role::Other),
                n => n,
            },
            why: file.why.clone(),
            generation: 0,
        }
    }

    /// This plan as generation `generation` of the files.
    pub fn at_generation(mut self, generation: u64) -> PlanEnv {
        self.generation = generation;
        self
    }

    /// The variables in file order: the `CPUPLAN_*` plan, then the thread variables (a worker
    /// process's, which any process started without saying which it is gets too).
    pub fn vars(&self) -> Vec<(&'static str, String)> {
        let mut vars = vec![
            (SETTING, self.setting.clone()),
            (MASK, format_cpu_list(&self.mask)),
            (USABLE, self.usable.to_string()),
            (LEFT, self.left.to_string()),
            (PINNED, format_cpu_list(&self.pinned)),
            (WORKERS, join(&self.workers, format_cpu_list)),
            (DEVICES, join(&self.devices, String::clone)),
            (
                RESULT,
                self.result
                    .as_ref()
                    .map(format_cpu_list)
                    .unwrap_or_default(),
            ),
            (
                PREPROCESS_THREADS,
                self.pools.preprocess_threads.to_string(),
            ),
            (PNG_THREADS, self.pools.png_threads.to_string()),
            (ENCODE_WORKERS, self.pools.encode_workers.to_string()),
            (COPY_WORKERS, self.pools.copy_workers.to_string()),
            (POOL_SPLIT, self.split.to_string()),
            (WORKER_THREADS, self.worker_threads.to_string()),
            (WHY, self.why.clone()),
        ];
        vars.extend(thread_vars(self.worker_threads));
        vars.push((GOMAXPROCS, self.usable.to_string()));
        vars.push((CUDA_DEVICE_ORDER, CUDA_ORDER.to_string()));
        vars
    }

    /// The text of `plan.env`.
    pub fn encode(&self) -> String {
        let mut out = String::from(HEADER);
        for (k, v) in self.vars() {
            out.push_str(k);
            out.push('=');
            out.push_str(&shell::quote(&v));
            out.push('\n');
        }
        if self.generation > 0 {
            out.push_str(&format!("{GENERATION}='{}'\n", self.generation));
        }
        out
    }

    /// The plan in a `plan.env` text (a later assignment of a key wins).
    pub fn decode(text: &str) -> Result<PlanEnv, PlanEnvError> {
        let vars = shell::parse(text)?;
        PlanEnv::from_vars(|k| {
            vars.iter()
                .rev()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
        })
    }

    /// The plan in the `CPUPLAN_*` variables `get` returns (a process environment, or a parsed file).
    ///
    /// `CPUPLAN_MASK` and `CPUPLAN_USABLE` are required. `CPUPLAN_WORKERS` and `CPUPLAN_DEVICES`
    /// list one item per worker (`-`, or an empty item, for an unpinned worker or a CPU worker);
    /// absent or empty, there are no workers. `CPUPLAN_LEFT`, `CPUPLAN_PINNED` and the pool sizes
    /// are derived from the rest when absent.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<PlanEnv, PlanEnvError> {
        let bad = |name: &'static str, value: &str, what: &str| PlanEnvError::Var {
            name,
            value: value.to_string(),
            what: what.to_string(),
        };
        let cpus = |name: &'static str, value: &str| -> Result<CpuSet, PlanEnvError> {
            parse_cpu_list(value.trim()).map_err(|e| bad(name, value, &e.reason))
        };
        let count = |name: &'static str, value: &str| -> Result<usize, PlanEnvError> {
            value
                .trim()
                .parse::<usize>()
                .map_err(|_| bad(name, value, "not a count"))
        };
        let mask_text = get(MASK).ok_or(PlanEnvError::NoPlan)?;
        let mask = cpus(MASK, &mask_text)?;
        if mask.is_empty() {
            return Err(bad(MASK, &mask_text, "the mask is empty"));
        }
        let usable_text = get(USABLE).ok_or_else(|| bad(USABLE, "", "not set"))?;
        let usable = count(USABLE, &usable_text)?;
        let items = |text: &str| -> Vec<Option<String>> {
            if text.is_empty() {
                return Vec::new();
            }
            text.split(';')
                .map(|i| i.trim())
                .map(|i| (!i.is_empty() && i != "-").then(|| i.to_string()))
                .collect()
        };
        let workers_text = get(WORKERS).unwrap_or_default();
        let devices_text = get(DEVICES).unwrap_or_default();
        let mut workers = Vec::new();
        for (i, w) in items(&workers_text).into_iter().enumerate() {
            workers.push(match w {
                None => None,
                Some(list) => Some(parse_cpu_list(&list).map_err(|e| {
                    bad(WORKERS, &workers_text, &format!("worker {i}: {}", e.reason))
                })?),
            });
        }
        let mut devices = items(&devices_text);
        if workers.is_empty() {
            workers = vec![None; devices.len()];
        } else if devices.is_empty() {
            devices = vec![None; workers.len()];
        } else if devices.len() != workers.len() {
            return Err(bad(
                DEVICES,
                &devices_text,
                &format!("{} devices for {} workers", devices.len(), workers.len()),
            ));
        }
        let result = match get(RESULT) {
            Some(r) if !r.trim().is_empty() => Some(cpus(RESULT, &r)?),
            _ => None,
        };
        let mut env = PlanEnv {
            setting: get(SETTING).unwrap_or_else(|| "unknown".into()),
            mask,
            usable,
            left: 0,
            pinned: CpuSet::new(),
            workers,
            devices,
            result,
            pools: Pools {
                preprocess_threads: 0,
                png_threads: 0,
                encode_workers: 0,
                copy_workers: 0,
            },
            split: match get(POOL_SPLIT) {
                Some(v) => v
                    .parse()
                    .map_err(|_| bad(POOL_SPLIT, &v, "not per-process or off"))?,
                None => PoolSplit::Off,
            },
            worker_threads: 0,
            why: get(WHY).unwrap_or_default(),
            generation: 0,
        };
        let derived = PlanFile::new(&env.to_file("").to_plan());
        env.pinned = match get(PINNED) {
            Some(p) => cpus(PINNED, &p)?,
            None => derived.pinned,
        };
        let opt = |name: &'static str, default: usize| -> Result<usize, PlanEnvError> {
            get(name).map_or(Ok(default), |v| count(name, &v))
        };
        env.left = opt(LEFT, derived.left)?;
        env.generation = match get(GENERATION) {
            Some(g) => g
                .trim()
                .parse::<u64>()
                .map_err(|_| bad(GENERATION, &g, "not a generation number"))?,
            None => 0,
        };
        env.pools = Pools {
            preprocess_threads: opt(PREPROCESS_THREADS, derived.pools.preprocess_threads)?,
            png_threads: opt(PNG_THREADS, derived.pools.png_threads)?,
            encode_workers: opt(ENCODE_WORKERS, derived.pools.encode_workers)?,
            copy_workers: opt(COPY_WORKERS, derived.pools.copy_workers)?,
        };
        env.worker_threads = opt(WORKER_THREADS, derived.processes.worker)?;
        Ok(env)
    }

    /// The plan as a [`PlanFile`]; each pinned worker's reason says it came from `source`.
    pub fn to_file(&self, source: &str) -> PlanFile {
        PlanFile {
            version: PLAN_VERSION,
            setting: self.setting.clone(),
            mask: self.mask.clone(),
            usable: self.usable,
            devices: self.devices.clone(),
            workers: self
                .workers
                .iter()
                .enumerate()
                .map(|(i, w)| {
                    w.as_ref().map(|cpus| WorkerJson {
                        device: self.devices.get(i).cloned().flatten(),
                        cpus: cpus.clone(),
                        why: format!("worker {i} of {WORKERS} in {source}"),
                    })
                })
                .collect(),
            result: self.result.as_ref().map(|cpus| ResultJson {
                cpus: cpus.clone(),
                why: format!("{RESULT} in {source}"),
            }),
            pinned: self.pinned.clone(),
            left: self.left,
            pools: self.pools,
            pool_split: self.split,
            processes: self.shares(),
            why: self.why.clone(),
        }
    }

    /// Each process's share as this plan states it: the API server's `preprocess_threads`, a
    /// worker's [`PlanEnv::worker_threads`].
    fn shares(&self) -> Shares {
        let workers = match self.split {
            PoolSplit::PerProcess => self.workers.len(),
            PoolSplit::Off => self.workers.len().min(1),
        };
        let api_server = self.pools.preprocess_threads;
        Shares {
            api_server,
            worker: self.worker_threads,
            workers,
            other: self.worker_threads,
            sum: api_server + self.worker_threads * workers,
            left: self.left,
            usable: self.usable,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CpuPlan, Setting, StepCpus};

    fn sample() -> PlanEnv {
        let plan = CpuPlan {
            setting: Setting::Auto,
            mask: "0-55,112-167".parse().unwrap(),
            usable: 16,
            devices: vec![
                Some("0000:2a:00.0".into()),
                None,
                Some("0000:3a:00.0".into()),
            ],
            workers: vec![
                Some(StepCpus {
                    cpus: "1,113".parse().unwrap(),
                    why: "w".into(),
                }),
                None,
                None,
            ],
            result: Some(StepCpus {
                cpus: "54,166".parse().unwrap(),
                why: "r".into(),
            }),
            split: PoolSplit::PerProcess,
            why: "it's \"auto\"\n$(x)".into(),
        };
        PlanEnv::new(&PlanFile::new(&plan))
    }

    #[test]
    fn encodes_every_variable_once_in_order() {
        let text = sample().encode();
        assert!(text.starts_with("# Written by cpuplan"));
        assert!(text.contains("\nCPUPLAN_WORKERS='1,113;-;-'\n"), "{text}");
        assert!(text.contains("\nCPUPLAN_DEVICES='0000:2a:00.0;-;0000:3a:00.0'\n"));
        // Three worker processes and the API server share the 12 CPUs left: 3 + 3 × 3.
        assert!(
            text.contains("\nCPUPLAN_PREPROCESS_THREADS='3'\n"),
            "{text}"
        );
        assert!(text.contains("\nCPUPLAN_POOL_SPLIT='per-process'\n"));
        assert!(text.contains("\nCPUPLAN_WORKER_THREADS='3'\n"));
        assert!(text.contains("\nOMP_NUM_THREADS='3'\n"));
        assert!(text.contains("\nPYTHON_CPU_COUNT='3'\n"));
        assert!(text.contains("\nCPUPLAN_LEFT='12'\n"));
        assert!(text.contains("\nGOMAXPROCS='16'\n"));
        assert!(text.contains("\nCUDA_DEVICE_ORDER='PCI_BUS_ID'\n"));
        let keys: Vec<_> = sample().vars().into_iter().map(|(k, _)| k).collect();
        let mut unique = keys.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), keys.len());
        assert!(keys.iter().all(|k| is_plan_var(k)));
        assert!(!is_plan_var(STEP_THREAD_CORE) && !is_plan_var("PATH"));
    }

    #[test]
    fn decodes_what_it_encodes() {
        let p = sample();
        assert_eq!(PlanEnv::decode(&p.encode()).unwrap(), p);
        assert!(!p.encode().contains(GENERATION), "none known: none written");
        let g = sample().at_generation(3);
        assert!(g.encode().ends_with("\nCPUPLAN_GENERATION='3'\n"));
        assert_eq!(PlanEnv::decode(&g.encode()).unwrap().generation, 3);
        assert!(
            !g.vars().iter().any(|(k, _)| *k == GENERATION),
            "never in the env"
        );
        assert!(is_plan_var(GENERATION));
        let e = PlanEnv::decode("CPUPLAN_MASK=0\nCPUPLAN_USABLE=1\nCPUPLAN_GENERATION=x\n");
        assert!(e.unwrap_err().to_string().contains("CPUPLAN_GENERATION"));
        assert_eq!(generation_of_json(r#"{"generation": 7, "x": 1}"#), 7);
        assert_eq!(generation_of_json(r#"{"x": 1}"#), 0);
        assert_eq!(generation_of_json("not json"), 0);
    }

    #[test]
    fn zero_workers_and_one_unpinned_worker_differ() {
        let mut p = sample();
        p.workers = vec![];
        p.devices = vec![];
        assert_eq!(PlanEnv::decode(&p.encode()).unwrap().workers.len(), 0);
        p.workers = vec![None];
        p.devices = vec![None];
        assert_eq!(PlanEnv::decode(&p.encode()).unwrap().workers, vec![None]);
    }

    #[test]
    fn derived_values_are_recomputed_when_absent_and_bad_values_named() {
        let p =
            PlanEnv::decode("CPUPLAN_MASK=0-7\nCPUPLAN_USABLE=8\nCPUPLAN_WORKERS='0;-'\n").unwrap();
        assert_eq!(p.left, 7);
        assert_eq!(p.pinned.to_string(), "0");
        assert_eq!(p.devices, vec![None, None]);
        assert_eq!(
            PlanEnv::decode("CPUPLAN_USABLE=1\n").unwrap_err(),
            PlanEnvError::NoPlan
        );
        for (text, needle) in [
            ("CPUPLAN_MASK=x\nCPUPLAN_USABLE=1", "CPUPLAN_MASK=\"x\""),
            ("CPUPLAN_MASK=0\nCPUPLAN_USABLE=z", "not a count"),
            ("CPUPLAN_MASK=0\n", "CPUPLAN_USABLE"),
            (
                "CPUPLAN_MASK=0-3\nCPUPLAN_USABLE=1\nCPUPLAN_WORKERS='0;1'\nCPUPLAN_DEVICES='-'",
                "1 devices for 2 workers",
            ),
        ] {
            let e = PlanEnv::decode(text).unwrap_err().to_string();
            assert!(e.contains(needle), "{text:?}: {e}");
        }
    }
}
