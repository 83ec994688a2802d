//! Rank placement on the NRI route: the real `cpuplan-nri` (external mode) on the private
//! containerd of `crates/test-support/src/cri/`, a container given both GPUs of the fake host,
//! and launchers written as busybox shell scripts that start workers with `LOCAL_RANK` (or
//! Open MPI's variable) without sourcing anything. Each worker's `Cpus_allowed_list`, read on
//! the host from `/proc`, becomes its GPU's CPUs within a bounded wait.
//!
//! The fake host (`cri::gpu_host`) with GPU 0 `0000:3b:00.0` made local to CPU 0 (the harness
//! makes it local to 0-1) and GPU 1 `0000:86:00.0` local to CPU 1: on this 2-CPU machine the
//! container keeps CPUs 0-1 (its GPUs' local CPUs are all of them), worker 0's are `0` and
//! worker 1's `1`, both CPUs that exist, so the affinity the plugin sets is real.
//!
//! What the plugin shows of it is checked too: its `/metrics` count the processes by outcome
//! (`cpuplan_nri_placements_total`), and each container's `plan.json` lists its workers' CPUs.
//!
//! What is never waited for is shown by ordering instead: a process that must stay on the
//! container's CPUs started before a worker whose placement the test waits for, and the plugin
//! handles the kernel's events in order.

use common::cri;
use common::nriplugin;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cri::{annotations, gpu_host, Containerd, CriNode};
use nriplugin::{context, nri_dir, plugin_config, wait_until, Plugin};
use serde_json::{json, Value};

/// A free loopback address for the plugin's metrics listener.
fn free_address() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// The plugin's `/metrics` at `address` (empty where nothing answers).
fn scrape(address: SocketAddr) -> String {
    let Ok(mut s) = TcpStream::connect_timeout(&address, Duration::from_secs(2)) else {
        return String::new();
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let asked = write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    );
    let mut text = String::new();
    if asked.is_err() || s.read_to_string(&mut text).is_err() {
        return String::new();
    }
    text.split_once("\r\n\r\n")
        .map_or_else(String::new, |(_, body)| body.to_string())
}

/// `cpuplan_nri_placements_total{outcome}` in `scrape` (`None` where it is not served).
fn placements(scrape: &str, outcome: &str) -> Option<f64> {
    let name = format!(r#"cpuplan_nri_placements_total{{outcome="{outcome}"}} "#);
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(&name))
        .and_then(|v| v.trim().parse().ok())
}

/// The plugin's `plan.json` of container `id` on `node`.
fn plan_of(node: &CriNode, id: &str) -> Value {
    let path = nri_dir(node).join(id).join("plan.json");
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

/// A plugin of `node` serving its metrics at a free loopback address, registered and
/// synchronized: the plugin and the address.
fn plugin_with_metrics(node: &CriNode, cfg: &std::path::Path) -> (Plugin, SocketAddr) {
    let address = free_address();
    let plugin = Plugin::spawn(node, cfg, &[&format!("--metrics-address={address}")]);
    plugin.wait_for(node, "nri: synchronized with", 1);
    (plugin, address)
}

/// Every process of the host whose environment holds `TAG=<tag>`, with its CPUs
/// (`Cpus_allowed_list`).
fn tagged(tag: &str) -> Vec<(i32, String)> {
    let want = format!("TAG={tag}");
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if !env.split(|b| *b == 0).any(|v| v == want.as_bytes()) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        if let Some(cpus) = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        {
            out.push((pid, cpus.trim().to_string()));
        }
    }
    out
}

/// Whether at least `n` processes carry `tag` and every one of them runs on `cpus`.
fn all_on(tag: &str, n: usize, cpus: &str) -> bool {
    let procs = tagged(tag);
    procs.len() >= n && procs.iter().all(|(_, c)| c == cpus)
}

/// A tag no other test run shares.
fn unique_tag() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("rk{}x{nanos}", std::process::id())
}

/// The plugin's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn workers_are_placed_on_their_gpu_s_cpus_and_nothing_else_moves(c: Containerd) {
    let node = CriNode::on(c);
    let cfg = plugin_config(&node, json!({"step_thread_core": "off"}));
    let host = gpu_host(node.root());
    std::fs::write(
        host.join("sys/bus/pci/devices/0000:3b:00.0/local_cpulist"),
        "0\n",
    )
    .unwrap();
    node.start();
    let (plugin, metrics) = plugin_with_metrics(&node, &cfg);
    // Every outcome served from the start, at 0.
    let first = scrape(metrics);
    for outcome in [
        "placed",
        "already_inside",
        "elsewhere",
        "bad_signal",
        "gone",
    ] {
        assert_eq!(placements(&first, outcome), Some(0.0), "{outcome}: {first}");
    }
    let ctx = || {
        format!(
            "{}\n--- tagged: {:?}",
            context(&node, &plugin.log()),
            tagged("")
        )
    };
    let t = unique_tag();
    let both = |config| node.with_gpu(node.with_gpu(config, 0), 1);
    let pod = node.run_pod(node.pod_config("ranks"), "");

    // Placement off by annotation: started first, its worker must never move.
    let mut off = both(node.container_config(
        "off",
        &format!("env LOCAL_RANK=1 TAG={t}-off sleep 3600 & echo '--- end'; exec sleep 3600"),
    ));
    off.annotations = annotations(&[("cpuplan.rank-placement", "off")]);
    let (off_id, _) = node.start_until(&pod, &off, "--- end");
    wait_until("the unplaced worker to run", ctx, || {
        !tagged(&format!("{t}-off")).is_empty()
    });

    // A bad annotation: one line naming it, and the container starts unplaced.
    let mut bad = both(node.container_config(
        "bad",
        &format!("env LOCAL_RANK=1 TAG={t}-bad sleep 3600 & echo '--- end'; exec sleep 3600"),
    ));
    bad.annotations = annotations(&[("cpuplan.rank-placement", "maybe")]);
    node.start_until(&pod, &bad, "--- end");
    wait_until("the bad annotation's worker to run", ctx, || {
        !tagged(&format!("{t}-bad")).is_empty()
    });

    // The launcher: worker 0 forks a child at once (a subshell that never execs), worker 1,
    // an MPI-style worker, a process with no rank, and later a worker restarted.
    let script = format!(
        "env TAG={t}-none sleep 3600 &
env LOCAL_RANK=0 TAG={t}-w0 sh -c '( while :; do sleep 1; done ) & exec sleep 3600' &
env LOCAL_RANK=1 TAG={t}-w1 sleep 3600 &
env OMPI_COMM_WORLD_LOCAL_RANK=0 TAG={t}-mpi sleep 3600 &
env LOCAL_RANK=0 TAG={t}-own taskset -c 1 sleep 3600 &
echo '--- end'
while [ ! -e /sig/restart ]; do sleep 1; done
env LOCAL_RANK=1 TAG={t}-late sleep 3600 &
while [ ! -e /sig/again ]; do sleep 1; done
env LOCAL_RANK=0 TAG={t}-again sleep 3600 &
exec sleep 3600"
    );
    let sig = node.path(&format!("sig-{t}"));
    std::fs::create_dir_all(&sig).unwrap();
    let mut launcher = both(node.container_config("launcher", &script));
    launcher.mounts.push(cri::cri::Mount {
        container_path: "/sig".into(),
        host_path: sig.display().to_string(),
        ..Default::default()
    });
    let (launcher_id, _) = node.start_until(&pod, &launcher, "--- end");
    // Its plan.json lists each worker's CPUs, the ones its processes are placed on; the
    // container whose placement is off lists none.
    let plan = plan_of(&node, &launcher_id);
    assert_eq!(plan["worker_placement"], json!(["0", "1"]), "{plan}");
    let unplaced = plan_of(&node, &off_id);
    assert!(unplaced.get("worker_placement").is_none(), "{unplaced}");
    wait_until("worker 0 and the child it forked on CPU 0", ctx, || {
        all_on(&format!("{t}-w0"), 2, "0")
    });
    wait_until("worker 1 on CPU 1", ctx, || {
        all_on(&format!("{t}-w1"), 1, "1")
    });
    wait_until("the MPI worker 0 on CPU 0", ctx, || {
        all_on(&format!("{t}-mpi"), 1, "0")
    });
    // A worker that moves itself elsewhere (taskset onto worker 1's CPU) is left there, and
    // counted.
    wait_until(
        "the worker that placed itself to stay on CPU 1",
        ctx,
        || {
            all_on(&format!("{t}-own"), 1, "1")
                && placements(&scrape(metrics), "elsewhere").is_some_and(|n| n >= 1.0)
        },
    );
    // Worker 0's shell, worker 1, the MPI worker: placed; worker 0's `exec sleep` found it
    // already inside its CPUs.
    let now = scrape(metrics);
    assert!(placements(&now, "placed").unwrap() >= 3.0, "{now}");
    assert!(placements(&now, "already_inside").unwrap() >= 1.0, "{now}");
    assert_eq!(placements(&now, "bad_signal"), Some(0.0), "{now}");
    // A worker started later: the launcher starts it once the file is there.
    std::fs::write(sig.join("restart"), "").unwrap();
    wait_until("the restarted worker 1 on CPU 1", ctx, || {
        all_on(&format!("{t}-late"), 1, "1")
    });
    // Started before the late worker, so handled before it: left on the container's CPUs.
    for tag in ["none", "off", "bad"] {
        let procs = tagged(&format!("{t}-{tag}"));
        assert!(
            !procs.is_empty() && procs.iter().all(|(_, c)| c == "0-1"),
            "{tag}: {procs:?}\n{}",
            ctx()
        );
    }
    let log = plugin.log();
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("annotation cpuplan.rank-placement") && l.contains("\"maybe\""))
            .count(),
        1,
        "{log}"
    );

    // A hostile image: bad ranks, a rank past the GPUs, and thousands of short-lived workers.
    let before = rss_kib(plugin.pid());
    let hostile = format!(
        "for r in -1 99999999999999999999 abc 2 ''; do env LOCAL_RANK=\"$r\" TAG={t}-h sleep 3600 & done
i=0; while [ $i -lt 3000 ]; do env LOCAL_RANK=$((i % 2)) true; i=$((i+1)); done
env LOCAL_RANK=0 TAG={t}-after sleep 3600 &
echo '--- end'; exec sleep 3600"
    );
    let h = both(node.container_config("hostile", &hostile));
    node.start_until(&pod, &h, "--- end");
    // Its last worker: once it is placed, every event before it was handled.
    wait_until("a worker after the flood on CPU 0", ctx, || {
        all_on(&format!("{t}-after"), 1, "0")
    });
    let bad_ranks = tagged(&format!("{t}-h"));
    assert!(
        bad_ranks.len() == 5 && bad_ranks.iter().all(|(_, c)| c == "0-1"),
        "no bad rank is placed: {bad_ranks:?}"
    );
    // Each of the five counted as a bad signal.
    let flooded = scrape(metrics);
    assert!(
        placements(&flooded, "bad_signal").unwrap() >= 5.0,
        "{flooded}"
    );
    // No other container touched, the plugin up, its memory bounded, its notes few.
    assert!(all_on(&format!("{t}-w0"), 2, "0") && all_on(&format!("{t}-w1"), 1, "1"));
    assert!(
        all_on(&format!("{t}-off"), 1, "0-1"),
        "{:?}",
        tagged(&format!("{t}-off"))
    );
    assert!(
        std::path::Path::new(&format!("/proc/{}", plugin.pid())).exists(),
        "{}",
        ctx()
    );
    let after = rss_kib(plugin.pid());
    assert!(
        after < before + 16 * 1024,
        "the plugin grew from {before} KiB to {after} KiB"
    );
    let log = plugin.log();
    let notes: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("rank placement") && l.contains("is not a rank"))
        .collect();
    assert!(
        !notes.is_empty() && notes.len() <= 4,
        "one line each, at most 4 per container: {notes:?}"
    );
    assert!(!log.contains("panicked"), "{log}");

    // The plugin restarted: the running launcher's next worker is placed all the same.
    drop(plugin);
    let (plugin, _) = plugin_with_metrics(&node, &cfg);
    std::fs::write(sig.join("again"), "").unwrap();
    wait_until(
        "a worker started after the plugin restarted on CPU 0",
        || context(&node, &plugin.log()),
        || all_on(&format!("{t}-again"), 1, "0"),
    );
}

crate::on_both!(workers_are_placed_on_their_gpu_s_cpus_and_nothing_else_moves);
