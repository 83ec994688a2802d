//! How long a plan takes: `auto` on the 224-CPU 8-GPU host with and without sysfs reads,
//! on a generated 1024-CPU 16-GPU 8-node host, and cpu lists of 1024 CPUs.

use std::hint::black_box;
use std::path::{Path, PathBuf};

use cpuplan::{
    deployment_plan, deployment_plan_on, format_cpu_list, parse_cpu_list, CpuSet, HostGpu, Setting,
    StaticTopology,
};
use criterion::{criterion_group, criterion_main, Criterion};

const BIG_NODES: usize = 8;
const BIG_CORES: usize = 512;
const BIG_CPUS: usize = 2 * BIG_CORES;

fn host224() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/host")
}

fn host224_gpus() -> Vec<Option<String>> {
    ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]
        .iter()
        .map(|b| Some(format!("0000:{b}:00.0")))
        .collect()
}

/// Node `n`'s CPUs on the big host: cores 64n..64n+63 and their siblings 512 above.
fn big_node(n: usize) -> CpuSet {
    let per = BIG_CORES / BIG_NODES;
    (per * n..per * (n + 1))
        .flat_map(|c| [c, c + BIG_CORES])
        .collect()
}

/// The 1024-CPU 16-GPU 8-node host, in memory.
fn big_host() -> (StaticTopology, Vec<Option<String>>) {
    let siblings = (0..BIG_CPUS)
        .map(|c| {
            [c % BIG_CORES, c % BIG_CORES + BIG_CORES]
                .into_iter()
                .collect()
        })
        .collect();
    let mut gpus = Vec::new();
    for n in 0..BIG_NODES {
        for g in 0..2 {
            gpus.push(HostGpu {
                address: format!("0000:{:02x}:00.0", 0x10 * (2 * n + g) + 1),
                node: Some(n as u32),
                local: Some(big_node(n)),
                cpu_node: None,
            });
        }
    }
    let addresses = gpus.iter().map(|g| Some(g.address.clone())).collect();
    (StaticTopology { siblings, gpus }, addresses)
}

/// The big host written out as sysfs under `root`.
fn write_big_host(root: &Path, topo: &StaticTopology) {
    let cpu = root.join("sys/devices/system/cpu");
    for (c, sib) in topo.siblings.iter().enumerate() {
        let dir = cpu.join(format!("cpu{c}/topology"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("thread_siblings_list"), format!("{sib}\n")).unwrap();
    }
    std::fs::write(cpu.join("online"), format!("0-{}\n", BIG_CPUS - 1)).unwrap();
    for g in &topo.gpus {
        let dir = root.join("sys/bus/pci/devices").join(&g.address);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("vendor"), "0x10de\n").unwrap();
        std::fs::write(dir.join("class"), "0x030200\n").unwrap();
        let node = g.node.map_or(-1, |n| n as i64);
        std::fs::write(dir.join("numa_node"), format!("{node}\n")).unwrap();
        let local = g.local.clone().unwrap_or_default();
        std::fs::write(dir.join("local_cpulist"), format!("{local}\n")).unwrap();
    }
}

fn bench_plans(c: &mut Criterion) {
    let mask224 = CpuSet::range(0, 223).unwrap();
    let w224 = host224_gpus();
    let root = host224();
    let like = w224[0].clone().unwrap_or_default();
    let static224 = StaticTopology::from_sysfs(&root, &like).unwrap();
    let check = deployment_plan(Setting::Auto, &w224, &mask224, 224, &root).unwrap();
    assert_eq!(check.workers.iter().flatten().count(), 8, "{}", check.why);

    c.bench_function("auto 224cpu 8gpu, sysfs reads", |b| {
        b.iter(|| deployment_plan(Setting::Auto, black_box(&w224), &mask224, 224, &root).unwrap())
    });
    c.bench_function("auto 224cpu 8gpu, static topology", |b| {
        b.iter(|| {
            deployment_plan_on(Setting::Auto, black_box(&w224), &mask224, 224, &static224).unwrap()
        })
    });
    // What the one-shot hook does with a host inventory kept on a tmpfs: load the file (trust
    // checks, frame, checksum), check the stamp against the host, plan from it.
    let inv_dir = tempfile::tempdir().unwrap();
    let dir = inv_dir.path().join("inventory");
    let got = cpuplan::inventory::store::obtain(&dir, &root, &root, false);
    assert!(got.inventory.is_some(), "{}", got.describe());
    let with_inv = |inv: &cpuplan::inventory::HostInventory| {
        let topo = StaticTopology::for_plan_on(inv, Setting::Auto, &w224, &mask224).unwrap();
        deployment_plan_on(Setting::Auto, &w224, &mask224, 224, &topo).unwrap()
    };
    assert_eq!(with_inv(got.inventory.as_ref().unwrap()), check);
    c.bench_function(
        "auto 224cpu 8gpu, with the host inventory (load, stamp, plan)",
        |b| {
            b.iter(|| {
                let got = cpuplan::inventory::store::obtain(&dir, black_box(&root), &root, false);
                assert_eq!(got.came, cpuplan::inventory::store::Came::File);
                with_inv(got.inventory.as_ref().unwrap())
            })
        },
    );
    let one = vec![w224[1].clone()];
    let node0 = parse_cpu_list("0-55,112-167").unwrap();
    c.bench_function("auto 224cpu 1 worker on node 0, sysfs reads", |b| {
        b.iter(|| deployment_plan(Setting::Auto, black_box(&one), &node0, 112, &root).unwrap())
    });

    let (big, wbig) = big_host();
    let mask_big = CpuSet::range(0, BIG_CPUS - 1).unwrap();
    let check = deployment_plan_on(Setting::Auto, &wbig, &mask_big, BIG_CPUS, &big).unwrap();
    assert_eq!(check.workers.iter().flatten().count(), 16, "{}", check.why);
    c.bench_function("auto 1024cpu 16gpu 8node, static topology", |b| {
        b.iter(|| {
            deployment_plan_on(Setting::Auto, black_box(&wbig), &mask_big, BIG_CPUS, &big).unwrap()
        })
    });
    c.bench_function("cpu 0, 16 workers, 1024cpu, static topology", |b| {
        b.iter(|| {
            deployment_plan_on(Setting::Cpu(0), black_box(&wbig), &mask_big, BIG_CPUS, &big)
                .unwrap()
        })
    });
    let dir = tempfile::tempdir().unwrap();
    write_big_host(dir.path(), &big);
    let from_disk = deployment_plan(Setting::Auto, &wbig, &mask_big, BIG_CPUS, dir.path()).unwrap();
    assert_eq!(from_disk, check);
    c.bench_function("auto 1024cpu 16gpu 8node, sysfs reads", |b| {
        b.iter(|| {
            deployment_plan(
                Setting::Auto,
                black_box(&wbig),
                &mask_big,
                BIG_CPUS,
                dir.path(),
            )
            .unwrap()
        })
    });
}

fn bench_cpu_lists(c: &mut Criterion) {
    // 1024 CPUs in 512 runs of two: 0-1,3-4,6-7,...
    let set: CpuSet = (0..1536).filter(|c| c % 3 != 2).collect();
    assert_eq!(set.len(), 1024);
    let text = format_cpu_list(&set);
    c.bench_function("parse_cpu_list 1024 cpus in 512 ranges", |b| {
        b.iter(|| parse_cpu_list(black_box(&text)).unwrap())
    });
    c.bench_function("format_cpu_list 1024 cpus in 512 ranges", |b| {
        b.iter(|| format_cpu_list(black_box(&set)))
    });
}

criterion_group!(benches, bench_plans, bench_cpu_lists);
criterion_main!(benches);
