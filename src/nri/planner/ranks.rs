//! Registering a container with the rank watcher ([`crate::nri::ranks`]): at CreateContainer
//! and UpdateContainer once the plan is written, and at Synchronize for the containers that
//! run (from the `plan.json` the plugin wrote for them: a restarted plugin places their
//! processes started from then on). A container with two GPUs or more whose `rank_placement`
//! is `auto` is registered with each worker's CPUs (its GPU's local CPUs within the
//! container's), the same CPUs its `plan.json` lists ([`Placement`], decided once for both).

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

/// Where a container's worker processes are placed, decided once for both the `plan.json` it
/// is given ([`crate::edit::PlanDoc::worker_placement`]) and the watcher.
#[derive(Debug)]
pub(super) struct Placement {
    /// Its GPUs in plan order.
    gpus: Vec<Gpu>,
    /// Each worker's CPUs: its GPU's local CPUs within the container's (`None`: not narrowed).
    pub(super) workers: Vec<Option<CpuSet>>,
    /// The container's CPUs.
    cpus: CpuSet,
    /// The cgroup leaves that are the container's.
    leaves: Vec<String>,
}

impl Planner {
    /// Where container `id`'s (`c`) worker processes are placed as planned now (see the
    /// module); `None`, with the line that says why, where none is.
    pub(super) fn placement(
        &self,
        id: &ContainerId,
        c: &Container,
        inputs: &Inputs,
        decision: &Decision,
    ) -> Option<Placement> {
        let asked = inputs
            .spec
            .annotations
            .get(RANK_PLACEMENT_ANNOTATION)
            .map(String::as_str);
        let cpus = decision
            .cpuset
            .clone()
            .unwrap_or_else(|| inputs.mask.clone());
        self.placement_of(
            id,
            c,
            asked,
            &inputs.gpus,
            &inputs.topology.gpus,
            cpus,
            true,
        )
    }

    /// Registers container `id` with the watcher at `placement`, or no longer where `None`.
    pub(super) fn place_ranks(&self, id: &ContainerId, placement: Option<Placement>) {
        self.ranks.remove(id.as_str());
        if let Some(p) = placement {
            self.register(id, p);
        }
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
        let placement = self.placement_of(id, c, asked, &gpus, &host, cpus, false);
        self.place_ranks(id, placement);
    }

    /// Where `id`'s `gpus` (plan order) are placed over `host`'s GPUs within `cpus`, where the
    /// setting (`asked` by the annotation, else the config's) is `auto`; `say` logs why not.
    #[allow(clippy::too_many_arguments)]
    fn placement_of(
        &self,
        id: &ContainerId,
        c: &Container,
        asked: Option<&str>,
        gpus: &[Gpu],
        host: &[HostGpu],
        cpus: CpuSet,
        say: bool,
    ) -> Option<Placement> {
        let (setting, note) = rank_placement(self.config.rank_placement, asked);
        if let Some(note) = note.filter(|_| say) {
            log::warn!("container {id}: {note}");
        }
        if setting == RankPlacement::Off || gpus.len() < 2 {
            return None;
        }
        let workers = worker_cpus(gpus, host, &cpus);
        if workers.iter().all(Option::is_none) {
            if say {
                log::info!(
                    "container {id}: rank placement: no worker's GPU has CPUs of its own within {cpus}: every process keeps them"
                );
            }
            return None;
        }
        let leaves = leaves_of(c.linux.as_ref().map_or("", |l| l.cgroups_path.as_str()));
        if leaves.is_empty() {
            log::info!(
                "container {id}: rank placement: the runtime gives no cgroups path: no process is placed"
            );
            return None;
        }
        Some(Placement {
            gpus: gpus.to_vec(),
            workers,
            cpus,
            leaves,
        })
    }

    /// Registers `id` with the watcher at `p`.
    fn register(&self, id: &ContainerId, p: Placement) {
        let uuids = self
            .host
            .inventory()
            .map(|inv| inv.nvidia.clone())
            .unwrap_or_default();
        let ids: Vec<GpuId> = p
            .gpus
            .iter()
            .map(|g| GpuId {
                address: g.address.clone(),
                uuid: uuids
                    .iter()
                    .find(|n| n.address == g.address)
                    .and_then(|n| n.uuid.clone()),
            })
            .collect();
        let shown: Vec<String> = p
            .workers
            .iter()
            .enumerate()
            .map(|(w, c)| match c {
                Some(c) => format!("worker {w} on {c}"),
                None => format!("worker {w} keeps {}", p.cpus),
            })
            .collect();
        log::info!("container {id}: rank placement: {}", shown.join(", "));
        self.ranks
            .add(Entry::new(id.as_str(), ids, p.workers, p.leaves));
    }
}
