//! How a GPU reaches a container on a Kubernetes node, through the NRI plugin: the
//! private containerd of `crates/test-support/src/cri/`, each test on 1.7 and on 2.x (`on_both!`), with
//! CDI on and NRI on (no OCI hook), the plugin started by the test, and the GPUs given as real
//! nodes do. What the plugin sees is the spec at CreateContainer: kubelet's devices and mounts,
//! CDI's edits (both versions apply them before NRI's CreateContainer), and the env; not what
//! an NVIDIA runtime adds later at StartContainer. So:
//! - CDI devices (CRI's `CDI_devices`, a `cdi.k8s.io/` annotation, a DRA claim two containers
//!   share) arrive as `linux.devices`: planned, narrowed, claimed; the second sharer pins nothing;
//! - the volume-mounts strategy's `/dev/null` mounts: claimed; a tenant's look-alike only planned;
//! - the envvar strategy's `NVIDIA_VISIBLE_DEVICES` alone: planned but not claimed unless
//!   `gpu_sources` trusts `env`, then claimed, with replicas of one GPU sharing one claim; a
//!   bare MIG uuid, whose GPU no file names: a plan with a note, and the thread env injected.
//!
//! The fake host (`gpu_paths::gpu_paths_host`): GPU 0 `0000:3b:00.0` (local CPUs 0-1), GPU 1
//! `0000:86:00.0` (local CPU 1).

use common::cri;
use common::gpu_paths;
use common::nriplugin;

use std::path::Path;

use cri::{quota, section, Containerd, CriNode};
use gpu_paths::{
    assert_cdi_on, cdi_annotation, cdi_field, cdi_options, claims, dra_pair, env, gpu_paths_host,
    holders, one_gpu_through, plan_json, planenv, plugin_device, sleeper, spec_devices, start,
    volume_mount, write_cdi_specs, GPU1, MIG_UUID, UUID1,
};
use nriplugin::{context, plugin_config, wait_until, Plugin};
use serde_json::{json, Value};

/// A started node on `c` with CDI on, on the fake GPU host, and the plugin's config with `extra`.
fn node(c: Containerd, extra: Value) -> (CriNode, std::path::PathBuf) {
    let node = CriNode::with(cdi_options(c));
    write_cdi_specs(&node);
    let cfg = plugin_config(&node, extra);
    gpu_paths_host(node.root());
    node.start();
    assert_cdi_on(&node);
    (node, cfg)
}

/// Removes `ids` and `pod`, and waits until the plugin released every claim.
fn remove(node: &CriNode, plugin: &Plugin, ids: &[&str], pod: &cri::Pod) {
    for id in ids {
        node.remove_container(id);
    }
    node.remove_pod(pod);
    wait_until(
        "the claims to be released",
        || context(node, &plugin.log()),
        || claims(node) == json!([]),
    );
}

fn cdi_devices_on_the_nri_route_are_planned_narrowed_and_claimed(c: Containerd) {
    let (node, cfg) = node(c, json!({}));
    let plugin = Plugin::external(&node, &cfg);
    let removal = |node: &CriNode, ids: &[&str], pod: &cri::Pod| remove(node, &plugin, ids, pod);
    one_gpu_through(
        &node,
        "cdi-field",
        |c| cdi_field(c, &plugin_device()),
        &removal,
    );
    let by_annotation = |c| cdi_annotation(c, &plugin_device());
    one_gpu_through(&node, "cdi-annotation", by_annotation, &removal);
    // A DRA claim two containers of a pod reference: the second pins nothing.
    dra_pair(&node, &removal);
}

fn volume_mounts_on_the_nri_route_are_claimed_and_a_look_alike_only_planned(c: Containerd) {
    let (node, cfg) = node(c, json!({}));
    let plugin = Plugin::external(&node, &cfg);
    let pod = node.run_pod(node.pod_config("vm"), "");
    let c = quota(node.container_config("srv", &sleeper()), 100000, 100000);
    let (id, out) = start(&node, &pod, volume_mount(c, UUID1, Path::new("/dev/null")));
    assert!(
        spec_devices(&node, &id).is_empty(),
        "no device at all: only the mount"
    );
    assert_eq!(
        planenv(&out, "CPUPLAN_DEVICES"),
        format!("'{GPU1}'"),
        "{out}"
    );
    assert_eq!(section(&out, "cpus").trim(), "1", "narrowed: {out}");
    assert_eq!(holders(&claims(&node)), [(GPU1.to_string(), id.clone())]);
    remove(&node, &plugin, &[&id], &pod);

    let empty = node.path("var/lib/kubelet/pods/tenant/volumes/kubernetes.io~empty-dir/fake");
    std::fs::create_dir_all(&empty).unwrap();
    let pod = node.run_pod(node.pod_config("like"), "");
    let c = node.container_config("srv", &sleeper());
    let (id, out) = start(&node, &pod, volume_mount(c, UUID1, &empty));
    assert_eq!(
        planenv(&out, "CPUPLAN_DEVICES"),
        format!("'{GPU1}'"),
        "planned for: {out}"
    );
    let why = planenv(&out, "CPUPLAN_WHY");
    assert!(
        why.contains("not claimed") && why.contains("not a bind of /dev/null"),
        "{why}"
    );
    assert_eq!(claims(&node), json!([]), "a look-alike claims nothing");
    remove(&node, &plugin, &[&id], &pod);
}

fn envvar_on_the_nri_route_is_claimed_only_where_env_is_trusted(c: Containerd) {
    let (node, cfg) = node(c, json!({}));
    let plugin = Plugin::external(&node, &cfg);
    // The envvar strategy: the device plugin's env alone at CreateContainer (an NVIDIA runtime
    // would add the devices at StartContainer, after NRI): planned for, not claimed, saying why.
    let pod = node.run_pod(node.pod_config("env"), "");
    let c = env(
        node.container_config("srv", &sleeper()),
        "NVIDIA_VISIBLE_DEVICES",
        UUID1,
    );
    let (id, out) = start(&node, &pod, c);
    assert!(spec_devices(&node, &id).is_empty());
    assert_eq!(
        planenv(&out, "CPUPLAN_DEVICES"),
        format!("'{GPU1}'"),
        "{out}"
    );
    let why = planenv(&out, "CPUPLAN_WHY");
    assert!(
        why.contains(&format!(
            "not claimed, as no source gpu_sources trusts names them: {GPU1} (named by NVIDIA_VISIBLE_DEVICES)"
        )),
        "{why}"
    );
    assert_eq!(claims(&node), json!([]));
    remove(&node, &plugin, &[&id], &pod);

    // A bare MIG uuid: no file places it and no device names its parent: a plan with a note,
    // the thread env injected, never the off plan.
    let pod = node.run_pod(node.pod_config("mig"), "");
    let c = env(
        node.container_config("srv", &sleeper()),
        "NVIDIA_VISIBLE_DEVICES",
        MIG_UUID,
    );
    let (id, out) = start(&node, &pod, c);
    assert_eq!(planenv(&out, "CPUPLAN_SETTING"), "'auto'", "{out}");
    assert_eq!(planenv(&out, "CPUPLAN_DEVICES"), "''", "{out}");
    assert!(section(&out, "env").contains("OMP_NUM_THREADS="), "{out}");
    let notes = plan_json(&out)["inputs"]["gpu_notes"].to_string();
    assert!(
        notes.contains(MIG_UUID) && notes.contains("is a MIG uuid"),
        "{notes}"
    );
    remove(&node, &plugin, &[&id], &pod);
    drop(plugin);

    // `env` trusted: claimed; a second container naming the same GPU (a time-sliced or MPS
    // replica: the device plugin gives every replica the same id) pins nothing.
    let cfg = plugin_config(
        &node,
        json!({"gpu_sources": ["devices", "nodes", "mounts", "env"]}),
    );
    let plugin = Plugin::external(&node, &cfg);
    let mut ran = Vec::new();
    for name in ["replica-a", "replica-b"] {
        let pod = node.run_pod(node.pod_config(name), "");
        let c = env(
            node.container_config("srv", &sleeper()),
            "NVIDIA_VISIBLE_DEVICES",
            UUID1,
        );
        let (id, out) = start(&node, &pod, c);
        assert_eq!(
            planenv(&out, "CPUPLAN_DEVICES"),
            format!("'{GPU1}'"),
            "{out}"
        );
        ran.push((pod, id, out));
    }
    assert!(!planenv(&ran[0].2, "CPUPLAN_WHY").contains("not claimed"));
    let why = planenv(&ran[1].2, "CPUPLAN_WHY");
    assert!(
        why.contains("pins nothing") && why.contains("replica"),
        "{why}"
    );
    assert_eq!(
        holders(&claims(&node)),
        [(GPU1.to_string(), ran[0].1.clone())]
    );
    for (pod, id, _) in &ran {
        remove(&node, &plugin, &[id], pod);
    }
}

crate::on_both!(
    cdi_devices_on_the_nri_route_are_planned_narrowed_and_claimed,
    volume_mounts_on_the_nri_route_are_claimed_and_a_look_alike_only_planned,
    envvar_on_the_nri_route_is_claimed_only_where_env_is_trusted,
);
