//! Gathering a container's planning inputs: setting, quota, mask, usable CPUs and GPUs.

use std::collections::HashMap;

use cpuplan::{CpuSet, Process, Setting};

use crate::bundle::BundleConfig;
use crate::config::HookConfig;
use crate::devices::{container_gpus, CharDevice};
use crate::hook::problem::Problem;
use crate::hook::topo::HookTopology;

/// The annotation that sets `step_thread_core` for one container.
pub const SETTING_ANNOTATION: &str = "cpuplan.step-thread-core";
/// The `process.env` variable that sets `step_thread_core` for one container.
pub const SETTING_ENV: &str = "CPUPLAN_STEP_THREAD_CORE";

/// Everything a plan is made from.
pub struct Gathered {
    /// The setting.
    pub setting: Setting,
    /// Where it came from.
    pub setting_from: String,
    /// The config's quota.
    pub config_quota: Option<f64>,
    /// The live cgroup's quota (with ancestors).
    pub cgroup_quota: Option<f64>,
    /// The pid's cgroup hierarchies, located once (empty without a pid).
    pub cgroups: Vec<cpuplan::cgroup::CgroupDir>,
    /// The config's cpus.
    pub config_cpus: Option<CpuSet>,
    /// The container's mask.
    pub mask: CpuSet,
    /// min(|mask|, floor(quota)), at least 1.
    pub usable: usize,
    /// The container's GPUs in address order.
    pub gpus: Vec<String>,
    /// The host topology, GPUs read once.
    pub topology: HookTopology,
    /// What was skipped for lack of a pid, for `explain`.
    pub notes: Vec<String>,
}

impl Gathered {
    /// The workers' device addresses, one per GPU in worker order (what `deployment_plan` and `plan.env` take).
    pub fn addresses(&self) -> Vec<Option<String>> {
        self.gpus.iter().cloned().map(Some).collect()
    }

    /// The tightest of the config's and the cgroup's quota.
    pub fn quota(&self) -> Option<f64> {
        match (self.config_quota, self.cgroup_quota) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The setting: annotation, else `process.env`, else the hook config.
pub fn resolve_setting(
    config: &HookConfig,
    bundle: &BundleConfig,
    state_annotations: Option<&HashMap<String, String>>,
) -> Result<(Setting, String), Problem> {
    let annotation = state_annotations
        .and_then(|a| a.get(SETTING_ANNOTATION))
        .or_else(|| bundle.annotations.get(SETTING_ANNOTATION));
    let (value, from) = if let Some(v) = annotation {
        (v.as_str(), format!("annotation {SETTING_ANNOTATION}"))
    } else if let Some(v) = bundle.env.get(SETTING_ENV) {
        (v.as_str(), format!("process.env {SETTING_ENV}"))
    } else {
        return Ok((config.step_thread_core, "hook config".into()));
    };
    let setting = value.parse().map_err(|_| Problem::Setting {
        origin: from.clone(),
        value: value.to_string(),
    })?;
    Ok((setting, from))
}

/// Gathers the inputs of `bundle`'s container (init `pid` on the host, or none for `explain`/`precreate`).
pub fn gather(
    config: &HookConfig,
    bundle: &BundleConfig,
    state_annotations: Option<&HashMap<String, String>>,
    pid: Option<u32>,
) -> Result<Gathered, Problem> {
    let (setting, setting_from) = resolve_setting(config, bundle, state_annotations)?;
    let mut notes = Vec::new();
    let (cgroups, cgroup_quota, live_mask) = match pid {
        Some(pid) => {
            let cgroups = cpuplan::cgroup::cgroup_dirs(&config.root, Process::Pid(pid))?;
            let quota = cpuplan::quota::quota_over(&cgroups)?;
            (
                cgroups,
                quota,
                cpuplan::process_mask(&config.root, Process::Pid(pid))?,
            )
        }
        None => {
            notes.push("no pid: the live cgroup's quota and mask were not read".into());
            (
                Vec::new(),
                None,
                cpuplan::topology::online_cpus(&config.topology_root)?,
            )
        }
    };
    let mask = match &bundle.cpus {
        Some(cpus) => cpus.intersection(&live_mask),
        None => live_mask,
    };
    if mask.is_empty() {
        return Err(Problem::EmptyMask);
    }
    let devices: Vec<CharDevice> = bundle
        .char_devices
        .iter()
        .map(|d| CharDevice {
            major: d.major,
            minor: d.minor,
        })
        .collect();
    let visible = bundle.env.get("NVIDIA_VISIBLE_DEVICES").map(String::as_str);
    let gpus = container_gpus(&config.topology_root, &devices, visible)?;
    let topology = HookTopology::read(&config.topology_root, gpus.first().map(String::as_str))?;
    let mut g = Gathered {
        setting,
        setting_from,
        config_quota: bundle.quota,
        cgroup_quota,
        cgroups,
        config_cpus: bundle.cpus.clone(),
        mask,
        usable: 0,
        gpus,
        topology,
        notes,
    };
    g.usable = cpuplan::usable_cpus(&g.mask, g.quota());
    Ok(g)
}
