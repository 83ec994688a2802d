//! cpuplan's NRI plugin beside another NRI plugin that also sets `linux.resources.cpu.cpus`
//! (as containers/nri-plugins' topology-aware and balloons policies do), on the CRI node of
//! `crates/test-support/src/cri/`: the other plugin is crates/nri's recorder example (it sets the cpuset a
//! pod annotation names), run in this process at an index before cpuplan's (`05`) or after it
//! (`90`). What is shown, on containerd 1.7 and 2.x:
//! - both setting the cpuset: NRI refuses the container (neither plugin wins, whatever the order);
//! - cpuplan with `cpuset: keep` (it sets no cpuset): the other plugin's cpuset is the
//!   container's, and cpuplan's plan agrees with it only when cpuplan runs after the other plugin
//!   (a higher index): NRI hands each plugin the container as the earlier plugins adjusted it,
//!   so cpuplan before the policy plans for a cpuset the container never runs on.

use common::cri;
use common::nriplugin;

#[allow(dead_code)]
#[path = "../../crates/nri/examples/recorder.rs"]
mod recorder_example;

use std::sync::Arc;

use common::runc::line_value;
use cri::{section, Containerd, CriNode};
use nri_plugin::Options;
use nriplugin::{context, plan_json, plugin_config, wait_until, Plugin, PROBE};
use recorder_example::{Recorder, CPUS_ANNOTATION};
use serde_json::{json, Value};

/// The other plugin at `index`, connected to `node`'s NRI socket and synchronized.
fn other_plugin(node: &CriNode, index: &str) -> (nri_plugin::Running, Arc<Recorder>) {
    let recorder = Arc::new(Recorder::default());
    let opts = Options::new("policy", index)
        .unwrap()
        .with_socket(node.nri_socket());
    let running = nri_plugin::spawn(opts, recorder.clone()).unwrap();
    let r = recorder.clone();
    wait_until(
        "the other plugin to be synchronized",
        || node.log_tail(),
        move || r.calls().iter().any(|c| c.starts_with("synchronize")),
    );
    (running, recorder)
}

/// The container: GPU 1 (whose local CPU is 1) with one CPU of quota, which cpuplan narrows to
/// CPU 1 (`cpuset: numa`).
fn gpu_config(node: &CriNode) -> cri::cri::ContainerConfig {
    cri::quota(
        node.with_gpu(node.container_config("app", PROBE), 1),
        100000,
        100000,
    )
}

/// A container on GPU 1 (whose local CPU is 1: cpuplan narrows it to "1") in a pod whose
/// annotation tells the other plugin to set the cpuset "0". Its CreateContainer's outcome.
fn create_gpu_container(
    node: &CriNode,
    name: &str,
    policy_cpus: &str,
) -> (cri::Pod, Result<String, tonic::Status>) {
    let mut pc = node.pod_config(name);
    pc.annotations = cri::annotations(&[(CPUS_ANNOTATION, policy_cpus)]);
    let pod = node.run_pod(pc, "");
    let c = gpu_config(node);
    let created = node.try_create_container(&pod, c);
    (pod, created)
}

fn both_setting_the_cpuset_is_refused_whatever_the_order(c: Containerd) {
    for index in ["05", "90"] {
        let node = CriNode::on(c);
        let cfg = plugin_config(&node, json!({}));
        node.start();
        let plugin = Plugin::external(&node, &cfg);
        let (other, _) = other_plugin(&node, index);
        let (pod, created) = create_gpu_container(&node, &format!("both-{index}"), "0-1");
        let e = created.expect_err(&format!(
            "index {index}: two plugins set the cpuset and the container was created\n{}",
            context(&node, &plugin.log())
        ));
        let msg = e.message().to_string();
        assert!(
            msg.contains("both tried to set CPU pinning")
                && msg.contains(&format!("\"{index}-policy\""))
                && msg.contains("\"10-cpuplan\""),
            "index {index}: NRI names both plugins and the field: {msg}"
        );
        node.remove_pod(&pod);
        other.stop().unwrap();
    }
}

/// The plan cpuplan made and the container's final cpuset, for `cpuset: keep` beside the other
/// plugin at `index`.
fn keep_beside(c: Containerd, index: &str) -> (Value, String, String) {
    let node = CriNode::on(c);
    let cfg = plugin_config(&node, json!({"cpuset": "keep"}));
    node.start();
    let plugin = Plugin::external(&node, &cfg);
    let (other, _) = other_plugin(&node, index);
    let (pod, created) = create_gpu_container(&node, &format!("keep-{index}"), "0");
    let id = created.unwrap_or_else(|e| {
        panic!(
            "index {index}: {}\n{}",
            e.message(),
            context(&node, &plugin.log())
        )
    });
    let spec_cpus = node.oci_spec(&id)["linux"]["resources"]["cpu"]["cpus"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    node.start_container(&id);
    node.wait_exit(&id, nriplugin::WAIT);
    let log = node.container_log(&pod, &gpu_config(&node));
    let seen = section(&log, "cpus").trim().to_string();
    assert_eq!(
        seen, spec_cpus,
        "the workload sees the spec's cpuset: {log}"
    );
    let plan = plan_json(&log);
    let env = section(&log, "planenv");
    assert_eq!(
        line_value(env, "CPUPLAN_MASK").map(|m| m.trim_matches('\'').to_string()),
        plan["mask"].as_str().map(String::from),
        "{env}"
    );
    node.remove_container(&id);
    node.remove_pod(&pod);
    other.stop().unwrap();
    (plan, spec_cpus, log)
}

fn with_cpuset_keep_the_other_plugin_s_cpuset_stands_and_a_later_cpuplan_plans_within_it(
    c: Containerd,
) {
    // cpuplan after the policy (its index 10 > 05): it sees the policy's cpuset and plans in it.
    let (plan, cpus, log) = keep_beside(c, "05");
    assert_eq!(cpus, "0", "the policy's cpuset: {log}");
    assert_eq!(
        plan["inputs"]["config_cpus"], "0",
        "cpuplan saw the policy's cpuset: {plan}"
    );
    assert_eq!(
        plan["inputs"]["cpuset"],
        Value::Null,
        "cpuplan set none: {plan}"
    );
    assert_eq!(plan["mask"], "0", "the plan is the final cpuset's: {plan}");

    // cpuplan before the policy (10 < 90): it planned for the cpuset before the policy's, which
    // then replaced it: the plan does not match what the container runs on.
    let (plan, cpus, log) = keep_beside(c, "90");
    assert_eq!(cpus, "0", "the policy's cpuset: {log}");
    assert_eq!(
        plan["inputs"]["config_cpus"],
        Value::Null,
        "cpuplan, called first, saw the spec as CRI gave it (no cpuset), not the later plugin's: {plan}"
    );
    assert_eq!(
        plan["inputs"]["cpuset"],
        Value::Null,
        "cpuplan set none: {plan}"
    );
    assert_eq!(
        plan["mask"], "0-1",
        "the plan covers CPUs the container does not run on: {plan}"
    );
}

crate::on_both!(
    both_setting_the_cpuset_is_refused_whatever_the_order,
    with_cpuset_keep_the_other_plugin_s_cpuset_stands_and_a_later_cpuplan_plans_within_it,
);
