//! `step_thread_core auto`: each worker on the core at its GPU's rank among the GPUs of its NUMA node.

use std::collections::HashMap;

use super::cores::{Cores, Ends};
use super::{Ask, CpuPlan, CpuPlanError, Setting, StepCpus};
use crate::cpuset::CpuSet;
use crate::gpus::{is_not_found, HostGpu};

/// A NUMA node as a log line names it.
fn node_name(node: Option<u32>) -> String {
    match node {
        Some(n) => format!("node {n}"),
        None => "no NUMA node".to_string(),
    }
}

/// How a GPU came to its placement node, for its worker's line: empty where its own node has
/// its CPUs, else the node its memory is on.
fn placed_from(gpu: &HostGpu) -> String {
    match (gpu.node, gpu.placement_node()) {
        (Some(memory), Some(on)) if memory != on => format!(" (nearest to its node {memory})"),
        _ => String::new(),
    }
}

/// Where one worker's GPU sits: its rank among its node's GPUs and the cores it picks from.
struct Placement<'g> {
    gpu: &'g HostGpu,
    rank: usize,
    peers: usize,
    cores: Vec<CpuSet>,
}

/// The `auto` plan for `addresses` (at least one worker); pins nothing, saying why, where the host can't place every worker.
pub(crate) fn auto_plan(ask: &Ask) -> Result<CpuPlan, CpuPlanError> {
    let Ask {
        addresses,
        mask,
        usable,
        topo,
    } = *ask;
    let n = addresses.len();
    let nothing = |why: String| {
        Ok(ask.unpinned(
            Setting::Auto,
            format!("step_thread_core auto: {why}; nothing pinned"),
        ))
    };

    let addressed: Vec<(usize, &str)> = addresses
        .iter()
        .enumerate()
        .filter_map(|(i, a)| a.as_deref().map(|a| (i, a)))
        .collect();
    let Some(&(_, like)) = addressed.first() else {
        return nothing("no worker has a GPU address".into());
    };
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(addressed.len());
    for &(i, addr) in &addressed {
        if let Some(j) = seen.insert(addr, i) {
            return nothing(format!("workers {j} and {i} share gpu {addr}"));
        }
    }

    let gpus = match topo.host_gpus(like) {
        Ok(gpus) => gpus,
        Err(e) if is_not_found(&e) => return nothing(format!("gpu {like} is not in sysfs ({e})")),
        Err(e) => return Err(e.into()),
    };

    let mut cores = Cores::new(topo);
    let mut placed: Vec<(usize, Placement)> = Vec::with_capacity(addressed.len());
    for &(i, addr) in &addressed {
        let Some(gpu) = gpus.iter().find(|g| g.address == addr) else {
            return nothing(format!(
                "worker {i}'s gpu {addr} is not among the host's {} GPUs like {like}",
                gpus.len()
            ));
        };
        if let Some(why) = gpu.unplaced_why() {
            return nothing(format!("gpu {addr}: {why}"));
        }
        let home = gpu.placement_node();
        let mut rank = 0;
        let mut peers = 0;
        for g in gpus.iter().filter(|g| g.placement_node() == home) {
            if g.address == addr {
                rank = peers;
            }
            peers += 1;
        }
        let Some(local) = gpu.placement_cpus() else {
            return nothing(format!("gpu {addr} has no local CPUs in sysfs"));
        };
        let (bottom, top) = match cores.ends(&local.intersection(mask), peers)? {
            Ends::Enough { bottom, top } => (bottom, top),
            Ends::Short(count) => {
                return nothing(format!(
                    "{} has {count} cores in the mask for gpu {addr}'s {peers} GPUs, fewer than 2 per GPU",
                    node_name(home)
                ))
            }
        };
        let wanted = vec![bottom[rank].clone(), top[rank].clone()];
        placed.push((
            i,
            Placement {
                gpu,
                rank,
                peers,
                cores: wanted,
            },
        ));
    }

    let mut workers: Vec<Option<StepCpus>> = vec![None; n];
    let mut taken = CpuSet::new();
    let place = |p: &Placement, from: &str| {
        format!(
            "gpu {} rank {} of {} on {}{}: core {} from the {from}",
            p.gpu.address,
            p.rank,
            p.peers,
            node_name(p.gpu.placement_node()),
            placed_from(p.gpu),
            p.rank
        )
    };
    for (i, p) in &placed {
        let cpus = &p.cores[0];
        if taken.intersects(cpus) {
            return nothing(format!(
                "worker {i}'s core {cpus} overlaps another worker's (sysfs places GPUs inconsistently)"
            ));
        }
        taken.extend_from(cpus);
        workers[*i] = Some(StepCpus {
            cpus: cpus.clone(),
            why: place(p, "bottom"),
        });
    }
    let (first, p) = &placed[0];
    let top = &p.cores[1];
    if taken.intersects(top) {
        return nothing(format!(
            "the API server's core {top} overlaps a worker's (sysfs places GPUs inconsistently)"
        ));
    }
    taken.extend_from(top);
    if mask.is_subset(&taken) {
        return nothing(format!(
            "pinning {} would leave no CPU of the mask {mask} unpinned",
            taken
        ));
    }
    let result = StepCpus {
        cpus: top.clone(),
        why: format!("worker {first}'s {}", place(p, "top")),
    };
    let mut nodes: Vec<Option<u32>> = placed.iter().map(|(_, p)| p.gpu.placement_node()).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let nodes: Vec<String> = nodes.into_iter().map(node_name).collect();
    let mut why = format!(
        "step_thread_core auto: {} of {n} workers pinned by GPU rank on {} ({} host GPUs like {like}), API server on cpus {top}",
        placed.len(),
        nodes.join(", "),
        gpus.len()
    );
    // A GPU's node without CPUs and how a tie was settled, once each, on the same line.
    let mut notes: Vec<String> = Vec::new();
    for (_, p) in &placed {
        if let (Some(memory), Some(on)) = (p.gpu.node, p.gpu.placement_node()) {
            if memory != on {
                let mut note = format!(
                    "gpu {}'s node {memory} has no CPUs: node {on}",
                    p.gpu.address
                );
                if let Some(tie) = p.gpu.placement_note() {
                    note.push_str(&format!(" ({tie})"));
                }
                notes.push(note);
            }
        }
    }
    if !notes.is_empty() {
        why.push_str("; ");
        why.push_str(&notes.join("; "));
    }
    Ok(CpuPlan {
        setting: Setting::Auto,
        mask: mask.clone(),
        usable,
        devices: addresses.to_vec(),
        workers,
        result: Some(result),
        split: Default::default(),
        why,
    })
}
