//! The hook over a fake GB200 tray whose GPUs sit on NUMA nodes without CPUs
//! (`tests/fixtures/grace/gb200-cdmm-off`): the GPUs get the cores and cpuset of the Grace node
//! nearest their memory, and a missing, malformed or tied distance table is one log line, no
//! panic, and the container starts.

use std::path::{Path, PathBuf};

use common::fakehost::{fixtures, FakeHost, PID};
use common::hookbin;
use serde_json::{json, Value};

/// A fake host over a copy of the GB200 tree (144 CPUs, all allowed, quota 8), `auto`, the
/// container given GPUs 0 and 1 (memory nodes 2 and 10, both nearest Grace node 0).
fn gb200() -> FakeHost {
    let mut h = FakeHost::new();
    let topo = h.scratch("gb200");
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(fixtures().join("grace/gb200-cdmm-off"))
        .arg(&topo)
        .status()
        .unwrap();
    assert!(st.success());
    h.hook["topology_root"] = json!(topo);
    h.hook["step_thread_core"] = json!("auto");
    std::fs::write(
        h.file(&format!("proc/{PID}/status")),
        "Name:\tsh\nCpus_allowed_list:\t0-143\n",
    )
    .unwrap();
    std::fs::write(h.file("sys/fs/cgroup/cpuset/ctr/cpuset.cpus"), "0-143\n").unwrap();
    h.env("NVIDIA_VISIBLE_DEVICES=0,1");
    h
}

fn distance(h: &FakeHost, node: u32) -> PathBuf {
    h.scratch(&format!(
        "gb200/sys/devices/system/node/node{node}/distance"
    ))
}

/// Runs the `cpuplan-hook` binary at createRuntime under `on_error: allow` (its own process,
/// so its own log); it must exit 0. Returns the plan.json it wrote and its log.
fn hook(h: &mut FakeHost) -> (Value, String) {
    h.hook["on_error"] = json!("allow");
    let (state, cfg) = h.written();
    let bin = Path::new(env!("CARGO_BIN_EXE_cpuplan-hook"));
    let out = hookbin::run_fed(&mut hookbin::create_runtime(bin, &cfg), state.as_bytes());
    assert!(
        out.status.success(),
        "allow: the container starts: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan = serde_json::from_str(&h.plan_file("plan.json").expect("plan.json")).unwrap();
    let log = std::fs::read_to_string(h.scratch("hook.log")).unwrap_or_default();
    (plan, log)
}

fn lines_with<'a>(log: &'a str, needle: &str) -> Vec<&'a str> {
    log.lines().filter(|l| l.contains(needle)).collect()
}

/// The workers' CPUs (`-` unpinned) and the API server's.
fn cpus(plan: &Value) -> (Vec<String>, Option<String>) {
    (
        plan["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["cpus"].as_str().unwrap_or("-").to_string())
            .collect(),
        plan["result"]["cpus"].as_str().map(String::from),
    )
}

#[test]
fn gpus_on_memory_nodes_get_their_grace_nodes_cores_and_cpuset() {
    let mut h = gb200();
    let (plan, log) = hook(&mut h);
    assert_eq!(
        plan["inputs"]["gpus"],
        json!(["0008:01:00.0", "0009:01:00.0"])
    );
    assert_eq!(
        plan["inputs"]["cpuset"], "0-71",
        "numa: narrowed to Grace node 0"
    );
    assert_eq!(
        cpus(&plan),
        (vec!["0".into(), "1".into()], Some("71".into()))
    );
    let placed = lines_with(&log, "has no CPUs: placed on node 0");
    assert_eq!(placed.len(), 2, "one line per GPU:\n{log}");
    assert!(placed[0].contains("gpu 0008:01:00.0: its node 2"), "{log}");
}

#[test]
fn a_malformed_distance_table_is_one_line_and_the_container_starts() {
    let mut h = gb200();
    std::fs::write(distance(&h, 2), "10 x\n").unwrap();
    let (plan, log) = hook(&mut h);
    assert_eq!(plan["pinned"], "", "{plan}");
    assert_eq!(plan["inputs"]["cpuset"], Value::Null, "the cpuset is kept");
    let lines = lines_with(&log, "gpu 0008:01:00.0: not placed: node 2 has no CPUs");
    assert_eq!(lines.len(), 1, "{log}");
    assert!(
        lines[0].contains("node2/distance") && lines[0].contains("10 x"),
        "{log}"
    );
}

#[test]
fn a_missing_distance_table_is_one_line_and_the_container_starts() {
    let mut h = gb200();
    std::fs::remove_file(distance(&h, 2)).unwrap();
    let (plan, log) = hook(&mut h);
    assert_eq!(plan["pinned"], "", "{plan}");
    // One line says what was chosen (the container's summary line carries the plan's why).
    let lines = lines_with(&log, "not placed: node 2 has no CPUs and no distance table");
    assert_eq!(lines.len(), 1, "one line for the missing table:\n{log}");
}

#[test]
fn a_tie_goes_to_the_lowest_node_in_one_line() {
    let mut h = gb200();
    // Node 10 as near node 1 as node 0.
    let path = distance(&h, 10);
    let row = std::fs::read_to_string(&path).unwrap();
    let mut cols: Vec<&str> = row.split_whitespace().collect();
    cols[1] = cols[0];
    std::fs::write(&path, cols.join(" ") + "\n").unwrap();
    let (plan, log) = hook(&mut h);
    assert_eq!(
        cpus(&plan),
        (vec!["0".into(), "1".into()], Some("71".into()))
    );
    let lines = lines_with(&log, "placed on node 0, the nearest with CPUs by the distance table (node 10 is at distance 80 from nodes 0, 1 alike: node 0, the lowest number)");
    assert_eq!(lines.len(), 1, "{log}");
    assert!(
        lines[0].contains("gpu 0009:01:00.0: its node 10 has no CPUs"),
        "{log}"
    );
}

#[test]
fn explain_draws_each_memory_node_under_the_node_it_was_placed_on() {
    let h = gb200();
    h.write();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cpuplan"))
        .args(["explain", "--no-inventory", "--bundle"])
        .arg(h.bundle())
        .arg("--config")
        .arg(h.hook_path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Node 0's row, then the two GPUs whose memory nodes 2 and 10 were placed on it.
    let node0 = text.split_once("node 0: cpus 0-71\n").expect(&text).1;
    let node1_at = node0.find("node 1: cpus 72-143").expect(&text);
    let under0 = &node0[..node1_at];
    assert!(
        under0.contains("GPU memory node 2 (no CPUs): gpu 0008:01:00.0 [0], placed on node 0\n")
            && under0
                .contains("GPU memory node 10 (no CPUs): gpu 0009:01:00.0 [1], placed on node 0\n"),
        "{text}"
    );
    assert!(
        text.contains("(gpu 0008:01:00.0 rank 0 of 2 on node 0 (nearest to its node 2): core 0 from the bottom)"),
        "{text}"
    );
}

#[test]
fn gpus_lists_the_memory_node_and_the_node_each_gpu_was_placed_on() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cpuplan"))
        .args(["gpus", "--like", "0018:01:00.0", "--root"])
        .arg(fixtures().join("grace/gb200-cdmm-off"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("0018:01:00.0  node 18  local cpus none  placed on node 1 (cpus 72-143)\n"),
        "{text}"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cpuplan"))
        .args(["gpus", "--json", "--root"])
        .arg(fixtures().join("grace/gb200-cdmm-off"))
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["node"], 2);
    assert_eq!(v[0]["cpu_node"]["nearest"]["node"], 0, "{v}");
}
