//! Registering a container with the rank watcher ([`crate::nri::ranks`]): at CreateContainer
//! and UpdateContainer once the plan is written, and at Synchronize for the containers that
//! run (from the `plan.json` the plugin wrote for them: a restarted plugin places their
//! processes started from then on). A container with two GPUs or more whose `rank_placement`
//! is `auto` is registered with each worker's CPUs (its GPU's local CPUs within the
//! container's).

use cpuplan::{CpuSet, HostGpu};
use nri_plugin::api::{Container, PodSandbox};
use serde::Deserialize;

use super::{ContainerId, Planner};
use crate::config::RankPlacement;
use crate::decide::rank::{rank_placement, worker_cpus, GpuId};
use crate::decide::Decision;
use crate::edit::PLAN_JSON;
use crate::nri::ranks::{leaves_of, Entry};
use crate::read::gpus::Gpu;
use crate::read::spec::RANK_PLACEMENT_ANNOTATION;
use crate::read::Inputs;

/// The members of a `plan.json` the plugin wrote that registering reads again.
#[derive(Debug, Deserialize)]
struct Written {
    inputs: WrittenInputs,
}

#[derive(Debug, Deserialize)]
struct WrittenInputs {
    mask: CpuSet,
    cpuset: Option<CpuSet>,
    gpus: Vec<String>,
}

impl Planner {
    /// Registers container `id` (`c`) as planned now (see the module).
    pub(super) fn place_ranks(
        &self,
        id: &ContainerId,
        c: &Container,
        inputs: &Inputs,
        decision: &Decision,
    ) {
        self.ranks.remove(id.as_str());
        let asked = inputs
            .spec
            .annotations
            .get(RANK_PLACEMENT_ANNOTATION)
            .map(String::as_str);
        let cpus = decision
            .cpuset
            .clone()
            .unwrap_or_else(|| inputs.mask.clone());
        self.register(
            id,
            c,
            asked,
            &inputs.gpus,
            &inputs.topology.gpus,
            cpus,
            true,
        );
    }

    /// Registers running container `id` (`c` of `pod`, as Synchronize lists them) again from its
    /// `plan.json`, quietly: no line but where it is registered.
    pub(super) fn restore_ranks(&self, id: &ContainerId, c: &Container, pod: Option<&PodSandbox>) {
        let path = self.dirs.dir(id).join(PLAN_JSON);
        let Some(written) = cpuplan::read_file(&path, 1 << 20)
            .ok()
            .and_then(|b| serde_json::from_slice::<Written>(&b).ok())
        else {
            return;
        };
        let Some(like) = written.inputs.gpus.first() else {
            return;
        };
        let host = match self.host.inventory().and_then(|inv| inv.host_gpus(like)) {
            Some(h) => h,
            None => cpuplan::host_gpus(&self.config.topology_root, like).unwrap_or_default(),
        };
        let gpus: Vec<Gpu> = written
            .inputs
            .gpus
            .iter()
            .map(|a| Gpu {
                address: a.clone(),
                sources: Vec::new(),
            })
            .collect();
        // The container's annotation wins over its pod's, as at creation.
        let asked = c
            .annotations
            .get(RANK_PLACEMENT_ANNOTATION)
            .or_else(|| pod.and_then(|p| p.annotations.get(RANK_PLACEMENT_ANNOTATION)))
            .map(String::as_str);
        let cpus = written.inputs.cpuset.unwrap_or(written.inputs.mask);
        self.register(id, c, asked, &gpus, &host, cpus, false);
    }

    /// Registers `id` with `gpus` (plan order) placed over `host`'s GPUs within `cpus`, where
    /// the setting (`asked` by the annotation, else the config's) is `auto`; `say` logs why not.
    #[allow(clippy::too_many_arguments)]
    fn register(
        &self,
        id: &ContainerId,
        c: &Container,
        asked: Option<&str>,
        gpus: &[Gpu],
        host: &[HostGpu],
        cpus: CpuSet,
        say: bool,
    ) {
        let (setting, note) = rank_placement(self.config.rank_placement, asked);
        if let Some(note) = note.filter(|_| say) {
            log::warn!("container {id}: {note}");
        }
        if setting == RankPlacement::Off || gpus.len() < 2 {
            return;
        }
        let workers = worker_cpus(gpus, host, &cpus);
        if workers.iter().all(Option::is_none) {
            if say {
                log::info!(
                    "container {id}: rank placement: no worker's GPU has CPUs of its own within {cpus}: every process keeps them"
                );
            }
            return;
        }
        let leaves = leaves_of(c.linux.as_ref().map_or("", |l| l.cgroups_path.as_str()));
        if leaves.is_empty() {
            log::info!(
                "container {id}: rank placement: the runtime gives no cgroups path: no process is placed"
            );
            return;
        }
        let uuids = self
            .host
            .inventory()
            .map(|inv| inv.nvidia.clone())
            .unwrap_or_default();
        let ids: Vec<GpuId> = gpus
            .iter()
            .map(|g| GpuId {
                address: g.address.clone(),
                uuid: uuids
                    .iter()
                    .find(|n| n.address == g.address)
                    .and_then(|n| n.uuid.clone()),
            })
            .collect();
        let shown: Vec<String> = workers
            .iter()
            .enumerate()
            .map(|(w, c)| match c {
                Some(c) => format!("worker {w} on {c}"),
                None => format!("worker {w} keeps {cpus}"),
            })
            .collect();
        log::info!("container {id}: rank placement: {}", shown.join(", "));
        self.ranks
            .add(Entry::new(id.as_str(), ids, workers, leaves));
    }
}
