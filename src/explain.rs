//! `explain`: what the hook would do for a bundle on this host, with no pid, writing no plan,
//! cpuset or claim (only the host inventory, as the hook would);
//! and, for a running container, whether the plan it was given is still its cgroup's.

use std::path::Path;

use crate::config::HookConfig;
use crate::decide::stale::{drifts, summary, Drift, Now, Planned};
use crate::decide::{Ask, Course, Decision};
use crate::edit::{SpecEdit, NRI_PLAN_DIR, PLAN_JSON};
use crate::logging::escape;
use crate::read::bundle::{load_bundle, BundleError};
use crate::read::host::Host;
use crate::read::running::{read_running, Running, RunningError};
use crate::read::{read, Container, Live};
use crate::render::{render, render_with};

/// A bundle read, decided and edited as the hook would, without a pid.
#[derive(Debug)]
pub struct Explained {
    /// What was decided.
    pub decision: Decision,
    /// What the hook would write and set.
    pub edit: SpecEdit,
    /// Whether the host inventory was used, and how it came (one line).
    pub inventory: String,
    /// The container's GPUs as the host lists them (with the node each was placed on).
    pub gpus: Vec<cpuplan::HostGpu>,
}

/// What the hook would do for the bundle at `bundle_dir` (its `config.json`) with `config`: the
/// live cgroup and the GPU claims are skipped, and the notes say so. A bundle that cannot be
/// read is an error; a planning problem gives the `off` plan the hook would write, carrying it.
/// `inventory`: take the host-wide facts from the stored host inventory, as the hook does
/// (false: read the host afresh).
pub fn explain(
    config: &HookConfig,
    bundle_dir: &Path,
    inventory: bool,
) -> Result<(Explained, Host), BundleError> {
    let spec = load_bundle(bundle_dir)?;
    let container = Container {
        id: "(explain)".into(),
        pid: None,
        bundle: Some(bundle_dir.to_path_buf()),
    };
    let (host, used) = match inventory {
        true => {
            let (host, got) = Host::stored_read_only(config);
            (host, got.describe())
        }
        false => (
            Host::of(config),
            "no host inventory (--no-inventory): the host was read afresh".to_string(),
        ),
    };
    let inputs = read(&host, config, container, spec, &Live::default());
    let decision = Course::new(&inputs, config, Ask::Explain).into_decision();
    let edit = SpecEdit::new(&inputs, &decision, config);
    let gpus = inputs
        .topology
        .gpus
        .iter()
        .filter(|h| inputs.gpus.iter().any(|g| g.address == h.address))
        .cloned()
        .collect();
    let explained = Explained {
        decision,
        edit,
        inventory: used,
        gpus,
    };
    Ok((explained, host))
}

impl Explained {
    /// The plan drawn over the host's NUMA nodes, with the notes and the why, then the
    /// environment the container gets.
    pub fn text(&self, host: &Host) -> cpuplan::Result<String> {
        let mut s = render_with(
            &self.decision.plan,
            &host.nodes()?,
            &self.decision.notes,
            &self.gpus,
        );
        s.push_str(&format!("inventory: {}\n", escape(&self.inventory)));
        s.push_str(&self.environment());
        Ok(s)
    }

    /// The environment block: each variable the container gets, as `KEY=VALUE` (escaped: a
    /// value such as `CPUPLAN_WHY` may quote what the container supplied).
    pub fn environment(&self) -> String {
        let mut s = format!(
            "environment: the container gets (set by the NRI plugin and podman's precreate where \
             the image and the user set none; the hook writes them to {}/plan.env):\n",
            escape(&self.edit.dir.display().to_string())
        );
        for (k, v) in &self.edit.env {
            s.push_str(&format!("  {}={}\n", escape(k), escape(v)));
        }
        s
    }
}

/// A running container's plan against its cgroup now.
#[derive(Debug, Clone)]
pub struct RunningCheck {
    /// What was read of it.
    pub running: Running,
    /// How its cgroup differs from its plan (empty: the plan is current).
    pub drifts: Vec<Drift>,
}

/// The running container whose init is `pid` (in this command's pid namespace): its plan (the
/// `plan.json` in its plan directory: the hook's `config.dir`, else the NRI plugin's mount
/// [`NRI_PLAN_DIR`]; the first one's error where neither reads) against its cgroup's CPUs and
/// quota now.
pub fn check_running(config: &HookConfig, pid: u32) -> Result<RunningCheck, RunningError> {
    let host = Host::of(config);
    let path = config.dir.join(PLAN_JSON);
    let running = match read_running(&host, pid, &path) {
        Err(first @ RunningError::Plan { .. }) => {
            read_running(&host, pid, &Path::new(NRI_PLAN_DIR).join(PLAN_JSON)).map_err(|_| first)
        }
        other => other,
    }?;
    let planned = Planned {
        mask: running.plan.file.mask.clone(),
        quota: running.plan.inputs.as_ref().map(|i| i.quota),
    };
    let now = Now {
        cpus: running.cpus.clone(),
        quota: running.quota,
    };
    let drifts = drifts(&planned, &now);
    Ok(RunningCheck { running, drifts })
}

impl RunningCheck {
    /// `stale: cpuset 0-1 (plan 1)`, or `current`.
    pub fn summary(&self) -> String {
        summary(&self.drifts)
    }

    /// The plan drawn over the host's NUMA nodes, then the cgroup now and the verdict.
    pub fn text(&self, host: &Host) -> cpuplan::Result<String> {
        let plan = &self.running.plan;
        let mut s = render(&plan.file.to_plan(), &host.nodes()?, &[]);
        let quota = |q: Option<f64>| q.map_or_else(|| "none".into(), |q| format!("{q} CPUs"));
        s.push_str(&format!(
            "running: pid {}, container {}, plan generation {}\n  cgroup now: cpuset {}, quota {}\n",
            self.running.pid,
            escape(&plan.container),
            plan.generation,
            self.running.cpus,
            quota(self.running.quota),
        ));
        s.push_str(&format!("  plan: {}", escape(&self.summary())));
        if !self.drifts.is_empty() {
            s.push_str(
                " (the cgroup changed after the hook wrote the plan: kubelet's CPU manager or a \
                 resize; the hook route cannot follow it, the NRI plugin does)",
            );
        }
        s.push('\n');
        Ok(s)
    }

    /// The JSON form: `{pid, stale, drifts, now: {cpuset, quota}, plan}` (`plan` the file as it is).
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "pid": self.running.pid,
            "stale": !self.drifts.is_empty(),
            "drifts": self.drifts,
            "now": {"cpuset": self.running.cpus, "quota": self.running.quota},
            "plan": self.running.plan_json,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_plan_is_read_at_the_nri_plugin_s_mount_where_the_hook_s_is_missing() {
        let t = tempfile::tempdir().unwrap();
        crate::read::running::tests::fake(t.path(), "0-1", 200000);
        let root = t.path().join("root");
        let config = HookConfig {
            root: root.clone(),
            topology_root: root.clone(),
            ..HookConfig::default()
        };
        let inside = root.join("proc/42/root");
        std::fs::create_dir_all(inside.join("dev/cpuplan")).unwrap();
        let (hook_s, plugin_s) = (
            inside.join("run/cpuplan/plan.json"),
            inside.join("dev/cpuplan/plan.json"),
        );
        std::fs::rename(&hook_s, &plugin_s).unwrap();
        let check = check_running(&config, 42).unwrap();
        assert_eq!(check.running.plan.file.mask.to_string(), "1");
        std::fs::remove_file(&plugin_s).unwrap();
        let e = check_running(&config, 42).unwrap_err().to_string();
        assert!(e.contains("/run/cpuplan/plan.json"), "the hook's: {e}");
    }
}
