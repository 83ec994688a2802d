//! kubelet changes a running container's CPUs, on the NRI route: the private
//! containerd of `crates/test-support/src/cri/` with NRI on, the plugin started by the test, and CRI's
//! UpdateContainerResources sent as kubelet sends it:
//! - its CPU manager (static policy) sets the shared pool, only `cpuset_cpus`: the plugin runs
//!   the `numa` rule again inside it (GPU 1's container narrowed to CPU 1 again), and keeps an
//!   exclusive set (no larger than the quota's usable CPUs) as kubelet gives it;
//! - an in-place resize sets a new quota: the plan files (bind-mounted into the container) are
//!   rewritten with `CPUPLAN_USABLE` of the new quota and a higher `CPUPLAN_GENERATION`.
//!
//! The fake host (`cri::gpu_host`): GPU 0 `0000:3b:00.0` (local CPUs 0-1), GPU 1
//! `0000:86:00.0` (local CPU 1). What the container sees is read inside it (`ctr task exec`):
//! its Cpus_allowed_list (its cgroup's cpuset) and the mounted plan files. The node's harness
//! calls are CriNode's only (create, start, update_container_resources, ctr): each test runs on
//! containerd 1.7 and 2.x (`on_both!`).

use common::cri;
use common::nriplugin;

use common::runc::line_value;
use cri::{cri as api, quota, Containerd, CriNode};
use nriplugin::{context, nri_dir, plugin_config, Plugin};
use serde_json::{json, Value};

/// A container that only sleeps (what it sees is read with `ctr task exec`).
const SLEEPER: &str = "exec sleep 3600";

/// Runs `script` inside running container `id`: its stdout.
fn exec(node: &CriNode, id: &str, script: &str) -> String {
    let exec_id = format!("x{}", cri::unique());
    let r = node.ctr(&[
        "task",
        "exec",
        "--exec-id",
        &exec_id,
        id,
        "sh",
        "-c",
        script,
    ]);
    assert_eq!(r.rc, 0, "exec in {id}: {}\n{}", r.err, node.log_tail());
    r.out
}

/// The CPUs the container's processes may run on (its cgroup's cpuset).
fn cpus_inside(node: &CriNode, id: &str) -> String {
    exec(
        node,
        id,
        "sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status",
    )
    .trim()
    .to_string()
}

/// The plan.env mounted into container `id`.
fn plan_env_inside(node: &CriNode, id: &str) -> String {
    exec(node, id, "cat /dev/cpuplan/plan.env")
}

/// The plugin's host-side plan.json of container `id`.
fn host_plan(node: &CriNode, id: &str) -> Value {
    let text = std::fs::read_to_string(nri_dir(node).join(id).join("plan.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// kubelet's CPU manager update: the shared pool `cpus`, nothing else.
fn cpuset_update(cpus: &str) -> api::LinuxContainerResources {
    api::LinuxContainerResources {
        cpuset_cpus: cpus.into(),
        ..Default::default()
    }
}

fn kubelet_s_cpu_manager_update_is_narrowed_again_and_an_exclusive_set_kept(c: Containerd) {
    let node = CriNode::on(c);
    let cfg = plugin_config(&node, json!({}));
    node.start();
    let plugin = Plugin::external(&node, &cfg);
    let ctx = || context(&node, &plugin.log());
    let pod = node.run_pod(node.pod_config("cpu-manager"), "");
    let c = node.with_gpu(
        quota(node.container_config("srv", SLEEPER), 100_000, 100_000),
        1,
    );
    let id = node.create_container(&pod, c);
    node.start_container(&id);
    assert_eq!(
        cpus_inside(&node, &id),
        "1",
        "narrowed at create\n{}",
        ctx()
    );
    assert_eq!(host_plan(&node, &id)["generation"], 1);

    // The shared pool: narrowed to GPU 1's CPU again, the plan re-made over it.
    node.update_container_resources(&id, cpuset_update("0-1"))
        .unwrap_or_else(|e| panic!("update: {e}\n{}", ctx()));
    assert_eq!(cpus_inside(&node, &id), "1", "narrowed again\n{}", ctx());
    let plan = host_plan(&node, &id);
    assert_eq!(plan["mask"], "1", "{plan}");
    assert_eq!(plan["inputs"]["mask"], "0-1", "kubelet's set: {plan}");
    assert_eq!(plan["inputs"]["cpuset"], "1", "{plan}");
    assert_eq!(plan["generation"], 2, "{plan}");
    let env = plan_env_inside(&node, &id);
    assert_eq!(line_value(&env, "CPUPLAN_GENERATION"), Some("'2'"), "{env}");
    assert_eq!(line_value(&env, "CPUPLAN_MASK"), Some("'1'"), "{env}");

    // An exclusive set (1 CPU for a 1-CPU quota): kept as kubelet gives it, even off the GPU.
    node.update_container_resources(&id, cpuset_update("0"))
        .unwrap_or_else(|e| panic!("update: {e}\n{}", ctx()));
    assert_eq!(cpus_inside(&node, &id), "0", "kept\n{}", ctx());
    let plan = host_plan(&node, &id);
    assert_eq!(plan["mask"], "0", "re-made over it: {plan}");
    assert_eq!(plan["inputs"]["cpuset"], Value::Null, "{plan}");
    assert_eq!(plan["generation"], 3, "{plan}");
    assert!(
        plan["why"].as_str().unwrap().contains("exclusive"),
        "{plan}"
    );
    let log = plugin.log();
    assert!(log.contains("plan files of generation 3"), "{log}");
    assert!(!node.log().contains("NRI failed"), "{}", node.log_tail());
    node.remove_container(&id);
    node.remove_pod(&pod);
}

fn an_in_place_resize_rewrites_the_mounted_plan_with_a_higher_generation(c: Containerd) {
    let node = CriNode::on(c);
    let cfg = plugin_config(&node, json!({}));
    node.start();
    let plugin = Plugin::external(&node, &cfg);
    let ctx = || context(&node, &plugin.log());
    let pod = node.run_pod(node.pod_config("resize"), "");
    let c = quota(node.container_config("srv", SLEEPER), 50_000, 100_000);
    let id = node.create_container(&pod, c);
    node.start_container(&id);
    let env = plan_env_inside(&node, &id);
    assert_eq!(line_value(&env, "CPUPLAN_USABLE"), Some("'1'"), "{env}");
    assert_eq!(line_value(&env, "CPUPLAN_GENERATION"), Some("'1'"), "{env}");
    let resize = api::LinuxContainerResources {
        cpu_quota: 200_000,
        cpu_period: 100_000,
        ..Default::default()
    };
    node.update_container_resources(&id, resize)
        .unwrap_or_else(|e| panic!("update: {e}\n{}", ctx()));
    let env = plan_env_inside(&node, &id);
    assert_eq!(
        line_value(&env, "CPUPLAN_USABLE"),
        Some("'2'"),
        "{env}\n{}",
        ctx()
    );
    assert_eq!(line_value(&env, "CPUPLAN_GENERATION"), Some("'2'"), "{env}");
    // The environment cannot change after start: it is still the first plan's.
    let inside = exec(&node, &id, "echo \"$GOMAXPROCS\"");
    assert_eq!(inside.trim(), "1", "the env stays");
    assert!(!node.log().contains("NRI failed"), "{}", node.log_tail());
    node.remove_container(&id);
    node.remove_pod(&pod);
}

crate::on_both!(
    kubelet_s_cpu_manager_update_is_narrowed_again_and_an_exclusive_set_kept,
    an_in_place_resize_rewrites_the_mounted_plan_with_a_higher_generation,
);
