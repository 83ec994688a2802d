//! UpdateContainer: kubelet changes a running container's CPUs (its CPU manager's static policy
//! sets a new shared pool, an in-place resize a new quota), and the plugin plans again.
//!
//! kubelet's new limits are the request's `linux_resources`, where an empty `cpus` or a zero
//! quota means "unchanged": the plugin then takes kubelet's earlier value from its record (the
//! request's `container` holds the container's current resources, that is cpuplan's narrowed
//! cpuset, never kubelet's). The `numa` rule runs again inside kubelet's set only, over the pod's
//! cgroup (the container's own holds the old narrowing and quota); the decision is decide's
//! (`Ask::Update`: a set no larger than the quota's usable CPUs is exclusive and stays as
//! kubelet gives it, and the claims are those taken at creation). The plan files are rewritten
//! whole with the next generation, the record first; claims never change. The answer narrows the
//! update where the plan narrows (the requested resources, with cpuplan's cpuset), and is empty
//! where kubelet's update is to pass as it is. A problem is judged by the one verdict: under
//! `allow` the empty answer (kubelet's update passes through) and a log line, under `deny` the
//! error that fails kubelet's call.

use nri_plugin::api::{
    Container, ContainerUpdate, LinuxContainerUpdate, LinuxCpu, LinuxResources, OptionalInt64,
    OptionalUInt64, PodSandbox, UpdateContainerResponse,
};

use super::{ContainerId, Ctr, Live, Planner, Record, Refused};
use crate::decide::{verdict, Ask, Course, Created, Problem};
use crate::edit::SpecEdit;
use crate::logging::escape;
use crate::nri::metrics::{labels_of, Outcome, Request};
use crate::read::read;

use super::super::spec::container_spec;

/// kubelet's CPU limits in `resources` as `(cpus, quota, period)`, each `None` where unset (an
/// empty list, an absent or zero quota, an absent or zero period: CRI's "unchanged").
pub(super) fn kubelet_cpu(
    resources: Option<&LinuxResources>,
) -> (Option<String>, Option<i64>, Option<u64>) {
    let Some(cpu) = resources.and_then(|r| r.cpu.as_ref()) else {
        return (None, None, None);
    };
    let cpus = Some(cpu.cpus.trim().to_string()).filter(|c| !c.is_empty());
    let quota = cpu.quota.as_ref().map(|q| q.value).filter(|q| *q != 0);
    let period = cpu.period.as_ref().map(|p| p.value).filter(|p| *p != 0);
    (cpus, quota, period)
}

/// The cgroups path of the cgroup above `path` (a container's: its pod's), in the form `path`
/// has: `/a/b/c` → `/a/b`; systemd's `slice:prefix:name` → the slice, as `parent:` and the
/// slice (`a-b.slice:cpuplan:a-b-c.slice`... for `a-b-c.slice:cri:x`); `None` for one at the top.
pub(super) fn parent_cgroups_path(path: &str) -> Option<String> {
    if path.starts_with('/') || !path.contains(':') {
        let trimmed = path.trim_end_matches('/');
        let (parent, _) = trimmed.rsplit_once('/')?;
        return Some(if parent.is_empty() { "/" } else { parent }.to_string());
    }
    let slice = path.split(':').next().filter(|s| !s.is_empty())?;
    let base = slice.strip_suffix(".slice")?;
    let parent = match base.rsplit_once('-') {
        Some((p, _)) => format!("{p}.slice"),
        None => "-.slice".to_string(),
    };
    Some(format!("{parent}::{slice}"))
}

impl Planner {
    /// A planning problem at an update: the one verdict; under `allow` kubelet's update passes.
    fn update_problem(
        &self,
        id: &str,
        problem: Problem,
    ) -> Result<UpdateContainerResponse, Refused> {
        self.metrics.problem(problem.cause());
        self.metrics.outcome(Request::Update, Outcome::Problem);
        log::warn!("container {id}: update: planning problem, kubelet's update passes through unchanged: {problem}");
        verdict(self.config.on_error, &problem)
            .map(|()| UpdateContainerResponse::default())
            .map_err(|r| Refused::Update {
                id: id.to_string(),
                problem: r.problem,
            })
    }

    /// Plans container `c` of `pod` again for kubelet's `resources` (see the module's text).
    pub(super) fn update(
        &self,
        pod: &PodSandbox,
        c: &Container,
        resources: Option<&LinuxResources>,
    ) -> Result<UpdateContainerResponse, Refused> {
        let id = match ContainerId::parse(&c.id) {
            Ok(id) => id,
            Err(e) => return self.update_problem(&escape(&c.id), Problem::id(e)),
        };
        let Some(record) = self.dirs.record(&id) else {
            log::debug!("container {id}: update: not planned by this plugin, passed through");
            return Ok(UpdateContainerResponse::default());
        };
        let id_text = id.to_string();
        let (new_cpus, new_quota, new_period) = kubelet_cpu(resources);
        let cpus = new_cpus.or_else(|| record.cpus.clone());
        let (quota, period) = match new_quota {
            Some(q) => (Some(q), new_period),
            None => (record.quota, new_period.or(record.period)),
        };
        // The spec as kubelet now asks it, over the pod's cgroup (the container's own holds
        // the old narrowing and quota).
        let mut asked = c.clone();
        let linux = asked.linux.get_or_insert_with(Default::default);
        linux.cgroups_path = parent_cgroups_path(&linux.cgroups_path).unwrap_or_default();
        linux.resources = Some(LinuxResources {
            cpu: Some(LinuxCpu {
                cpus: cpus.clone().unwrap_or_default(),
                quota: quota.map(|value| OptionalInt64 { value }),
                period: period.map(|value| OptionalUInt64 { value }),
                ..LinuxCpu::default()
            }),
            ..LinuxResources::default()
        });
        let spec = match container_spec(pod, &asked) {
            Ok(s) => s,
            Err(e) => return self.update_problem(&id_text, Problem::spec(e)),
        };
        let container = Ctr {
            id: c.id.clone(),
            pid: None,
            bundle: None,
        };
        let inputs = read(&self.host, &self.config, container, spec, &Live::default());
        let kubelet_set = inputs.spec.cpus.clone();
        let created = Created {
            claims: record.claims.clone(),
            held: record.held.clone(),
        };
        let decision = Course::new(&inputs, &self.config, Ask::Update(created)).into_decision();
        if let Some(p) = decision.problem {
            return self.update_problem(&id_text, p);
        }
        let generation = record.generation.max(1) + 1;
        let placement = self.placement(&id, c, &inputs, &decision);
        let edit = SpecEdit::at_generation(&inputs, &decision, &self.config, generation)
            .with_worker_placement(placement.as_ref().map(|p| p.workers.clone()));
        let record = Record {
            cpus: cpus.clone(),
            quota,
            period,
            generation,
            ..record
        };
        if let Err(e) = self.dirs.write(&id, &edit, &record) {
            return self.update_problem(&id_text, Problem::files(e));
        }
        self.place_ranks(&id, placement);
        self.metrics
            .outcome(Request::Update, labels_of(&decision).0);
        log::info!(
            "container {id}: updated (kubelet's cpus {}, quota {}): plan files of generation {generation}: {}",
            cpus.as_deref().unwrap_or("none"),
            inputs.spec.quota.map_or_else(|| "none".to_string(), |q| q.to_string()),
            decision.summary(&inputs)
        );
        let Some(narrowed) = edit.cpus.filter(|n| Some(n) != kubelet_set.as_ref()) else {
            return Ok(UpdateContainerResponse::default());
        };
        // kubelet's update, with cpuplan's cpuset in place of its set.
        let mut resources = resources.cloned().unwrap_or_default();
        resources.cpu_mut().cpus = narrowed.to_string();
        Ok(UpdateContainerResponse {
            update: vec![ContainerUpdate {
                container_id: c.id.clone(),
                linux: Some(LinuxContainerUpdate {
                    resources: Some(resources),
                }),
                ignore_failure: false,
            }],
            evict: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_s_unset_values_are_none() {
        let r = LinuxResources {
            cpu: Some(LinuxCpu {
                cpus: " 0-1 ".into(),
                quota: Some(OptionalInt64 { value: 0 }),
                period: Some(OptionalUInt64 { value: 0 }),
                ..LinuxCpu::default()
            }),
            ..LinuxResources::default()
        };
        assert_eq!(kubelet_cpu(Some(&r)), (Some("0-1".into()), None, None));
        assert_eq!(kubelet_cpu(None), (None, None, None));
        let r = LinuxResources {
            cpu: Some(LinuxCpu {
                quota: Some(OptionalInt64 { value: 200_000 }),
                period: Some(OptionalUInt64 { value: 100_000 }),
                ..LinuxCpu::default()
            }),
            ..LinuxResources::default()
        };
        assert_eq!(kubelet_cpu(Some(&r)), (None, Some(200_000), Some(100_000)));
    }

    #[test]
    fn the_parent_cgroup_in_the_path_s_own_form() {
        for (path, parent) in [
            (
                "/kubepods/burstable/pod1/c1",
                Some("/kubepods/burstable/pod1"),
            ),
            ("/c1", Some("/")),
            ("kubepods/pod1/c1", Some("kubepods/pod1")),
            (
                "kubepods-burstable-pod1.slice:cri-containerd:c1",
                Some("kubepods-burstable.slice::kubepods-burstable-pod1.slice"),
            ),
            ("kubepods.slice:cri:c1", Some("-.slice::kubepods.slice")),
            ("", None),
            ("c1", None),
        ] {
            assert_eq!(parent_cgroups_path(path).as_deref(), parent, "{path}");
        }
        // The systemd form's parent names the slice's own directory.
        assert_eq!(
            cpuplan::cgroups_path_names("kubepods-burstable.slice::kubepods-burstable-pod1.slice")
                .last()
                .map(String::as_str),
            Some("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice")
        );
    }
}
