//! The NRI plugin's metrics and probes on a real containerd (1.7 and 2.x) driven through CRI
//! (`crates/test-support/src/cri/`): the plugin started before the runtime (its NRI socket missing) is
//! live but not ready; registered, it is ready and its `/metrics` count the containers created
//! by outcome, time CreateContainer, and show the GPU claim it holds and the one it could not
//! take; once containerd is gone it is not ready within seconds. Each probe is asked both ways:
//! the exec form the DaemonSet runs (`nri --probe ready|live`, reading the state file) and the
//! listener's `/readyz` and `/healthz`. In a rollout, the new plugin standing by behind the old
//! one is ready, and registers once the old one is gone.

use common::cri;
use common::nriplugin;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use cri::{annotations, quota, Containerd, CriNode};
use nriplugin::{context, plugin_config, state_file, wait_until, Plugin, PROBE};

use common::hookbin::nri_bin;
use serde_json::json;

/// How long after containerd goes the plugin must say it is not ready.
const NOT_READY_WITHIN: Duration = Duration::from_secs(5);

/// A free loopback address for the plugin's listener.
fn free_address() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// `GET path` at `address`: the status code and the body (`None` where nothing listens).
fn get(address: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&address, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

/// The value of the sample `name` (with its labels as written) in a scrape, 0 where absent.
fn sample(scrape: &str, name: &str) -> f64 {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

/// The exec probe as the chart's DaemonSet runs it (`cpuplan-nri --probe WHICH`: tests/packaging/kubernetes.rs
/// checks the chart's command), with the test's state file: whether it passed, and its line.
fn probe(state: &Path, which: &str) -> (bool, String) {
    let out = Command::new(nri_bin())
        .args(["--probe", which, "--state"])
        .arg(state)
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(line.lines().count(), 1, "one line: {line:?}");
    (out.status.success(), line)
}

fn metrics_count_containers_and_readiness_follows_the_runtime(c: Containerd) {
    let node = CriNode::on(c);
    let address = free_address();
    let cfg = plugin_config(&node, json!({"metrics": {"address": address.to_string()}}));
    let state = state_file(&node);

    // Before the runtime: the NRI socket is missing. Live, not ready, registered 0.
    let plugin = Plugin::spawn(&node, &cfg, &[]);
    let ctx = || context(&node, &plugin.log());
    wait_until("the plugin's listener", ctx, || {
        get(address, "/healthz").is_some()
    });
    wait_until("the plugin's state file", ctx, || state.exists());
    std::thread::sleep(Duration::from_secs(1));
    let (ready, line) = probe(&state, "ready");
    assert!(!ready, "{line}\n{}", ctx());
    assert!(
        line.starts_with("not ready: pid ") && line.ends_with("not registered with the runtime"),
        "{line}"
    );
    assert!(probe(&state, "live").0, "{}", ctx());
    assert_eq!(get(address, "/readyz").unwrap().0, 503);
    assert_eq!(get(address, "/healthz").unwrap().0, 200);
    let scrape = get(address, "/metrics").unwrap().1;
    assert_eq!(sample(&scrape, "cpuplan_nri_registered"), 0.0, "{scrape}");
    assert!(
        plugin.count("nri: registered as") == 0,
        "no runtime yet\n{}",
        ctx()
    );

    // The runtime comes: registered, ready.
    node.start();
    plugin.wait_for(&node, "nri: synchronized with", 1);
    wait_until("the exec probe to pass", ctx, || probe(&state, "ready").0);
    assert_eq!(
        get(address, "/readyz").unwrap(),
        (200, "registered with the runtime\n".into())
    );
    let scrape = get(address, "/metrics").unwrap().1;
    assert_eq!(sample(&scrape, "cpuplan_nri_registered"), 1.0, "{scrape}");
    assert_eq!(sample(&scrape, "cpuplan_nri_registrations_total"), 1.0);
    let create = r#"{request="CreateContainer""#;
    let outcome = |s: &str, o: &str| {
        sample(
            s,
            &format!(r#"cpuplan_nri_containers_total{create},outcome="{o}"}}"#),
        )
    };
    assert_eq!(outcome(&scrape, "off"), 0.0, "{scrape}");

    // A container whose pod says `off`: one more `off`, and a handling time.
    let mut pc = node.pod_config("off");
    pc.annotations = annotations(&[("cpuplan.step-thread-core", "off")]);
    let pod = node.run_pod(pc, "");
    let ran = node.run_container(
        &pod,
        quota(node.container_config("app", PROBE), 100000, 100000),
    );
    assert_eq!(ran.exit_code, 0, "{}\n{}", ran.log, ctx());
    let scrape = get(address, "/metrics").unwrap().1;
    assert_eq!(outcome(&scrape, "off"), 1.0, "{scrape}");
    let count = format!("cpuplan_nri_request_duration_seconds_count{create}}}");
    assert!(sample(&scrape, &count) >= 1.0, "{scrape}");
    let sum = format!("cpuplan_nri_request_duration_seconds_sum{create}}}");
    assert!(sample(&scrape, &sum) > 0.0, "{scrape}");
    assert!(
        sample(&scrape, "cpuplan_nri_inventory_rebuilds_total") >= 1.0,
        "{scrape}"
    );
    assert_eq!(sample(&scrape, "cpuplan_nri_claims_held"), 0.0, "{scrape}");

    // A GPU container that stays: its claim is held; a second one on the same GPU falls back.
    let sleeper = format!("{PROBE}; exec sleep 3600");
    let pod_a = node.run_pod(node.pod_config("gpu-a"), "");
    let ca = node.with_gpu(node.container_config("a", &sleeper), 0);
    let (a, _) = node.start_until(&pod_a, &ca, "--- end");
    let pod_b = node.run_pod(node.pod_config("gpu-b"), "");
    let b = node.run_container(&pod_b, node.with_gpu(node.container_config("b", PROBE), 0));
    assert_eq!(b.exit_code, 0, "{}", b.log);
    let scrape = get(address, "/metrics").unwrap().1;
    assert_eq!(sample(&scrape, "cpuplan_nri_claims_held"), 1.0, "{scrape}");
    assert_eq!(
        sample(
            &scrape,
            r#"cpuplan_nri_fallbacks_total{cause="claim_held"}"#
        ),
        1.0,
        "{scrape}"
    );
    // On 2 CPUs `auto` pins nothing: both GPU containers are sized.
    assert_eq!(outcome(&scrape, "sized"), 2.0, "{scrape}");
    assert!(
        !scrape.contains(&a) && !scrape.contains(&b.id) && !scrape.contains("gpu-a"),
        "no container id or pod name is a label:\n{scrape}"
    );
    node.stop_container(&a, 0);
    wait_until("the claim's release", ctx, || {
        sample(
            &get(address, "/metrics").unwrap().1,
            "cpuplan_nri_claims_held",
        ) == 0.0
    });

    // The runtime goes: not ready within a few seconds, still live.
    node.stop_daemon();
    let gone = Instant::now();
    wait_until("the exec probe to fail", ctx, || !probe(&state, "ready").0);
    let (_, line) = probe(&state, "ready");
    eprintln!(
        "{}: not ready {:?} after containerd stopped",
        c.name(),
        gone.elapsed()
    );
    assert!(
        gone.elapsed() < NOT_READY_WITHIN,
        "not ready {:?} after containerd stopped: {line}",
        gone.elapsed()
    );
    assert!(line.ends_with("not registered with the runtime"), "{line}");
    assert_eq!(get(address, "/readyz").unwrap().0, 503);
    assert!(probe(&state, "live").0, "{}", ctx());
    assert_eq!(get(address, "/healthz").unwrap().0, 200);
    let scrape = get(address, "/metrics").unwrap().1;
    assert_eq!(sample(&scrape, "cpuplan_nri_registered"), 0.0, "{scrape}");

    // The plugin gone: its state goes stale and both probes fail.
    drop(plugin);
    let stale = Instant::now() + Duration::from_secs(12);
    while Instant::now() < stale && probe(&state, "live").0 {
        std::thread::sleep(Duration::from_millis(500));
    }
    let (live, line) = probe(&state, "live");
    assert!(!live && line.ends_with("wedged or gone"), "{line}");
}

/// A rollout: the new plugin waits for the old one to exit (one plugin per `nri_dir`) and is
/// ready meanwhile, since the DaemonSet removes the old pod only once the new one is ready.
fn a_rollout_s_new_plugin_is_ready_while_it_stands_by(c: Containerd) {
    let node = CriNode::on(c);
    let cfg = plugin_config(&node, json!({}));
    node.start();
    let old = Plugin::external(&node, &cfg);
    let new_state = node.path("run/cpuplan-nri/new-state");
    let new = Plugin::spawn(&node, &cfg, &["--state", &new_state.display().to_string()]);
    let ctx = || context(&node, &new.log());
    new.wait_for(&node, "waiting for it to exit before connecting", 1);
    wait_until("the new plugin to stand by", ctx, || {
        probe(&new_state, "ready").0
    });
    let (ready, line) = probe(&new_state, "ready");
    assert!(
        ready && line.ends_with("standing by: an earlier instance serves the plan directory"),
        "{line}\n{}",
        ctx()
    );
    assert_eq!(new.count("nri: registered as"), 0, "{}", ctx());
    let (ready, line) = probe(&state_file(&node), "ready");
    assert!(
        ready && line.ends_with("registered with the runtime"),
        "the old one: {line}"
    );
    drop(old);
    new.wait_for(&node, "nri: synchronized with", 1);
    wait_until("the new plugin's readiness as registered", ctx, || {
        probe(&new_state, "ready")
            .1
            .ends_with("registered with the runtime")
    });
}

crate::on_both!(
    metrics_count_containers_and_readiness_follows_the_runtime,
    a_rollout_s_new_plugin_is_ready_while_it_stands_by,
);
