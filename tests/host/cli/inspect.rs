//! `cpuplan plan` (the hook's plan for given devices, mask and usable CPUs, and the seed's),
//! `gpus` and `quota`.

use super::{ok_json, ok_text, repo};

#[test]
fn plan_json_on_the_example_host() {
    let host = repo("examples/host");
    let v = ok_json(&[
        "plan",
        "--setting",
        "auto",
        "--devices",
        "0000:18:00.0,0000:2a:00.0,-",
        "--mask",
        "0-55,112-167",
        "--usable",
        "16",
        "--root",
        host.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(v["workers"][0]["cpus"], "0,112");
    assert_eq!(v["workers"][0]["device"], "0000:18:00.0");
    assert_eq!(v["workers"][1]["cpus"], "1,113");
    assert!(v["workers"][2].is_null(), "a CPU worker stays unpinned");
    assert_eq!(v["result"]["cpus"], "55,167");
    assert_eq!(v["pinned"], "0-1,55,112-113,167");
    assert_eq!(v["left"], 10);
    assert_eq!(v["pools"]["encode_workers"], 5);
}

#[test]
fn plan_table_draws_nodes_and_cores() {
    let host = repo("examples/host");
    let text = ok_text(&[
        "plan",
        "--setting",
        "3",
        "--devices",
        "0000:9a:00.0",
        "--mask",
        "0-223",
        "--usable",
        "8",
        "--root",
        host.to_str().unwrap(),
    ]);
    assert!(text.contains("node 0: cpus 0-55,112-167"), "{text}");
    assert!(text.contains("node 1: cpus 56-111,168-223"), "{text}");
    assert!(text.contains("     c0 ooo0"), "worker 0 on core 3: {text}");
    assert!(
        text.contains("    c56 ") && text.trim_end().lines().any(|l| l.ends_with('R')),
        "{text}"
    );
    assert!(
        text.contains("worker 0 [0] GPU 0000:9a:00.0: cpus 3,115"),
        "{text}"
    );
}

#[test]
fn gpus_lists_the_hosts_gpus_like_one() {
    let host = repo("examples/host");
    let v = ok_json(&[
        "gpus",
        "--like",
        "0000:ab:00.0",
        "--root",
        host.to_str().unwrap(),
        "--json",
    ]);
    let list = v.as_array().unwrap();
    assert_eq!(list.len(), 8);
    assert_eq!(list[0]["address"], "0000:18:00.0");
    assert_eq!(list[0]["node"], 0);
    assert_eq!(list[0]["local"], "0-55,112-167");
    assert_eq!(list[7]["node"], 1);
    let kvm = repo("crates/../tests/fixtures/topologies/ghw-kvm-xeon-e5-2695v4-tesla-p100");
    let v = ok_json(&[
        "gpus",
        "--like",
        "0000:06:00.0",
        "--root",
        kvm.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(
        v,
        serde_json::json!([{"address": "0000:06:00.0", "node": null, "local": "0-7"}])
    );
}

#[test]
fn quota_of_fixture_and_live_processes() {
    let v2 = repo("tests/fixtures/cgroup/v2");
    let v = ok_json(&[
        "quota",
        "--root",
        v2.to_str().unwrap(),
        "--pid",
        "4242",
        "--json",
    ]);
    assert_eq!(v["quota"], 2.5);
    assert_eq!(v["usable"], 2);
    let live = ok_json(&["quota", "--json"]);
    let mask: cpuplan::CpuSet = live["mask"].as_str().unwrap().parse().unwrap();
    assert!(!mask.is_empty());
    assert!(live["usable"].as_u64().unwrap() >= 1);
}

#[test]
fn gpus_without_like_lists_the_hosts_nvidia_gpus() {
    let host = repo("examples/host");
    let v = ok_json(&["gpus", "--root", host.to_str().unwrap(), "--json"]);
    let addrs: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["address"].as_str().unwrap())
        .collect();
    assert_eq!(
        addrs,
        [
            "0000:18:00.0",
            "0000:2a:00.0",
            "0000:3a:00.0",
            "0000:5d:00.0",
            "0000:9a:00.0",
            "0000:ab:00.0",
            "0000:ba:00.0",
            "0000:db:00.0"
        ]
    );
    // nvidia-smi's 8-hex-digit domain names the same GPU.
    let like = ok_json(&[
        "gpus",
        "--like",
        "00000000:18:00.0",
        "--root",
        host.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(like, v);
    let plan = ok_json(&[
        "plan",
        "--setting",
        "auto",
        "--devices",
        "00000000:2A:00.0",
        "--mask",
        "0-55,112-167",
        "--usable",
        "8",
        "--root",
        host.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(plan["devices"][0], "0000:2a:00.0");
    assert_eq!(plan["workers"][0]["cpus"], "1,113");
}

#[test]
fn plan_says_its_pools_and_gives_the_seed_s_plan_on_request() {
    // Eight GPUs with little left: 26 usable, the eight workers' cores (16 CPUs) and the API
    // server's pinned.
    let host = repo("examples/host");
    let gpus = "0000:18:00.0,0000:2a:00.0,0000:3a:00.0,0000:5d:00.0,\
                0000:9a:00.0,0000:ab:00.0,0000:ba:00.0,0000:db:00.0";
    let plan = |extra: &[&str]| {
        let mut args = vec![
            "plan",
            "--setting",
            "auto",
            "--devices",
            gpus,
            "--mask",
            "0-223",
            "--usable",
            "26",
            "--root",
            host.to_str().unwrap(),
            "--json",
        ];
        args.extend_from_slice(extra);
        ok_json(&args)
    };
    let pools = |v: &serde_json::Value| {
        let p = &v["pools"];
        [
            v["left"].clone(),
            p["preprocess_threads"].clone(),
            p["png_threads"].clone(),
            p["encode_workers"].clone(),
            p["copy_workers"].clone(),
        ]
        .map(|n| n.as_u64().unwrap())
    };
    // The hook's plan (the default): the API server's whole core (55,167) reserved, and the
    // pools split per process, so preprocess_threads is also at most left less the 8 workers.
    let hook = plan(&[]);
    assert_eq!(hook["result"]["cpus"], "55,167");
    assert_eq!(hook["pool_split"], "per-process");
    assert_eq!(pools(&hook), [8, 1, 2, 4, 2]);
    // One process drives every GPU: no cap.
    let off = plan(&["--pool-split", "off"]);
    assert_eq!(
        (off["pool_split"].as_str(), pools(&off)),
        (Some("off"), [8, 2, 2, 4, 2])
    );
    // The seed's deployment_plan: its result is one CPU (the lowest of the core), pinned and
    // left count that one, and preprocess_threads is a quarter of left (1 to 4): pinned 17,
    // left 26 - 17 = 9, preprocess_threads = png_threads = 9 / 4 = 2, encode_workers 9 / 2 = 4,
    // copy_workers 9 / 4 = 2.
    let seed = plan(&["--seed"]);
    assert_eq!(seed["result"]["cpus"], "55");
    assert_eq!(seed["pinned"], "0-3,55-59,112-115,168-171");
    assert_eq!(pools(&seed), [9, 2, 2, 4, 2]);
    assert_eq!(
        seed["workers"], hook["workers"],
        "the workers' cores are the hook's"
    );
    let why = seed["why"].as_str().unwrap();
    assert!(
        why.ends_with("; the seed's form: the API server's result cpu 55 (the lowest of its core), pools not split"),
        "{why}"
    );
    // The table says which.
    let text = ok_text(&[
        "plan",
        "--setting",
        "auto",
        "--devices",
        gpus,
        "--mask",
        "0-223",
        "--usable",
        "26",
        "--root",
        host.to_str().unwrap(),
        "--seed",
    ]);
    assert!(
        text.contains("pools: left 9 -> preprocess_threads 2, png_threads 2")
            && text.contains("processes (pool_split off)"),
        "{text}"
    );
    super::bad(
        &[
            "plan",
            "--setting",
            "off",
            "--devices",
            "-",
            "--mask",
            "0",
            "--usable",
            "1",
            "--seed",
            "--pool-split",
            "off",
        ],
        "--seed and --pool-split: give one of them",
    );
    super::bad(
        &[
            "plan",
            "--setting",
            "off",
            "--devices",
            "-",
            "--mask",
            "0",
            "--usable",
            "1",
            "--pool-split",
            "whole",
        ],
        "plan: --pool-split: pool_split \"whole\" is not per-process or off",
    );
    let help = ok_text(&["plan", "--help"]);
    assert!(
        help.contains("--seed: the seed's deployment_plan exactly")
            && help.contains("split per process (pool_split per-process"),
        "{help}"
    );
}
