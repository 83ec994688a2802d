//! Read: everything known about one container, read once into [`Inputs`].
//!
//! The OCI state (when there is one), the spec, the live cgroup limits over the leaf and its
//! ancestors, the mask, the GPUs each with its source, the setting with its source, and a
//! snapshot of the host topology the plan consults. A read that fails is kept as the
//! [`Inputs::problem`]: deciding then falls back to the `off` plan carrying that cause, and every
//! front end handles it the same way.

pub mod bundle;
pub mod error;
pub mod gpus;
pub mod host;
pub mod nodes;
pub mod procroot;
pub mod running;
pub mod spec;
pub mod state;
#[cfg(test)]
pub mod testkit;

use std::collections::BTreeMap;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

use cpuplan::planenv::STEP_THREAD_CORE;
use cpuplan::{Cgroups, CpuSet, PoolSplit, Setting, StaticTopology};

use crate::config::HookConfig;
use cpuplan::gpu::nvidia::VISIBLE_DEVICES;
pub use error::ReadError;
use gpus::Gpu;
use host::Host;
use spec::ContainerSpec;

/// `fd`, just returned by a successful open call (`openat`, `openat2`: nix's return a bare
/// `RawFd`) and owned by nobody else, as an `OwnedFd` that closes it.
pub(crate) fn own(fd: RawFd) -> OwnedFd {
    // SAFETY: the callers pass only a descriptor an open call has just returned to them.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

pub use spec::{POOL_SPLIT_ANNOTATION, SETTING_ANNOTATION};

/// Which container: its id, its init's host pid (once it has one) and its bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    /// The runtime's container id (`(explain)`, `(precreate)` where there is none yet).
    pub id: String,
    /// The init's host pid: the live cgroup and mask are read from it.
    pub pid: Option<u32>,
    /// The bundle directory, where there is one.
    pub bundle: Option<PathBuf>,
}

/// What the runtime shows of the live container besides its spec: the state's annotations
/// and the GPU device nodes in its `/dev` (both empty where there is no live container yet).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Live {
    /// The OCI state's annotations (they take precedence over the spec's).
    pub annotations: BTreeMap<String, String>,
    /// The GPU char devices present in its `/dev` (`/dev/nvidiaN`, `/dev/dri/*`), each with whether it is the runtime's.
    pub nodes: Vec<nodes::Node>,
}

/// Everything a decision is made from, read once.
#[derive(Debug)]
pub struct Inputs {
    /// Which container.
    pub container: Container,
    /// What its spec asks for.
    pub spec: ContainerSpec,
    /// Its cgroups on every hierarchy (none without a pid).
    pub cgroups: Cgroups,
    /// The tightest quota over its live cgroup and every ancestor, in CPUs.
    pub cgroup_quota: Option<f64>,
    /// Its CPUs: the spec's `cpus` within the pid's affinity (the online CPUs without a pid).
    pub mask: CpuSet,
    /// min(|mask|, floor(quota)), at least 1.
    pub usable: usize,
    /// Its GPUs in PCI address order (the worker order), each with its sources.
    pub gpus: Vec<Gpu>,
    /// The `step_thread_core` setting.
    pub setting: Setting,
    /// Where the setting came from.
    pub setting_from: String,
    /// How the CPUs left are shared among the deployment's processes.
    pub split: PoolSplit,
    /// Where the split came from.
    pub split_from: String,
    /// What the plan consults of the host: its GPUs and the siblings of the CPUs it may use.
    pub topology: StaticTopology,
    /// What could not be read for lack of a pid, what names no GPU, for the reader (the log).
    pub notes: Vec<String>,
    /// What the GPU read left out or placed on a GPU's parent, and why (an id of the env or
    /// of a mount that names no GPU, a MIG instance, a partition): also in `plan.json`.
    pub gpu_notes: Vec<String>,
    /// The first read that failed: the decision falls back to `off` with this cause.
    pub problem: Option<std::sync::Arc<ReadError>>,
}

impl Inputs {
    /// The tightest of the spec's and the live cgroup's quota.
    pub fn quota(&self) -> Option<f64> {
        match (self.spec.quota, self.cgroup_quota) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The workers' device addresses, one per GPU in worker order.
    pub fn addresses(&self) -> Vec<Option<String>> {
        self.gpus.iter().map(|g| Some(g.address.clone())).collect()
    }

    /// Inputs with nothing read yet but the container and its spec.
    fn start(container: Container, spec: ContainerSpec) -> Inputs {
        Inputs {
            container,
            spec,
            cgroups: Cgroups::default(),
            cgroup_quota: None,
            mask: CpuSet::new(),
            usable: 1,
            gpus: Vec::new(),
            setting: Setting::Off,
            setting_from: String::new(),
            split: PoolSplit::default(),
            split_from: String::new(),
            topology: StaticTopology::default(),
            notes: Vec::new(),
            gpu_notes: Vec::new(),
            problem: None,
        }
    }
}

/// The setting: the state's annotation, else the spec's, else `CPUPLAN_STEP_THREAD_CORE` in
/// the container's environment, else the hook config; with where it came from.
pub fn resolve_setting(
    config: &HookConfig,
    spec: &ContainerSpec,
    state_annotations: &BTreeMap<String, String>,
) -> Result<(Setting, String), ReadError> {
    let annotation = state_annotations
        .get(SETTING_ANNOTATION)
        .or_else(|| spec.annotations.get(SETTING_ANNOTATION));
    let (value, from) = if let Some(v) = annotation {
        (v.as_str(), format!("annotation {SETTING_ANNOTATION}"))
    } else if let Some(v) = spec.env.get(STEP_THREAD_CORE) {
        (v.as_str(), format!("process.env {STEP_THREAD_CORE}"))
    } else {
        return Ok((config.step_thread_core, "hook config".into()));
    };
    let setting = value.parse().map_err(|_| ReadError::Setting {
        origin: from.clone(),
        value: value.to_string(),
    })?;
    Ok((setting, from))
}

/// The split: the state's annotation, else the spec's, else the hook config; with where it came from.
pub fn resolve_split(
    config: &HookConfig,
    spec: &ContainerSpec,
    state_annotations: &BTreeMap<String, String>,
) -> Result<(PoolSplit, String), ReadError> {
    let annotation = state_annotations
        .get(POOL_SPLIT_ANNOTATION)
        .or_else(|| spec.annotations.get(POOL_SPLIT_ANNOTATION));
    let Some(value) = annotation else {
        return Ok((config.pool_split, "hook config".into()));
    };
    let from = format!("annotation {POOL_SPLIT_ANNOTATION}");
    let split = value.parse().map_err(|_| ReadError::PoolSplit {
        origin: from.clone(),
        value: value.to_string(),
    })?;
    Ok((split, from))
}

/// Reads the inputs of `container`, whose spec is `spec` and whose live view is `live`, on `host` with `config`.
///
/// Never fails: the first read that does is kept as [`Inputs::problem`], and what could not
/// be read is left at its fallback (the mask falls back to the spec's `cpus`, else the online CPUs).
pub fn read(
    host: &Host,
    config: &HookConfig,
    container: Container,
    spec: ContainerSpec,
    live: &Live,
) -> Inputs {
    let mut inputs = Inputs::start(container, spec);
    inputs.split = config.pool_split;
    // A `cpuplan.*` annotation cpuplan does not know (misspelt): one note, the plan unchanged.
    let annotations = inputs
        .spec
        .annotations
        .keys()
        .chain(live.annotations.keys());
    inputs.notes.extend(spec::unknown_annotations(annotations));
    if let Err(p) = read_into(&mut inputs, host, config, live) {
        if inputs.mask.is_empty() {
            inputs.mask = inputs
                .spec
                .cpus
                .clone()
                .or_else(|| host.online_cpus().ok())
                .unwrap_or_default();
            inputs.usable = cpuplan::usable_cpus(&inputs.mask, inputs.quota());
        }
        inputs.problem = Some(std::sync::Arc::new(p));
    }
    inputs
}

fn read_into(
    inputs: &mut Inputs,
    host: &Host,
    config: &HookConfig,
    live: &Live,
) -> Result<(), ReadError> {
    let allowed = match inputs.container.pid {
        Some(pid) => {
            // Kept before the quota is read: a bad quota file still leaves the pid's cgroups
            // known, for the check that the pid is the container's.
            inputs.cgroups = host.cgroups(pid)?;
            inputs.cgroup_quota = inputs.cgroups.quota()?;
            host.mask_of(pid)?
        }
        None => {
            // Before the container runs: the cgroup its spec names (its pod's, its parent's) says
            // the quota over the ancestors and the CPUs the cpuset allows.
            inputs.notes.push(
                "no pid: the quota and cpuset come from the cgroups linux.cgroupsPath names".into(),
            );
            let cgroups = match &inputs.spec.cgroups_path {
                Some(p) => host.cgroups_at(p)?,
                None => Cgroups::default(),
            };
            inputs.cgroup_quota = cgroups.quota()?;
            let online = host.running_cpus()?;
            let allowed = match cgroups.effective_cpus()? {
                Some(effective) => online.intersection(&effective),
                None => online,
            };
            inputs.cgroups = cgroups;
            allowed
        }
    };
    let mask = match &inputs.spec.cpus {
        Some(cpus) => cpus.intersection(&allowed),
        None => allowed,
    };
    if mask.is_empty() {
        return Err(ReadError::EmptyMask);
    }
    inputs.usable = cpuplan::usable_cpus(&mask, inputs.quota());
    inputs.mask = mask;
    (inputs.setting, inputs.setting_from) =
        resolve_setting(config, &inputs.spec, &live.annotations)?;
    (inputs.split, inputs.split_from) = resolve_split(config, &inputs.spec, &live.annotations)?;
    for n in &live.nodes {
        if let Some(why) = &n.untrusted {
            inputs.notes.push(format!(
                "{} ({}:{}) is not the runtime's device node ({why}): it names no GPU to claim",
                crate::logging::escape(&n.device.path),
                n.device.major,
                n.device.minor
            ));
        }
    }
    let visible = inputs.spec.env.get(VISIBLE_DEVICES).map(String::as_str);
    let found = host.gpus(
        &inputs.spec.devices,
        &live.nodes,
        &inputs.spec.mounts,
        visible,
    )?;
    inputs.gpus = found.gpus;
    inputs.notes.extend(found.notes.iter().cloned());
    inputs.gpu_notes = found.notes;
    inputs.topology = host.topology(inputs.setting, &inputs.addresses(), &inputs.mask)?;
    // A GPU whose NUMA node has no CPUs: one line for where it was placed, or why not.
    for g in &inputs.gpus {
        if let Some(line) = inputs
            .topology
            .gpus
            .iter()
            .find(|h| h.address == g.address)
            .and_then(cpuplan::HostGpu::placement_line)
        {
            inputs.notes.push(line);
        }
    }
    Ok(())
}
