//! What the NRI plugin costs a pod's start, what its CreateContainer handling takes, and its
//! memory over many containers; next to the OCI hook's cost measured the same way.
//!
//! ```sh
//! cargo bench -p cpuplan-hook --bench nri_pod_start -- [--rounds N] [--containers M] [--passes P] [--logs DIR]
//! ```
//! (as root, with containerd 1.7, runc, busybox-static; defaults N = 30, M = 1000, P = 3; a
//! few minutes after the release build; `--logs` copies the plugin's logs into DIR; `--plugin
//! PATH` runs another build's binary as the plugin, for an A/B of two builds in one session.)
//!
//! Two identical private containerd 1.7 nodes (`crates/test-support/src/cri/`, NRI on in both), driven
//! through CRI, each with a runtime handler `hooked` that runs the OCI hook through
//! `base_runtime_spec` (what `install --containerd` writes). The plugin (`cpuplan-nri`,
//! release build) is connected to one node for the first half of the rounds and to the other
//! for the second half, so that the nodes' differences cancel. Each round starts one pod of each
//! variant in a rotating order, timed from RunPodSandbox through StartContainer (and
//! CreateContainer alone), and removes it untimed. The ratio judged against the target is the
//! median of the rounds' own b/a (each round's pods start side by side, so the machine's drift
//! cancels); the ratio of the medians is printed beside it:
//!   (a) the node without the plugin, handler runc: no plugin, no hook;
//!   (b) the node with the plugin, handler runc: the plugin plans it at CreateContainer;
//!   (c) the node without the plugin, handler hooked: the hook plans it at createRuntime.
//! The container is busybox `true` with a 1-CPU quota and GPU 0 (`/dev/nvidia0` as a CRI
//! device), the topology the 224-CPU, 8-GPU host of `examples/host`, `step_thread_core auto`:
//! the plugin and the hook each read, decide, claim the GPU, write the plan and release it.
//! Plans and claims are on a tmpfs, as `/run/cpuplan` is on a systemd host.
//!
//! Then P passes of M containers are created and removed (not started) in one pod of the
//! plugin's node, and the plugin's VmRSS and VmHWM (`/proc/<pid>/status`) are read before and
//! every P·M/10 containers. The plugin's handling time of every CreateContainer is its own log
//! line (`nri: create ...: adjusted in X ms (on CPU Y ms, preempted N times, blocked K times)`: on the worker
//! thread that answers, from the request's payload to the answer, an uncontended claim
//! included; not the transport's threads before and after). The wall clock holds the waits for
//! a CPU on a busy machine; the CPU time and the preemptions say how much was the plugin's own
//! work. Each pass is reported on its own (the machine's load drifts) and all together.

extern crate cpuplan_test_support as common;

/// Fails this binary at exit when the host's real hook log changed while it ran
/// (`common::log_guard`): an ELF constructor, before `main` and any test thread.
#[used]
#[link_section = ".init_array"]
static LOG_GUARD: extern "C" fn() = common::log_guard::start;

use common::cri;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cpuplan_hook::install::containerd::{self, Containerd};
use cpuplan_hook::install::Layout;
use cri::{cri as api, quota, CriNode, NodeOptions, Pod};
use serde_json::json;

/// The OCI hook the `hooked` handler runs.
const HOOK: &str = env!("CARGO_BIN_EXE_cpuplan-hook");
/// The NRI plugin.
const NRI: &str = env!("CARGO_BIN_EXE_cpuplan-nri");

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} takes a number, not {v:?}"))
        })
        .unwrap_or(default)
}

/// Mounts a tmpfs at `T/run/cpuplan` (the node's Drop unmounts everything under `T`).
fn tmpfs_plans(node: &CriNode) -> PathBuf {
    let dir = node.path("run/cpuplan");
    std::fs::create_dir_all(&dir).unwrap();
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "mode=755", "tmpfs"])
        .arg(&dir)
        .status()
        .unwrap();
    assert!(ok.success(), "mount a tmpfs at {}", dir.display());
    dir
}

/// The hook config of `node`: the examples' 224-CPU host, plans and claims on the tmpfs.
fn config(node: &CriNode, plans: &Path) -> PathBuf {
    let host = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/host");
    let cfg = json!({
        "step_thread_core": "auto",
        "topology_root": host,
        "claims_dir": plans.join("claims"),
        "nri_dir": plans.join("nri"),
        "log": node.path("var/log/cpuplan.log"),
    });
    let p = node.path("etc/cpuplan/hook.json");
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
    p
}

/// Kills the plugin when dropped.
struct Plugin(Child);

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// VmRSS and VmHWM of `pid`, in KiB.
fn memory(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// The container every variant starts: busybox `true`, a 1-CPU quota, GPU 0.
fn container(node: &CriNode, name: &str, script: &str) -> api::ContainerConfig {
    quota(
        node.with_gpu(node.container_config(name, script), 0),
        100000,
        100000,
    )
}

/// Starts one pod with its container under `handler`; the times RunPodSandbox through
/// StartContainer and CreateContainer alone took, in ms. Removes both afterwards, untimed.
fn pod_start(node: &CriNode, handler: &str, name: &str) -> (f64, f64) {
    let pc = node.pod_config(name);
    let c = container(node, "app", "true");
    let t = Instant::now();
    let pod = node.run_pod(pc, handler);
    let tc = Instant::now();
    let id = node.create_container(&pod, c);
    let create = tc.elapsed().as_secs_f64() * 1e3;
    node.start_container(&id);
    let ms = t.elapsed().as_secs_f64() * 1e3;
    node.wait_exit(&id, Duration::from_secs(30));
    node.remove_container(&id);
    node.remove_pod(&pod);
    (ms, create)
}

fn median(v: &[f64]) -> f64 {
    quantile(v, 0.5)
}

fn quantile(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    if s.is_empty() {
        return f64::NAN;
    }
    let i = q * (s.len() - 1) as f64;
    let (lo, hi) = (i.floor() as usize, i.ceil() as usize);
    s[lo] + (s[hi] - s[lo]) * (i - lo as f64)
}

/// One CreateContainer as the plugin logged it.
#[derive(Debug, Clone, Copy)]
struct Handled {
    wall: f64,
    cpu: Option<f64>,
    preempted: Option<i64>,
    blocked: Option<i64>,
}

/// The creates the plugin logged in `log`:
/// `adjusted in X ms (on CPU Y ms, preempted N times, blocked K times)`.
fn handled(log: &str) -> Vec<Handled> {
    log.lines()
        .filter_map(|l| l.split(": adjusted in ").nth(1))
        .filter_map(|t| {
            let wall = t.split(' ').next()?.parse().ok()?;
            let cpu = t
                .split("on CPU ")
                .nth(1)
                .and_then(|c| c.split(' ').next()?.parse().ok());
            let count = |what: &str| {
                t.split(what)
                    .nth(1)
                    .and_then(|c| c.split(' ').next()?.parse().ok())
            };
            Some(Handled {
                wall,
                cpu,
                preempted: count("preempted "),
                blocked: count("blocked "),
            })
        })
        .collect()
}

/// `p50 … p99 … max …` of the wall clock, the same of the CPU time, and the preemptions.
fn describe(h: &[Handled]) -> String {
    let wall: Vec<f64> = h.iter().map(|h| h.wall).collect();
    let cpu: Vec<f64> = h.iter().filter_map(|h| h.cpu).collect();
    let calm: Vec<f64> = h
        .iter()
        .filter(|h| h.preempted == Some(0) && h.blocked == Some(0))
        .map(|h| h.wall)
        .collect();
    let preempted = h.iter().filter(|h| h.preempted.unwrap_or(0) > 0).count();
    let blocked = h.iter().filter(|h| h.blocked.unwrap_or(0) > 0).count();
    format!(
        "p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms | on CPU p50 {:.3} p99 {:.3} ms | preempted in {} of {} ({:.1} %), blocked in {}; never off the CPU: p50 {:.3} p99 {:.3} ms",
        quantile(&wall, 0.5),
        quantile(&wall, 0.99),
        wall.iter().cloned().fold(0.0, f64::max),
        quantile(&cpu, 0.5),
        quantile(&cpu, 0.99),
        preempted,
        h.len(),
        100.0 * preempted as f64 / h.len().max(1) as f64,
        blocked,
        quantile(&calm, 0.5),
        quantile(&calm, 0.99),
    )
}

/// `/proc/loadavg`'s first three fields.
fn loadavg() -> String {
    let l = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    l.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

fn main() {
    let rounds = arg("--rounds", 30);
    let containers = arg("--containers", 1000);
    let passes = arg("--passes", 3).max(1);
    eprintln!("== load average {}", loadavg());

    // Two identical nodes, the hook registered with both for the handler `hooked`.
    let nodes = [hooked_node(), hooked_node()];
    let logs = [
        nodes[0].path("var/log/plugin.log"),
        nodes[1].path("var/log/plugin.log"),
    ];
    let read_log = |i: usize| std::fs::read_to_string(&logs[i]).unwrap_or_default();
    let (mut ta, mut tb, mut tc) = (Vec::new(), Vec::new(), Vec::new());
    let mut plugin = None;
    // The plugin on node 0 for the first half of the rounds, on node 1 for the second: (b) runs
    // on the node with the plugin, (a) and (c) on the other, so the nodes' differences cancel.
    for half in 0..2 {
        let (with, without) = (&nodes[half], &nodes[1 - half]);
        drop(plugin.take());
        plugin = Some(start_plugin(with, &logs[half]));
        eprintln!("== warm-up (3 rounds, not counted)");
        for i in 0..3 {
            pod_start(without, "", &format!("warm-a{half}-{i}"));
            pod_start(with, "", &format!("warm-b{half}-{i}"));
            pod_start(without, "hooked", &format!("warm-c{half}-{i}"));
        }
        let hook_log =
            std::fs::read_to_string(without.path("var/log/cpuplan.log")).unwrap_or_default();
        assert!(
            hook_log.contains("setting auto") && hook_log.contains("released 1 GPU claim"),
            "the hook planned and released its claim:\n{hook_log}"
        );
        assert!(
            read_log(half).contains("adjusted in"),
            "the plugin planned:\n{}",
            read_log(half)
        );
        let n = rounds / 2 + if half == 0 { rounds % 2 } else { 0 };
        eprintln!("== {n} interleaved rounds, the plugin on node {half}");
        for i in 0..n {
            for v in ["abc", "bca", "cab"][i % 3].chars() {
                match v {
                    'a' => ta.push(pod_start(without, "", &format!("a{half}-{i}"))),
                    'b' => tb.push(pod_start(with, "", &format!("b{half}-{i}"))),
                    _ => tc.push(pod_start(without, "hooked", &format!("c{half}-{i}"))),
                }
            }
        }
    }

    let node = &nodes[1];
    let pid = plugin.as_ref().unwrap().0.id();
    let mut rss = vec![(0, memory(pid))];
    let pod: Pod = node.run_pod(node.pod_config("many"), "");
    let step = (containers * passes / 10).max(1);
    let mut by_pass = Vec::new();
    for pass in 1..=passes {
        let load = loadavg();
        eprintln!("== pass {pass}: {containers} containers created and removed (load {load})");
        let before = read_log(1).len();
        for i in 1..=containers {
            let n = (pass - 1) * containers + i;
            let id = node.create_container(&pod, container(node, &format!("c{n}"), "true"));
            node.remove_container(&id);
            if n.is_multiple_of(step) {
                rss.push((n, memory(pid)));
            }
        }
        let log = read_log(1);
        by_pass.push((load, loadavg(), handled(log.get(before..).unwrap_or(""))));
    }
    node.remove_pod(&pod);
    if let Some(dir) = std::env::args().skip_while(|a| a != "--logs").nth(1) {
        for i in 0..2 {
            std::fs::write(Path::new(&dir).join(format!("plugin{i}.log")), read_log(i)).unwrap();
        }
    }

    let all = handled(&(read_log(0) + &read_log(1)));
    let times: Vec<f64> = all.iter().map(|h| h.wall).collect();
    let create = |v: &[(f64, f64)]| v.iter().map(|t| t.1).collect::<Vec<f64>>();
    let (ca, cb, cc) = (create(&ta), create(&tb), create(&tc));
    let start = |v: &[(f64, f64)]| v.iter().map(|t| t.0).collect::<Vec<f64>>();
    let (ta, tb, tc) = (start(&ta), start(&tb), start(&tc));
    let paired: Vec<f64> = tb.iter().zip(&ta).map(|(b, a)| b - a).collect();
    let (ma, mb, mc) = (median(&ta), median(&tb), median(&tc));
    println!(
        "pod start (RunPodSandbox through StartContainer), median of {rounds} interleaved rounds:"
    );
    println!(
        "  (a) no plugin, no hook              {ma:8.2} ms   (IQR {:.2}-{:.2})",
        quantile(&ta, 0.25),
        quantile(&ta, 0.75)
    );
    println!(
        "  (b) NRI plugin                      {mb:8.2} ms   (IQR {:.2}-{:.2})",
        quantile(&tb, 0.25),
        quantile(&tb, 0.75)
    );
    println!(
        "  (c) OCI hook (base_runtime_spec)    {mc:8.2} ms   (IQR {:.2}-{:.2})",
        quantile(&tc, 0.25),
        quantile(&tc, 0.75)
    );
    let ratios: Vec<f64> = tb.iter().zip(&ta).map(|(b, a)| b / a).collect();
    let ratio = median(&ratios);
    println!(
        "  b/a = {:.3}   c/a = {:.3}   median of the rounds' b - a: {:+.2} ms",
        mb / ma,
        mc / ma,
        median(&paired)
    );
    println!(
        "  the rounds' own b/a (paired, the target's measure): median {ratio:.3} (IQR {:.3}-{:.3}) (target <= 1.01)",
        quantile(&ratios, 0.25),
        quantile(&ratios, 0.75)
    );
    let cpaired: Vec<f64> = cb.iter().zip(&ca).map(|(b, a)| b - a).collect();
    println!(
        "CreateContainer alone, median: (a) {:.2} ms  (b) {:.2} ms  (c) {:.2} ms   b - a: {:+.2} ms (median of the rounds' differences {:+.2} ms)",
        median(&ca),
        median(&cb),
        median(&cc),
        median(&cb) - median(&ca),
        median(&cpaired)
    );
    println!(
        "plugin CreateContainer handling, its own log ({} creates): p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms (target p99 <= 1 ms)",
        times.len(),
        quantile(&times, 0.5),
        quantile(&times, 0.99),
        times.iter().cloned().fold(0.0, f64::max)
    );
    println!("  all: {}", describe(&all));
    for (i, (load, after, h)) in by_pass.iter().enumerate() {
        println!(
            "  pass {} ({containers} containers, load {load} -> {after}): {}",
            i + 1,
            describe(h)
        );
    }
    let line: Vec<String> = rss
        .iter()
        .map(|(n, (r, _))| format!("{n}:{:.2}", *r as f64 / 1024.0))
        .collect();
    let hwm = rss.last().map(|(_, (_, h))| *h).unwrap_or(0);
    println!(
        "plugin VmRSS in MiB after N containers created and removed: {}",
        line.join(" ")
    );
    println!(
        "plugin VmHWM {:.2} MiB (target RSS <= 8 MiB and not growing)",
        hwm as f64 / 1024.0
    );
    let mut missed = Vec::new();
    if ratio > 1.01 {
        missed.push("pod-start ratio");
    }
    if quantile(&times, 0.99) > 1.0 {
        missed.push("p99");
    }
    let (first, last) = (rss[1].1 .0, rss.last().unwrap().1 .0);
    if hwm > 8 * 1024 || last > first + 256 {
        missed.push("RSS");
    }
    println!(
        "targets: {}",
        if missed.is_empty() {
            "all met".to_string()
        } else {
            format!("MISSED: {}", missed.join(", "))
        }
    );
    drop(plugin);
}

/// A node whose runtime handler `hooked` runs the hook through `base_runtime_spec` (what
/// `install --containerd` writes), plans and claims on a tmpfs, started.
fn hooked_node() -> CriNode {
    let node = CriNode::with(NodeOptions {
        runtimes: vec![("hooked".into(), String::new())],
        ..NodeOptions::default()
    });
    let plans = tmpfs_plans(&node);
    let cfg = config(&node, &plans);
    let layout = Layout {
        prefix: node.path("usr/local"),
        hooks_dir: node.path("etc/containers/oci/hooks.d"),
        config: cfg,
    };
    std::fs::create_dir_all(layout.binary().parent().unwrap()).unwrap();
    std::fs::copy(HOOK, layout.binary()).unwrap();
    containerd::install(
        &layout,
        &Containerd {
            config: node.config_path(),
            runtimes: vec!["hooked".into()],
            ctr_root: PathBuf::from("/"),
        },
    )
    .expect("register the hook");
    node.start();
    node
}

/// The plugin's binary: `--plugin PATH`, else this build's `cpuplan-nri`.
fn plugin_bin() -> PathBuf {
    std::env::args()
        .skip_while(|a| a != "--plugin")
        .nth(1)
        .map_or_else(|| PathBuf::from(NRI), PathBuf::from)
}

/// The words before the plugin's options: a `--plugin` named `cpuplan-hook` is a build from
/// before the plugin had a binary of its own, which runs it as `cpuplan-hook nri`.
fn plugin_words(bin: &Path) -> &'static [&'static str] {
    if bin.file_name().is_some_and(|n| n == "cpuplan-hook") {
        &["nri"]
    } else {
        &[]
    }
}

/// The plugin (release build) connected to `node`, logging to `log`, synchronized.
fn start_plugin(node: &CriNode, log: &Path) -> Plugin {
    let bin = plugin_bin();
    let plugin = Plugin(
        Command::new(&bin)
            .arg("--config")
            .arg(node.path("etc/cpuplan/hook.json"))
            .args(plugin_words(&bin))
            .arg("--socket")
            .arg(node.nri_socket())
            .arg("--log")
            .arg(log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the plugin"),
    );
    let read = || std::fs::read_to_string(log).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !read().contains("nri: synchronized with") {
        assert!(
            Instant::now() < deadline,
            "the plugin did not synchronize:\n{}",
            read()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    plugin
}
