//! A rollout of the NRI DaemonSet as its strategy makes it (maxSurge 1, maxUnavailable 0).

use common::runc::line_value;
use serde_json::json;

use super::{
    api, claims, context, node, on_node, plugin_log, quota, quota_pod, rendered, run_daemonset_pod,
    section, synchronized, up, wait_until, PROBE,
};

/// The pid of the process that wrote the first line of `log` holding `what`
/// (`TIME LEVEL PROGRAM[PID]: …`).
fn pid_of(log: &str, what: &str) -> Option<u32> {
    let line = log.lines().find(|l| l.contains(what))?;
    let program = line.split(' ').nth(2)?;
    let (_, rest) = program.split_once('[')?;
    rest.split_once(']')?.0.parse().ok()
}

/// How many lines of `log` contain `what`.
fn lines_with(log: &str, what: &str) -> usize {
    log.lines().filter(|l| l.contains(what)).count()
}

/// A rollout as the DaemonSet's strategy makes it (maxSurge 1, maxUnavailable 0): a second
/// plugin pod starts while the first runs, then the first stops. The second waits for the
/// first to exit before it connects (one plugin per `nri_dir`), so a pod created during the
/// overlap is planned once, by the first, and starts (two registered instances both adjusting
/// it made containerd refuse it: "plugins \"10-cpuplan\" and \"10-cpuplan\" both tried to set
/// annotation cpuplan.plan"). A GPU pod planned before and one planned during the overlap keep
/// their claims, taken over by the new plugin at its Synchronize (a second GPU pod on the same
/// GPU gets none), pods planned after get their plans from the new plugin, the new plugin pod
/// is not planned by the old plugin, and the claims are released at the end.
#[test]
fn a_rollout_keeps_plans_and_claims() {
    let node = node();
    let r = rendered();
    let old = up(&node, &r);
    let old_pid = pid_of(&plugin_log(&node), "nri: registered as").unwrap();
    let gpu = node.run_pod(node.pod_config("gpu"), "");
    let c = node.with_gpu(
        node.container_config("gpu", &format!("{PROBE}; exec sleep 3600")),
        0,
    );
    let (holder, _) = node.start_until(&gpu, &c, "--- end");
    assert_eq!(claims(&node)[0]["holder"]["container"], holder.as_str());

    // The new pod starts while the old one runs, and waits for it.
    let new = run_daemonset_pod(&node, &r, 1);
    let waiting = "waiting for it to exit before connecting";
    wait_until("the new plugin to wait for the old one", &node, || {
        plugin_log(&node).contains(waiting)
    });
    let new_pid = pid_of(&plugin_log(&node), waiting).unwrap();
    assert_ne!(new_pid, old_pid);
    assert!(
        plugin_log(&node).contains(&format!("another cpuplan plugin (pid {old_pid}) serves")),
        "{}",
        context(&node)
    );
    let spec = node.oci_spec(&new.container);
    assert!(
        spec["annotations"].get("cpuplan.plan").is_none(),
        "the old plugin planned the new plugin's own pod: {}",
        spec["annotations"]
    );
    let plan_mount = spec["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["destination"] == "/run/cpuplan")
        .expect("the DaemonSet's /run/cpuplan");
    assert_eq!(
        plan_mount["source"],
        on_node(&node, "/run/cpuplan").display().to_string(),
        "the new plugin's hostPath /run/cpuplan is its own, not a plan mount over it"
    );

    // During the overlap: a GPU pod (the other GPU) with a volume under the plan directory, so
    // planned env-only, which no second instance would have left alone.
    let during = node.run_pod(node.pod_config("during"), "");
    let vol = node.path("during-volume");
    std::fs::create_dir_all(&vol).unwrap();
    let mut dc = node.with_gpu(
        quota(
            node.container_config("app", &format!("{PROBE}; exec sleep 3600")),
            100000,
            100000,
        ),
        1,
    );
    dc.mounts.push(api::Mount {
        container_path: "/dev/cpuplan/data".into(),
        host_path: vol.display().to_string(),
        ..Default::default()
    });
    let (overlapped, log) = node.start_until(&during, &dc, "--- end");
    let env: Vec<&str> = section(&log, "env").lines().collect();
    assert!(
        env.contains(&"OMP_NUM_THREADS=1") && env.contains(&"CPUPLAN_DEVICES=0000:86:00.0"),
        "{env:?}\n{}",
        context(&node)
    );
    let plog = plugin_log(&node);
    assert_eq!(
        lines_with(&plog, "nri: create during/app"),
        1,
        "planned once: {plog}"
    );
    assert_eq!(
        pid_of(&plog, "nri: create during/app"),
        Some(old_pid),
        "{plog}"
    );
    assert!(
        !node.log().contains("both tried to set"),
        "{}",
        context(&node)
    );
    assert_eq!(synchronized(&node), 1, "the new one has not connected");

    // The old one stops; the new one connects and takes the claims over.
    node.stop_container(&old.container, 10);
    node.remove_container(&old.container);
    node.remove_pod(&old.pod);
    wait_until("the new plugin to synchronize", &node, || {
        synchronized(&node) >= 2
    });
    let exited = format!("the plugin before this one (pid {old_pid}) has exited: connecting");
    assert_eq!(pid_of(&plugin_log(&node), &exited), Some(new_pid));

    // Planned before and during: each still holds its GPU, now under the new plugin, live.
    let held = claims(&node);
    let ctx = || format!("{held}\n{}", context(&node));
    assert_eq!(held.as_array().map(Vec::len), Some(2), "{}", ctx());
    for (claim, (address, container)) in held
        .as_array()
        .unwrap()
        .iter()
        .zip([("0000:3b:00.0", &holder), ("0000:86:00.0", &overlapped)])
    {
        assert_eq!(claim["address"], address, "{}", ctx());
        assert_eq!(
            claim["holder"]["container"],
            container.as_str(),
            "{}",
            ctx()
        );
        assert_eq!(claim["holder"]["pid"], new_pid, "taken over: {}", ctx());
        assert_eq!(claim["live"], true, "{}", ctx());
    }
    let other = node.run_pod(node.pod_config("gpu-other"), "");
    let ran = node.run_container(&other, node.with_gpu(node.container_config("b", PROBE), 0));
    assert_eq!(ran.exit_code, 0, "{}", ran.log);
    let why = line_value(section(&ran.log, "planenv"), "CPUPLAN_WHY").unwrap_or_default();
    assert!(
        why.contains("pins nothing") && why.contains("held by"),
        "{why}\n{}",
        context(&node)
    );
    node.remove_container(&ran.id);
    node.remove_pod(&other);
    // Planned after: by the new plugin.
    let (pod, ran) = quota_pod(&node, "after");
    assert_eq!(
        pid_of(&plugin_log(&node), "nri: create after/app"),
        Some(new_pid)
    );
    node.remove_container(&ran.id);
    node.remove_pod(&pod);
    // The holders' removal releases their claims, through the new plugin.
    node.remove_container(&holder);
    node.remove_container(&overlapped);
    wait_until("the GPU claims' release", &node, || {
        claims(&node) == json!([])
    });
    node.remove_pod(&gpu);
    node.remove_pod(&during);
    node.remove_container(&new.container);
    node.remove_pod(&new.pod);
}
