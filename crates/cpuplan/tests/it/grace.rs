//! GPUs whose NUMA node has no CPUs (Grace Hopper, Grace Blackwell): plans on the synthetic
//! trees of `tests/fixtures/grace/` equal the plans of the same hosts with the GPUs on their
//! Grace nodes, and a missing, malformed or tied distance table gives one line and no panic.

use std::path::{Path, PathBuf};

use cpuplan::inventory::format::{decode, encode};
use cpuplan::inventory::HostInventory;
use cpuplan::{
    deployment_plan, host_gpus, nvidia_host_gpus, online_cpus, parse_cpu_list, CpuNode, CpuPlan,
    CpuSet, Setting, StaticTopology,
};

fn grace(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/grace")
        .join(name)
}

fn set(s: &str) -> CpuSet {
    parse_cpu_list(s).unwrap()
}

/// A host with its GPUs on memory nodes, the same host with them on their Grace nodes, its GPUs.
const PAIRS: [(&str, &str, &[&str]); 3] = [
    ("gh200-1gpu", "gh200-1gpu-cdmm", &["0009:01:00.0"]),
    (
        "gh200-4gpu",
        "gh200-4gpu-cdmm",
        &[
            "0009:01:00.0",
            "0019:01:00.0",
            "0029:01:00.0",
            "0039:01:00.0",
        ],
    ),
    (
        "gb200-cdmm-off",
        "gb200-cdmm-on",
        &[
            "0008:01:00.0",
            "0009:01:00.0",
            "0018:01:00.0",
            "0019:01:00.0",
        ],
    ),
];

/// The worker lists a deployment may have on `gpus`: 1, 2 and 4 GPU workers (as many as the
/// host has), in order and reversed, and each with a CPU worker among them.
fn deployments(gpus: &[&str]) -> Vec<Vec<Option<String>>> {
    let mut out = Vec::new();
    for n in [1, 2, 4] {
        if n > gpus.len() {
            continue;
        }
        let first: Vec<Option<String>> = gpus[..n].iter().map(|a| Some(a.to_string())).collect();
        let last: Vec<Option<String>> = gpus[gpus.len() - n..]
            .iter()
            .rev()
            .map(|a| Some(a.to_string()))
            .collect();
        for d in [first, last] {
            let mut with_cpu = d.clone();
            with_cpu.insert(d.len().min(1), None);
            out.push(d);
            out.push(with_cpu);
        }
    }
    out
}

fn pins(plan: &CpuPlan) -> (Vec<Option<CpuSet>>, Option<CpuSet>) {
    (
        plan.workers
            .iter()
            .map(|w| w.as_ref().map(|s| s.cpus.clone()))
            .collect(),
        plan.result.as_ref().map(|r| r.cpus.clone()),
    )
}

#[test]
fn plans_on_memory_nodes_equal_plans_on_grace_nodes() {
    let mut auto_pinned = 0;
    for (memory, on_grace, gpus) in PAIRS {
        let (a, b) = (grace(memory), grace(on_grace));
        let online = online_cpus(&a).unwrap();
        assert_eq!(online, online_cpus(&b).unwrap(), "{memory}");
        // The whole host, one Grace node's CPUs and a few CPUs across the first two.
        let top = online.last().unwrap();
        let masks = [
            online.clone(),
            set("0-71"),
            set(&format!("0-11,{}-{}", top.min(83) - 11, top.min(83))),
        ];
        for d in deployments(gpus) {
            for mask in &masks {
                for setting in [Setting::Auto, Setting::Cpu(0), Setting::Cpu(4)] {
                    let usable = mask.len().min(16);
                    let pa = deployment_plan(setting, &d, mask, usable, &a);
                    let pb = deployment_plan(setting, &d, mask, usable, &b);
                    let what = format!("{memory} {setting} {d:?} mask {mask}");
                    match (pa, pb) {
                        (Ok(pa), Ok(pb)) => {
                            assert_eq!(pins(&pa), pins(&pb), "{what}\n{}\n{}", pa.why, pb.why);
                            assert!(!pa.why.contains('\n'), "{what}: {}", pa.why);
                            if setting == Setting::Auto && !pa.pinned().is_empty() {
                                auto_pinned += 1;
                            }
                        }
                        (Err(ea), Err(eb)) => assert_eq!(ea.to_string(), eb.to_string(), "{what}"),
                        (pa, pb) => panic!("{what}: {pa:?} vs {pb:?}"),
                    }
                }
            }
        }
    }
    // Not vacuous: auto pins on the memory-node hosts in most of those cases.
    assert!(auto_pinned >= 20, "{auto_pinned} auto plans pinned");
}

#[test]
fn gb200_gpus_rank_on_the_grace_node_nearest_their_memory() {
    let r = grace("gb200-cdmm-off");
    let gpus = host_gpus(&r, "0008:01:00.0").unwrap();
    let got: Vec<(Option<u32>, Option<u32>)> =
        gpus.iter().map(|g| (g.node, g.placement_node())).collect();
    // The seed's fields keep their meaning: the node sysfs gives, the (empty) local CPUs.
    assert_eq!(
        got,
        [
            (Some(2), Some(0)),
            (Some(10), Some(0)),
            (Some(18), Some(1)),
            (Some(26), Some(1))
        ]
    );
    assert!(gpus.iter().all(|g| g.local == Some(CpuSet::new())));
    assert_eq!(gpus[3].placement_cpus(), Some(&set("72-143")));
    assert_eq!(nvidia_host_gpus(&r).unwrap(), gpus);
    let all: Vec<Option<String>> = gpus.iter().map(|g| Some(g.address.clone())).collect();
    let p = deployment_plan(Setting::Auto, &all, &set("0-143"), 16, &r).unwrap();
    let (workers, result) = pins(&p);
    assert_eq!(
        workers,
        [
            Some(set("0")),
            Some(set("1")),
            Some(set("72")),
            Some(set("73"))
        ]
    );
    assert_eq!(result, Some(set("71")));
    let w0 = &p.workers[0].as_ref().unwrap().why;
    assert!(
        w0.contains("rank 0 of 2 on node 0 (nearest to its node 2)"),
        "{w0}"
    );
    assert!(p.why.contains("node 2 has no CPUs: node 0"), "{}", p.why);
    // The trees with the GPUs on their Grace nodes read no distance table at all.
    let on = host_gpus(&grace("gb200-cdmm-on"), "0008:01:00.0").unwrap();
    assert!(on.iter().all(|g| g.cpu_node.is_none()));
}

/// A copy of `name`'s tree (symlinks kept) that a test may change.
fn copy(name: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(grace(name))
        .arg(d.path().join("host"))
        .status()
        .unwrap();
    assert!(st.success());
    d
}

fn distance(root: &Path, node: u32) -> PathBuf {
    root.join(format!("host/sys/devices/system/node/node{node}/distance"))
}

fn gb200_plan(root: &Path) -> CpuPlan {
    let all: Vec<Option<String>> = ["0008:01:00.0", "0009:01:00.0", "0018:01:00.0"]
        .iter()
        .map(|a| Some(a.to_string()))
        .collect();
    deployment_plan(Setting::Auto, &all, &set("0-143"), 16, &root.join("host")).unwrap()
}

#[test]
fn a_missing_distance_table_leaves_the_gpu_unplaced_in_one_line() {
    let d = copy("gb200-cdmm-off");
    std::fs::remove_file(distance(d.path(), 2)).unwrap();
    let p = gb200_plan(d.path());
    assert!(p.pinned().is_empty(), "{p:?}");
    assert!(
        p.why
            .contains("gpu 0008:01:00.0: node 2 has no CPUs and no distance table")
            && p.why.contains("node2/distance is missing")
            && !p.why.contains('\n'),
        "{}",
        p.why
    );
    let g = host_gpus(&d.path().join("host"), "0008:01:00.0").unwrap();
    let line = g[0].placement_line().unwrap();
    assert!(line.starts_with("gpu 0008:01:00.0: not placed: "), "{line}");
    // The other GPUs are placed as before.
    assert_eq!(g[1].placement_node(), Some(0));
}

#[test]
fn a_malformed_distance_table_quotes_the_file_and_value() {
    let d = copy("gb200-cdmm-off");
    std::fs::write(distance(d.path(), 10), "80 far 10\n").unwrap();
    let p = gb200_plan(d.path());
    assert!(p.pinned().is_empty(), "{p:?}");
    assert!(
        p.why
            .contains("node10/distance: expected whitespace-separated distances")
            && p.why.contains("far"),
        "{}",
        p.why
    );
    // A row of the wrong length for node/online is as bad.
    std::fs::write(distance(d.path(), 10), "80 120\n").unwrap();
    let p = gb200_plan(d.path());
    assert!(
        p.why.contains("lists 2 distances for the 34 online nodes"),
        "{}",
        p.why
    );
    // No node/online at all: the columns are unknown.
    std::fs::write(distance(d.path(), 10), "80 120\n").unwrap();
    std::fs::remove_file(d.path().join("host/sys/devices/system/node/online")).unwrap();
    let p = gb200_plan(d.path());
    assert!(p.why.contains("distance columns are unknown"), "{}", p.why);
}

#[test]
fn equal_distances_go_to_the_lowest_node_and_say_so() {
    let d = copy("gb200-cdmm-off");
    // Node 18 (the third GPU's memory) as near node 0 as node 1.
    let path = distance(d.path(), 18);
    let row = std::fs::read_to_string(&path).unwrap();
    let mut cols: Vec<&str> = row.split_whitespace().collect();
    cols[0] = "80";
    std::fs::write(&path, cols.join(" ") + "\n").unwrap();
    let g = host_gpus(&d.path().join("host"), "0018:01:00.0").unwrap();
    let CpuNode::Nearest { node, note, .. } = g[2].cpu_node.clone().unwrap() else {
        panic!("{:?}", g[2]);
    };
    assert_eq!(node, 0);
    let note = note.unwrap();
    assert!(
        note.contains("node 18 is at distance 80 from nodes 0, 1 alike: node 0, the lowest number"),
        "{note}"
    );
    // Three GPUs now on node 0: ranks 0, 1, 2 there; the plan's line says how the tie went.
    let p = gb200_plan(d.path());
    let (workers, _) = pins(&p);
    assert_eq!(workers, [Some(set("0")), Some(set("1")), Some(set("2"))]);
    assert!(
        p.why.contains("the lowest number") && !p.why.contains('\n'),
        "{}",
        p.why
    );
}

#[test]
fn the_inventory_holds_the_same_placement() {
    for name in ["gb200-cdmm-off", "gh200-4gpu", "gb200-cdmm-on"] {
        let r = grace(name);
        let inv = HostInventory::read(&r, &r).unwrap();
        let like = &inv
            .pci
            .iter()
            .find(|f| f.vendor == Some(0x10de))
            .unwrap()
            .address;
        assert_eq!(
            inv.host_gpus(like).unwrap(),
            host_gpus(&r, like).unwrap(),
            "{name}"
        );
        assert_eq!(decode(&encode(&inv)).unwrap(), inv, "{name}");
        let all: Vec<Option<String>> = inv
            .pci
            .iter()
            .filter(|f| f.vendor == Some(0x10de))
            .map(|f| Some(f.address.clone()))
            .collect();
        let mask = inv.online.clone();
        let a = StaticTopology::for_plan(&r, Setting::Auto, &all, &mask).unwrap();
        let b = StaticTopology::for_plan_on(&inv, Setting::Auto, &all, &mask).unwrap();
        assert_eq!(a.gpus, b.gpus, "{name}");
        assert_eq!(a.siblings, b.siblings, "{name}");
        assert!(
            !a.siblings.is_empty(),
            "{name}: auto consults the GPUs' CPUs"
        );
    }
}
