//! `deployment_plan`'s rules on the synthetic hosts and the real dumps, with CPUs worked out by hand.
//!
//! examples/host (224 CPUs, 8 GPUs): node 0 = CPUs 0-55,112-167, node 1 = 56-111,168-223, siblings n and n+112;
//! GPUs 18, 2a, 3a, 5d on node 0 and 9a, ab, ba, db on node 1 (ranks 0-3 in that order).

use std::path::{Path, PathBuf};

use cpuplan::{
    deployment_plan, deployment_plan_on, parse_cpu_list, CpuPlan, CpuPlanError, CpuSet, HostGpu,
    Setting, StaticTopology, TopologyCache,
};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

/// The README's example host, which the tests share.
fn host224() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/host")
}

fn set(s: &str) -> CpuSet {
    parse_cpu_list(s).unwrap()
}

fn addrs(a: &[Option<&str>]) -> Vec<Option<String>> {
    a.iter().map(|x| x.map(String::from)).collect()
}

fn gpus(a: &[&str]) -> Vec<Option<String>> {
    a.iter().map(|x| Some(format!("0000:{x}:00.0"))).collect()
}

const NODE0: &str = "0-55,112-167";

fn auto(addresses: &[Option<String>], mask: &str, usable: usize, root: &Path) -> CpuPlan {
    deployment_plan(Setting::Auto, addresses, &set(mask), usable, root).unwrap()
}

fn worker_cpus(plan: &CpuPlan) -> Vec<Option<CpuSet>> {
    plan.workers
        .iter()
        .map(|w| w.as_ref().map(|s| s.cpus.clone()))
        .collect()
}

fn assert_nothing_pinned(plan: &CpuPlan, why_has: &str) {
    assert!(plan.workers.iter().all(Option::is_none), "{plan:?}");
    assert!(plan.result.is_none(), "{plan:?}");
    assert!(plan.pinned().is_empty());
    assert!(
        plan.why.contains(why_has),
        "{:?} lacks {why_has:?}",
        plan.why
    );
}

// ---- auto ----

#[test]
fn auto_two_workers_on_node0_and_pool_sizes() {
    let plan = auto(&gpus(&["18", "2a"]), NODE0, 16, &host224());
    assert_eq!(
        worker_cpus(&plan),
        vec![Some(set("0,112")), Some(set("1,113"))]
    );
    let result = plan.result.as_ref().unwrap();
    assert_eq!(result.cpus, set("55,167"));
    assert_eq!(
        plan.workers[1].as_ref().unwrap().why,
        "gpu 0000:2a:00.0 rank 1 of 4 on node 0: core 1 from the bottom"
    );
    assert!(result
        .why
        .contains("rank 0 of 4 on node 0: core 0 from the top"));
    assert!(
        plan.why.starts_with("step_thread_core auto:"),
        "{}",
        plan.why
    );
    // 16 usable, 6 pinned: 10 left; pools a quarter of that, 2.
    assert_eq!(plan.pinned(), set("0-1,55,112-113,167"));
    assert_eq!(plan.left(), 10);
    assert_eq!(plan.preprocess_threads(), 2);
    assert_eq!(plan.png_threads(), 2);
    assert_eq!(plan.encode_workers(), 5);
    assert_eq!(plan.copy_workers(), 2);
}

#[test]
fn auto_eight_workers_on_two_nodes() {
    let all = gpus(&["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]);
    let plan = auto(&all, "0-223", 224, &host224());
    assert_eq!(
        worker_cpus(&plan),
        vec![
            Some(set("0,112")),
            Some(set("1,113")),
            Some(set("2,114")),
            Some(set("3,115")),
            Some(set("56,168")),
            Some(set("57,169")),
            Some(set("58,170")),
            Some(set("59,171")),
        ]
    );
    assert_eq!(plan.result.unwrap().cpus, set("55,167"));
}

#[test]
fn auto_rank_follows_the_gpu_not_the_worker_index() {
    // Worker 0 on 2a (rank 1 on node 0), worker 1 on db (rank 3 on node 1).
    let plan = auto(&gpus(&["2a", "db"]), "0-223", 224, &host224());
    assert_eq!(
        worker_cpus(&plan),
        vec![Some(set("1,113")), Some(set("59,171"))]
    );
    // The API server: worker 0's rank 1 from the top of node 0 (core 54 of 0..55).
    assert_eq!(plan.result.unwrap().cpus, set("54,166"));
}

#[test]
fn auto_result_follows_the_first_worker_with_an_address() {
    let plan = auto(
        &addrs(&[None, Some("0000:3a:00.0")]),
        NODE0,
        112,
        &host224(),
    );
    assert_eq!(worker_cpus(&plan), vec![None, Some(set("2,114"))]);
    assert_eq!(plan.result.unwrap().cpus, set("53,165"));
}

#[test]
fn auto_on_a_mask_of_exactly_two_cores_per_gpu() {
    let all = gpus(&["18", "2a", "3a", "5d"]);
    let plan = auto(&all, "0-7,112-119", 16, &host224());
    assert_eq!(
        worker_cpus(&plan),
        vec![
            Some(set("0,112")),
            Some(set("1,113")),
            Some(set("2,114")),
            Some(set("3,115")),
        ]
    );
    assert_eq!(plan.result.as_ref().unwrap().cpus, set("7,119"));
    assert_eq!(plan.left(), 6);
}

#[test]
fn auto_cores_are_siblings_within_the_mask() {
    // No sibling of 0-7 is in the mask: each CPU is a core of its own.
    let plan = auto(&gpus(&["5d"]), "0-7", 8, &host224());
    assert_eq!(worker_cpus(&plan), vec![Some(set("3"))]);
    assert_eq!(plan.result.unwrap().cpus, set("4"));
}

#[test]
fn auto_pins_nothing_when_a_node_has_fewer_than_two_cores_per_gpu() {
    let plan = auto(&gpus(&["18"]), "0-6,112-118", 14, &host224());
    assert_nothing_pinned(&plan, "fewer than 2 per GPU");
    assert!(plan.why.contains("node 0 has 7 cores"), "{}", plan.why);
    assert_eq!(plan.left(), 14);
    // A worker whose node the mask leaves out entirely.
    let plan = auto(&gpus(&["18", "9a"]), NODE0, 112, &host224());
    assert_nothing_pinned(&plan, "node 1 has 0 cores");
}

#[test]
fn auto_pins_nothing_when_two_workers_share_a_gpu() {
    let plan = auto(&gpus(&["18", "2a", "18"]), NODE0, 112, &host224());
    assert_nothing_pinned(&plan, "workers 0 and 2 share gpu 0000:18:00.0");
    assert_eq!(plan.workers.len(), 3);
}

#[test]
fn auto_pins_nothing_for_an_address_not_among_the_gpus() {
    // The NIC is a PCI function, but not one like the first worker's GPU.
    let plan = auto(&gpus(&["18", "19"]), NODE0, 112, &host224());
    assert_nothing_pinned(&plan, "0000:19:00.0 is not among the host's 8 GPUs");
    // With the NIC first, the GPUs are not like it.
    let plan = auto(&gpus(&["19", "18"]), NODE0, 112, &host224());
    assert_nothing_pinned(&plan, "0000:18:00.0 is not among");
    // No such function at all.
    let plan = auto(&gpus(&["77"]), NODE0, 112, &host224());
    assert_nothing_pinned(&plan, "gpu 0000:77:00.0 is not in sysfs");
}

#[test]
fn auto_pins_nothing_without_sysfs_or_gpu_addresses() {
    let empty = tempfile::tempdir().unwrap();
    let plan = auto(&gpus(&["18"]), NODE0, 112, empty.path());
    assert_nothing_pinned(&plan, "is not in sysfs");
    let plan = auto(&addrs(&[None, None]), NODE0, 112, &host224());
    assert_nothing_pinned(&plan, "no worker has a GPU address");
    assert_eq!(plan.workers.len(), 2);
}

#[test]
fn auto_pins_nothing_for_a_gpu_without_local_cpus() {
    let topo = StaticTopology {
        siblings: vec![],
        gpus: vec![HostGpu {
            address: "0000:01:00.0".into(),
            node: Some(0),
            local: None,
            cpu_node: None,
        }],
    };
    let plan = deployment_plan_on(
        Setting::Auto,
        &addrs(&[Some("0000:01:00.0")]),
        &set("0-7"),
        8,
        &topo,
    )
    .unwrap();
    assert_nothing_pinned(&plan, "gpu 0000:01:00.0 has no local CPUs in sysfs");
}

#[test]
fn auto_on_the_real_ryzen_dump() {
    let r = fixtures().join("topologies/ghw-ryzen5-1600-radeon");
    let w = addrs(&[Some("0000:0a:00.0")]);
    // One GPU with no NUMA node, siblings (n, n+6): three cores {0,6} {1,7} {2,8}.
    let plan = auto(&w, "0-2,6-8", 6, &r);
    assert_eq!(worker_cpus(&plan), vec![Some(set("0,6"))]);
    assert_eq!(plan.result.as_ref().unwrap().cpus, set("2,8"));
    assert_eq!(
        plan.workers[0].as_ref().unwrap().why,
        "gpu 0000:0a:00.0 rank 0 of 1 on no NUMA node: core 0 from the bottom"
    );
    // Two cores: the worker and the API server would take every CPU of the mask.
    let plan = auto(&w, "0-1,6-7", 4, &r);
    assert_nothing_pinned(&plan, "no CPU of the mask 0-1,6-7 unpinned");
    // One core: fewer than two per GPU.
    let plan = auto(&w, "0,6", 2, &r);
    assert_nothing_pinned(&plan, "fewer than 2 per GPU");
}

#[test]
fn auto_on_the_real_kvm_dump() {
    let r = fixtures().join("topologies/ghw-kvm-xeon-e5-2695v4-tesla-p100");
    let plan = auto(&addrs(&[Some("0000:06:00.0")]), "0-7", 8, &r);
    assert_eq!(worker_cpus(&plan), vec![Some(set("0"))]);
    assert_eq!(plan.result.unwrap().cpus, set("7"));
}

#[test]
fn auto_on_the_power9_dump_pins_nothing_naming_the_missing_vendor() {
    let r = fixtures().join("topologies/hwloc-power9-ac922-6xv100");
    let plan = auto(&addrs(&[Some("0004:05:00.0")]), "0-15", 16, &r);
    assert_nothing_pinned(&plan, "0004:05:00.0/vendor");
}

#[test]
fn auto_on_eight_nodes() {
    let r = fixtures().join("synthetic/host-8node-16gpu");
    // Node n: CPUs 8n..8n+7 and 64+8n..64+8n+7; GPUs at buses 20n+01 and 20n+11 (hex).
    let all: Vec<Option<String>> = (0..8)
        .flat_map(|n| [0x01 + 0x20 * n, 0x11 + 0x20 * n])
        .map(|bus| Some(format!("0000:{bus:02x}:00.0")))
        .collect();
    let plan = auto(&all, "0-127", 128, &r);
    let want: Vec<Option<CpuSet>> = (0..8)
        .flat_map(|n| {
            [
                [8 * n, 8 * n + 64].into_iter().collect(),
                [8 * n + 1, 8 * n + 65].into_iter().collect(),
            ]
        })
        .map(Some)
        .collect();
    assert_eq!(worker_cpus(&plan), want);
    assert_eq!(plan.result.as_ref().unwrap().cpus, set("7,71"));
    assert_eq!(plan.pinned().len(), 34);
}

#[test]
fn malformed_sysfs_is_a_host_error() {
    let d = tempfile::tempdir().unwrap();
    let dev = d.path().join("sys/bus/pci/devices/0000:01:00.0");
    std::fs::create_dir_all(&dev).unwrap();
    std::fs::write(dev.join("vendor"), "0x10de\n").unwrap();
    std::fs::write(dev.join("class"), "0x030200\n").unwrap();
    std::fs::write(dev.join("local_cpulist"), "0-3,oops\n").unwrap();
    let e = deployment_plan(
        Setting::Auto,
        &addrs(&[Some("0000:01:00.0")]),
        &set("0-7"),
        8,
        d.path(),
    )
    .unwrap_err();
    assert!(matches!(e, CpuPlanError::Host(_)));
    let msg = e.to_string();
    assert!(
        msg.contains("local_cpulist") && msg.contains("0-3,oops"),
        "{msg}"
    );
}

#[test]
fn sysfs_and_static_snapshot_agree() {
    let w = gpus(&["ba", "3a"]);
    let mask = set("0-223");
    let from_sysfs = deployment_plan(Setting::Auto, &w, &mask, 224, &host224()).unwrap();
    let topo = StaticTopology::from_sysfs(&host224(), "0000:ba:00.0").unwrap();
    let from_memory = deployment_plan_on(Setting::Auto, &w, &mask, 224, &topo).unwrap();
    assert_eq!(from_sysfs, from_memory);
    assert_eq!(
        worker_cpus(&from_sysfs),
        vec![Some(set("58,170")), Some(set("2,114"))]
    );
    // The API server: worker 0 (ba, rank 2 on node 1) from the top of node 1: core 53 of 56..111.
    assert_eq!(from_sysfs.result.unwrap().cpus, set("109,221"));
}

// ---- off and no workers ----

#[test]
fn off_pins_nothing() {
    let plan = deployment_plan(Setting::Off, &gpus(&["18"]), &set(NODE0), 112, &host224()).unwrap();
    assert_nothing_pinned(&plan, "step_thread_core off");
    assert_eq!(plan.why, "step_thread_core off");
    assert_eq!(plan.workers.len(), 1);
    assert_eq!(plan.left(), 112);
}

#[test]
fn no_workers_pins_nothing_whatever_the_setting() {
    for setting in [Setting::Auto, Setting::Cpu(4), Setting::Cpu(9999)] {
        let plan = deployment_plan(setting, &[], &set(NODE0), 112, &host224()).unwrap();
        assert_nothing_pinned(&plan, "no workers");
        assert!(plan.workers.is_empty());
    }
}

// ---- a CPU number ----

fn cpu(n: usize, workers: usize, mask: &str) -> Result<CpuPlan, CpuPlanError> {
    deployment_plan(
        Setting::Cpu(n),
        &vec![None; workers],
        &set(mask),
        64,
        &host224(),
    )
}

#[test]
fn cpu_number_takes_cores_upwards_and_the_last_core() {
    let plan = cpu(4, 2, NODE0).unwrap();
    assert_eq!(
        worker_cpus(&plan),
        vec![Some(set("4,116")), Some(set("5,117"))]
    );
    assert_eq!(plan.result.as_ref().unwrap().cpus, set("55,167"));
    assert_eq!(plan.left(), 58);
    // Naming the sibling picks the same core.
    assert_eq!(
        worker_cpus(&cpu(116, 2, NODE0).unwrap()),
        worker_cpus(&plan)
    );
    // Workers with and without GPUs are counted alike.
    let mixed = deployment_plan(
        Setting::Cpu(4),
        &gpus(&["18", "2a"]),
        &set(NODE0),
        64,
        &host224(),
    )
    .unwrap();
    assert_eq!(mixed.workers, plan.workers);
}

#[test]
fn cpu_number_skips_cores_of_the_mask_by_lowest_cpu() {
    // Mask without SMT siblings of 0-3: cores {0} {1} {2} {3} {4,116} ... ; last {55,167}.
    let plan = cpu(2, 3, "0-55,116-167").unwrap();
    assert_eq!(
        worker_cpus(&plan),
        vec![Some(set("2")), Some(set("3")), Some(set("4,116"))]
    );
    assert_eq!(plan.result.unwrap().cpus, set("55,167"));
}

#[test]
fn cpu_number_at_the_edge_of_the_top() {
    let plan = cpu(54, 1, NODE0).unwrap();
    assert_eq!(worker_cpus(&plan), vec![Some(set("54,166"))]);
    assert_eq!(plan.result.unwrap().cpus, set("55,167"));
}

fn unfit(e: CpuPlanError) -> String {
    match e {
        CpuPlanError::Unfit { reason, .. } => reason,
        other => panic!("expected Unfit, got {other:?}"),
    }
}

#[test]
fn cpu_number_outside_the_mask_is_an_error() {
    let reason = unfit(cpu(56, 1, NODE0).unwrap_err());
    assert!(
        reason.contains("cpu 56 is not in the mask 0-55,112-167"),
        "{reason}"
    );
}

#[test]
fn cpu_number_too_near_the_top_is_an_error() {
    for (n, w) in [(54, 2), (55, 1), (0, 56)] {
        let e = cpu(n, w, NODE0).unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with(&format!("step_thread_core {n}: ")), "{msg}");
        assert!(
            msg.contains(&format!(
                "too near the top of the mask 0-55,112-167 for {w} workers"
            )),
            "{msg}"
        );
    }
    // 54 workers from core 0 fit: cores 0-53, the API server core 55, core 54 left.
    let plan = cpu(0, 54, NODE0).unwrap();
    assert_eq!(plan.pinned(), set("0-53,55,112-165,167"));
    // 55 are not too near the top, but would leave no CPU of the mask unpinned.
    let reason = unfit(cpu(0, 55, NODE0).unwrap_err());
    assert!(reason.contains("unpinned"), "{reason}");
}

#[test]
fn cpu_number_leaving_no_cpu_unpinned_is_an_error() {
    let reason = unfit(cpu(0, 1, "0-1,112-113").unwrap_err());
    assert!(
        reason.contains("no cpu of the mask 0-1,112-113 unpinned"),
        "{reason}"
    );
    let reason = unfit(cpu(0, 2, "0-2").unwrap_err());
    assert!(reason.contains("unpinned"), "{reason}");
    // One more CPU and it fits: {0}, {1} workers, {3} the API server, 2 left.
    let plan = cpu(0, 2, "0-3").unwrap();
    assert_eq!(plan.pinned(), set("0-1,3"));
}

/// A snapshot read for a plan answers every plan over the mask or a subset of it exactly as
/// sysfs does (the hook plans from the snapshot, without reading files while it decides).
#[test]
fn a_snapshot_for_a_plan_plans_as_sysfs_does() {
    let root = host224();
    let masks = [
        "0-223",
        NODE0,
        "0-3,112-115",
        "0-27,112-139",
        "1-20,113-130",
    ];
    let workers = [
        vec![],
        gpus(&["18"]),
        gpus(&["18", "2a"]),
        gpus(&["9a", "18"]),
        addrs(&[Some("0000:2a:00.0"), None]),
        gpus(&["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]),
    ];
    // One cache over every case, as a long-running planner keeps it: the same snapshots.
    let mut cache = TopologyCache::default();
    for setting in [
        Setting::Off,
        Setting::Auto,
        Setting::Cpu(0),
        Setting::Cpu(5),
    ] {
        for m in masks {
            let mask = set(m);
            for w in &workers {
                let snap = StaticTopology::for_plan(&root, setting, w, &mask).unwrap();
                let cached =
                    StaticTopology::for_plan_cached(&root, setting, w, &mask, &mut cache).unwrap();
                assert_eq!(
                    (&cached.siblings, &cached.gpus),
                    (&snap.siblings, &snap.gpus)
                );
                // Over the mask and over its GPU-local part (what the hook's cpuset rule narrows to).
                let mut subsets = vec![mask.clone()];
                for g in snap
                    .gpus
                    .iter()
                    .filter(|g| w.contains(&Some(g.address.clone())))
                {
                    subsets.push(g.local.clone().unwrap().intersection(&mask));
                }
                for sub in subsets.into_iter().filter(|s| !s.is_empty()) {
                    let from_sysfs = deployment_plan(setting, w, &sub, 8, &root);
                    let from_snap = deployment_plan_on(setting, w, &sub, 8, &snap);
                    match (from_sysfs, from_snap) {
                        (Ok(a), Ok(b)) => assert_eq!(a, b, "{setting} {m} {sub} {w:?}"),
                        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
                        (a, b) => panic!("{setting} {m} {sub} {w:?}: {a:?} vs {b:?}"),
                    }
                }
            }
        }
    }
}

/// The snapshot reads only what the plan consults: nothing for `off`, the GPUs' local CPUs for `auto`.
#[test]
fn a_snapshot_reads_only_what_the_setting_consults() {
    let root = host224();
    let all = set("0-223");
    let off = StaticTopology::for_plan(&root, Setting::Off, &gpus(&["18"]), &all).unwrap();
    assert!(off.siblings.iter().all(|s| s.is_empty()));
    assert_eq!(off.gpus.len(), 8, "the GPUs are read for the cpuset rule");
    let auto = StaticTopology::for_plan(&root, Setting::Auto, &gpus(&["18"]), &all).unwrap();
    let read: CpuSet = (0..auto.siblings.len())
        .filter(|c| !auto.siblings[*c].is_empty())
        .collect();
    assert_eq!(read, set(NODE0));
    let none = StaticTopology::for_plan(&root, Setting::Cpu(3), &[], &set("0-7")).unwrap();
    assert!(none.gpus.is_empty());
    assert_eq!(none.siblings[3], set("3,115"));
}

#[test]
fn the_seed_s_form_gives_the_seed_s_pools_on_eight_gpus_with_little_left() {
    // 8 GPUs, 26 usable: the workers' 8 cores (16 CPUs) and the API server's core pinned.
    let all = gpus(&["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]);
    let plan = auto(&all, "0-223", 26, &host224());
    let pools = |p: &CpuPlan| {
        (
            p.left(),
            p.preprocess_threads(),
            p.png_threads(),
            p.encode_workers(),
            p.copy_workers(),
        )
    };
    // cpuplan's own: the whole core reserved, preprocess_threads capped at left less 8 workers.
    assert_eq!(plan.result.as_ref().unwrap().cpus, set("55,167"));
    assert_eq!(pools(&plan), (8, 1, 2, 4, 2));
    // The seed's: its result one CPU (pinned 17, left 9), a quarter of left for
    // preprocess_threads (2), png_threads 2, encode_workers 9 / 2 = 4, copy_workers 9 / 4 = 2.
    let seed = plan.clone().seed_form();
    assert_eq!(seed.result.as_ref().unwrap().cpus, set("55"));
    assert_eq!(seed.pinned().len(), 17);
    assert_eq!(pools(&seed), (9, 2, 2, 4, 2));
    assert_eq!(seed.workers, plan.workers);
}
