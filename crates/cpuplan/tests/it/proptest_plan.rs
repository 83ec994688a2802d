//! Properties: cpu lists round-trip, and every plan keeps its invariants on random hosts, masks, workers and settings.

use cpuplan::{
    deployment_plan_on, format_cpu_list, parse_cpu_list, CpuPlanError, CpuSet, HostGpu, Setting,
    StaticTopology, MAX_CPU,
};
use proptest::prelude::*;

proptest! {
    #[test]
    fn cpu_lists_round_trip(
        cpus in prop::collection::vec(0..=MAX_CPU, 0..300),
        runs in prop::collection::vec((0..=MAX_CPU, 0usize..200), 0..8),
    ) {
        let mut set: CpuSet = cpus.into_iter().collect();
        for (lo, len) in runs {
            for c in lo..=(lo + len).min(MAX_CPU) {
                set.insert(c);
            }
        }
        let text = format_cpu_list(&set);
        let back = parse_cpu_list(&text).unwrap();
        prop_assert_eq!(&back, &set);
        prop_assert_eq!(format_cpu_list(&back), text);
    }
}

/// A host: `nodes` NUMA nodes of `cores` cores with `smt` threads each, numbered as Linux does
/// (thread t of core c is CPU c + t * all cores), and `gpus_per_node` GPUs on each node.
#[derive(Debug, Clone)]
struct Host {
    topo: StaticTopology,
    cpus: usize,
}

fn host(
    nodes: usize,
    cores: usize,
    smt: usize,
    gpus_per_node: usize,
    numa: bool,
    no_local: Vec<bool>,
) -> Host {
    let all_cores = nodes * cores;
    let cpus = all_cores * smt;
    let siblings = (0..cpus)
        .map(|cpu| {
            let core = cpu % all_cores;
            (0..smt).map(|t| core + t * all_cores).collect()
        })
        .collect();
    let mut gpus = Vec::new();
    for n in 0..nodes {
        let local: CpuSet = (0..cpus).filter(|c| (c % all_cores) / cores == n).collect();
        for g in 0..gpus_per_node {
            let i = gpus.len();
            gpus.push(HostGpu {
                address: format!("0000:{:02x}:00.0", n * 16 + g),
                node: if numa { Some(n as u32) } else { None },
                local: if no_local.get(i).copied().unwrap_or(false) {
                    None
                } else {
                    Some(local.clone())
                },
                cpu_node: None,
            });
        }
    }
    Host {
        topo: StaticTopology { siblings, gpus },
        cpus,
    }
}

fn host_strategy() -> impl Strategy<Value = Host> {
    (
        1usize..=4,
        1usize..=12,
        1usize..=4,
        0usize..=4,
        any::<bool>(),
        prop::collection::vec(prop::bool::weighted(0.1), 16),
    )
        .prop_map(|(nodes, cores, smt, gpus, numa, no_local)| {
            // Without NUMA nodes every GPU is a peer of every other: keep it to one node's worth.
            let nodes = if numa { nodes } else { 1 };
            host(nodes, cores, smt, gpus, numa, no_local)
        })
}

fn case() -> impl Strategy<Value = (Host, Vec<bool>, Vec<Option<usize>>, Setting)> {
    host_strategy().prop_flat_map(|h| {
        let cpus = h.cpus;
        let g = h.topo.gpus.len();
        let worker = prop_oneof![
            Just(None),
            (0..g.max(1) + 1).prop_map(Some), // index g (or past): an address the host lacks
        ];
        let setting = prop_oneof![
            Just(Setting::Off),
            Just(Setting::Auto),
            Just(Setting::Auto),
            (0..cpus + 2).prop_map(Setting::Cpu),
        ];
        (
            Just(h),
            prop::collection::vec(prop::bool::weighted(0.8), cpus),
            prop::collection::vec(worker, 0..7),
            setting,
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn plans_keep_their_invariants((h, in_mask, workers, setting) in case()) {
        let mask: CpuSet = in_mask.iter().enumerate().filter(|(_, m)| **m).map(|(c, _)| c).collect();
        let addresses: Vec<Option<String>> = workers
            .iter()
            .map(|w| w.map(|i| match h.topo.gpus.get(i) {
                Some(g) => g.address.clone(),
                None => "0000:ff:1f.7".to_string(),
            }))
            .collect();
        let usable = mask.len().max(1);
        let plan = match deployment_plan_on(setting, &addresses, &mask, usable, &h.topo) {
            Ok(plan) => plan,
            Err(CpuPlanError::Unfit { .. }) => {
                // Only a CPU number can be unfit, and only with workers.
                prop_assert!(matches!(setting, Setting::Cpu(_)));
                prop_assert!(!addresses.is_empty());
                return Ok(());
            }
            Err(e) => return Err(TestCaseError::fail(format!("unexpected error {e}"))),
        };
        prop_assert_eq!(plan.workers.len(), addresses.len());
        prop_assert!(!plan.why.is_empty());
        let pinned = plan.pinned();
        prop_assert!(pinned.is_subset(&mask), "pinned {} outside mask {}", pinned, mask);
        let total: usize = plan.workers.iter().flatten().chain(plan.result.iter()).map(|s| s.cpus.len()).sum();
        prop_assert_eq!(total, pinned.len(), "a cpu pinned twice: {:?}", plan);
        if !pinned.is_empty() {
            prop_assert!(!mask.is_subset(&pinned), "no cpu of the mask left: {:?}", plan);
        }
        prop_assert!(plan.left() >= 1);
        match setting {
            Setting::Off => prop_assert!(pinned.is_empty()),
            Setting::Auto => {
                for (w, step) in plan.workers.iter().enumerate() {
                    let Some(step) = step else { continue };
                    prop_assert!(!step.cpus.is_empty());
                    let addr = addresses[w].as_deref().unwrap_or_default();
                    let gpu = h.topo.gpus.iter().find(|g| g.address == addr);
                    let local = gpu.and_then(|g| g.local.clone()).unwrap_or_default();
                    prop_assert!(step.cpus.is_subset(&local), "worker {} on {} off its gpu's cpus {}", w, step.cpus, local);
                }
                if plan.result.is_some() {
                    prop_assert!(plan.workers.iter().any(Option::is_some));
                }
            }
            Setting::Cpu(n) => {
                if !addresses.is_empty() {
                    prop_assert!(plan.workers.iter().all(Option::is_some));
                    let first = plan.workers[0].as_ref().map(|s| s.cpus.clone()).unwrap_or_default();
                    prop_assert!(first.contains(n));
                }
            }
        }
    }
}

proptest! {
    #[test]
    fn auto_pins_every_worker_when_the_host_has_room(
        nodes in 1usize..=4,
        gpus_per_node in 1usize..=4,
        extra_cores in 0usize..=6,
        smt in 1usize..=2,
        pick in prop::collection::vec(any::<prop::sample::Index>(), 1..6),
    ) {
        let cores = 2 * gpus_per_node + extra_cores;
        prop_assume!(cores > gpus_per_node + 1);
        let h = host(nodes, cores, smt, gpus_per_node, true, vec![]);
        let mut chosen: Vec<usize> = pick.iter().map(|i| i.index(h.topo.gpus.len())).collect();
        chosen.sort_unstable();
        chosen.dedup();
        let addresses: Vec<Option<String>> =
            chosen.iter().map(|&i| Some(h.topo.gpus[i].address.clone())).collect();
        let mask: CpuSet = (0..h.cpus).collect();
        let plan = deployment_plan_on(Setting::Auto, &addresses, &mask, h.cpus, &h.topo).unwrap();
        for (w, &i) in chosen.iter().enumerate() {
            let (node, rank) = (i / gpus_per_node, i % gpus_per_node);
            let step = plan.workers[w].as_ref();
            prop_assert!(step.is_some(), "worker {} unpinned: {}", w, plan.why);
            // Rank r takes the node's r-th core, whose lowest CPU is node * cores + r.
            prop_assert_eq!(step.and_then(|s| s.cpus.first()), Some(node * cores + rank));
            prop_assert_eq!(step.map(|s| s.cpus.len()), Some(smt));
        }
        let (node, rank) = (chosen[0] / gpus_per_node, chosen[0] % gpus_per_node);
        let top = plan.result.as_ref().and_then(|s| s.cpus.first());
        prop_assert_eq!(top, Some(node * cores + cores - 1 - rank));
    }
}
