//! At CreateContainer, once the plan is written: a container with two GPUs or more whose
//! `rank_placement` is `auto` is registered with the rank watcher ([`crate::nri::ranks`]),
//! with each worker's CPUs (its GPU's local CPUs within the container's).

use nri_plugin::api::Container;

use super::{ContainerId, Planner};
use crate::config::RankPlacement;
use crate::decide::rank::{rank_placement, worker_cpus, GpuId};
use crate::decide::Decision;
use crate::nri::ranks::{leaves_of, Entry};
use crate::read::spec::RANK_PLACEMENT_ANNOTATION;
use crate::read::Inputs;

impl Planner {
    /// Registers container `id` (`c`) for rank placement where it applies (see the module).
    pub(super) fn place_ranks(
        &self,
        id: &ContainerId,
        c: &Container,
        inputs: &Inputs,
        decision: &Decision,
    ) {
        let asked = inputs
            .spec
            .annotations
            .get(RANK_PLACEMENT_ANNOTATION)
            .map(String::as_str);
        let (setting, note) = rank_placement(self.config.rank_placement, asked);
        if let Some(note) = note {
            log::warn!("container {id}: {note}");
        }
        if setting == RankPlacement::Off || inputs.gpus.len() < 2 {
            return;
        }
        let cpus = decision
            .cpuset
            .clone()
            .unwrap_or_else(|| inputs.mask.clone());
        let workers = worker_cpus(&inputs.gpus, &inputs.topology.gpus, &cpus);
        if workers.iter().all(Option::is_none) {
            log::info!(
                "container {id}: rank placement: no worker's GPU has CPUs of its own within {cpus}: every process keeps them"
            );
            return;
        }
        let leaves = leaves_of(c.linux.as_ref().map_or("", |l| l.cgroups_path.as_str()));
        if leaves.is_empty() {
            log::info!("container {id}: rank placement: the runtime gives no cgroups path: no process is placed");
            return;
        }
        let uuids = self
            .host
            .inventory()
            .map(|inv| inv.nvidia.clone())
            .unwrap_or_default();
        let gpus: Vec<GpuId> = inputs
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
            .add(Entry::new(id.as_str(), gpus, workers, leaves));
    }
}
