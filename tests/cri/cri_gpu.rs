//! How a GPU reaches a container on a Kubernetes node, through the hook: the private
//! containerd of `crates/test-support/src/cri/`, each test on 1.7 and on 2.x (`on_both!`), with CDI on
//! (1.7: `enable_cdi = true`; 2.x: its default) and a spec directory of the test's, the hook
//! registered by `install --containerd`, and the GPUs given as real nodes do: CDI devices
//! through CRI's `CDI_devices` field and through a `cdi.k8s.io/` annotation (containerd injects
//! the spec's device nodes before runc), a DRA claim two containers share, two MIG instances of
//! one GPU, the newest `cdiVersion` each containerd reads, and the device plugin's
//! volume-mounts strategy (the env and a `/dev/null` mount per GPU, as kubelet passes them)
//! with a tenant's look-alike. Both versions give the hook the same spec on every path.
//!
//! The fake host (`gpu_paths::gpu_paths_host`): GPU 0 `0000:3b:00.0` (local CPUs 0-1), GPU 1
//! `0000:86:00.0` (local CPU 1). A container with one CPU of quota on GPU 1 is narrowed to CPU 1.

use common::cri;
use common::cri_hook;
use common::gpu_paths;

use cri::{quota, section, Containerd, CriNode};
use cri_hook::{hook_config, hook_log, install};
use gpu_paths::{
    assert_cdi_on, assert_cdi_version_ceiling, cdi_annotation, cdi_field, cdi_options, claims,
    dra_pair, gpu_paths_host, holders, one_gpu_through, plan_json, planenv, plugin_device, sleeper,
    start, volume_mount, write_cdi_specs, GPU0, GPU1, UUID1,
};
use serde_json::json;

/// A started node on `c` with CDI on and the hook registered, on the fake GPU host.
fn node(c: Containerd) -> CriNode {
    let node = CriNode::with(cdi_options(c));
    write_cdi_specs(&node);
    hook_config(&node, json!({}));
    gpu_paths_host(node.root());
    install(&node, &[]);
    node.start();
    assert_cdi_on(&node);
    node
}

/// The hook route's removal: the containers (their poststop releases the claims) and the pod.
fn remove(node: &CriNode, ids: &[&str], pod: &cri::Pod) {
    for id in ids {
        node.remove_container(id);
    }
    node.remove_pod(pod);
}

fn cdi_devices_injected_by_containerd_are_planned_narrowed_and_claimed(c: Containerd) {
    let node = node(c);
    // The device plugin's cdi-cri strategy (and DRA): CRI's CDI_devices field.
    one_gpu_through(
        &node,
        "cdi-field",
        |c| cdi_field(c, &plugin_device()),
        &remove,
    );
    // Its cdi-annotations strategy: the annotation containerd reads from the container config.
    let by_annotation = |c| cdi_annotation(c, &plugin_device());
    one_gpu_through(&node, "cdi-annotation", by_annotation, &remove);
    // A DRA claim two containers of a pod reference: the second pins nothing.
    dra_pair(&node, &remove);
    // The newest CDI spec version each containerd reads (what an operator's producer may write).
    assert_cdi_version_ceiling(&node);

    // Two MIG instances of GPU 0 (its node and two nvidia-caps nodes each): two servers on one
    // GPU, placed on it through the driver's capability files; the second pins nothing.
    let mut ran = Vec::new();
    for (name, dev) in [
        ("mig-a", "nvidia.com/gpu=0:1"),
        ("mig-b", "nvidia.com/gpu=0:2"),
    ] {
        let pod = node.run_pod(node.pod_config(name), "");
        let (id, out) = start(
            &node,
            &pod,
            cdi_field(node.container_config(name, &sleeper()), dev),
        );
        let caps = section(&out, "nodes");
        assert!(caps.contains("nvidia-cap"), "the caps nodes: {out}");
        assert_eq!(
            planenv(&out, "CPUPLAN_DEVICES"),
            format!("'{GPU0}'"),
            "{out}"
        );
        let notes = plan_json(&out)["inputs"]["gpu_notes"].to_string();
        let gi = &dev[dev.len() - 1..];
        assert!(
            notes.contains(&format!("is MIG instance gpu0/gi{gi} of GPU {GPU0}")),
            "{notes}"
        );
        ran.push((pod, id, out));
    }
    assert!(!planenv(&ran[0].2, "CPUPLAN_WHY").contains("held by"));
    let why = planenv(&ran[1].2, "CPUPLAN_WHY");
    assert!(
        why.contains("held by another container") && why.contains("MIG"),
        "{why}"
    );
    assert_eq!(
        holders(&claims(&node)),
        [(GPU0.to_string(), ran[0].1.clone())]
    );
    for (pod, id, _) in &ran {
        node.remove_container(id);
        node.remove_pod(pod);
    }
    assert_eq!(claims(&node), json!([]));
}

fn volume_mounts_are_claimed_and_a_tenant_s_look_alike_only_planned(c: Containerd) {
    let node = node(c);
    // The device plugin's mounts: /dev/null at /var/run/nvidia-container-devices/<id>, by uuid
    // (the default id strategy) and by index.
    for (name, id) in [("vm-uuid", UUID1), ("vm-index", "1")] {
        let pod = node.run_pod(node.pod_config(name), "");
        let c = quota(node.container_config("srv", &sleeper()), 100000, 100000);
        let (cid, out) = start(
            &node,
            &pod,
            volume_mount(c, id, std::path::Path::new("/dev/null")),
        );
        let spec = node.oci_spec(&cid);
        let m = spec["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["destination"].as_str().unwrap().ends_with(id))
            .cloned()
            .unwrap_or_else(|| panic!("no volume-mount in {spec}"));
        assert_eq!(
            (m["type"].as_str(), m["source"].as_str()),
            (Some("bind"), Some("/dev/null"))
        );
        assert_eq!(
            planenv(&out, "CPUPLAN_DEVICES"),
            format!("'{GPU1}'"),
            "{out}"
        );
        assert_eq!(section(&out, "cpus").trim(), "1", "narrowed: {out}");
        assert!(
            !planenv(&out, "CPUPLAN_WHY").contains("not claimed"),
            "{out}"
        );
        assert_eq!(holders(&claims(&node)), [(GPU1.to_string(), cid.clone())]);
        // The env names the directory: a note, never a planning problem.
        let notes = plan_json(&out)["inputs"]["gpu_notes"].to_string();
        assert!(notes.contains("volume-mounts strategy"), "{notes}");
        node.remove_container(&cid);
        node.remove_pod(&pod);
    }
    // A tenant's look-alikes at the same path: an emptyDir's directory, and a file in one.
    let empty = node.path("var/lib/kubelet/pods/tenant/volumes/kubernetes.io~empty-dir/fake");
    std::fs::create_dir_all(&empty).unwrap();
    std::fs::write(empty.join("file"), "").unwrap();
    for (name, source) in [
        ("like-dir", empty.clone()),
        ("like-file", empty.join("file")),
    ] {
        let pod = node.run_pod(node.pod_config(name), "");
        let c = node.container_config("srv", &sleeper());
        let (cid, out) = start(&node, &pod, volume_mount(c, UUID1, &source));
        assert_eq!(
            planenv(&out, "CPUPLAN_DEVICES"),
            format!("'{GPU1}'"),
            "planned for: {out}"
        );
        let why = planenv(&out, "CPUPLAN_WHY");
        assert!(
            why.contains(&format!(
                "not claimed, as no source gpu_sources trusts names them: {GPU1}"
            )) && why.contains("not a bind of /dev/null"),
            "{name}: {why}"
        );
        assert_eq!(
            claims(&node),
            json!([]),
            "{name}: a look-alike claims nothing"
        );
        assert!(hook_log(&node).contains("is not a bind of the host's /dev/null"));
        node.remove_container(&cid);
        node.remove_pod(&pod);
    }
}

crate::on_both!(
    cdi_devices_injected_by_containerd_are_planned_narrowed_and_claimed,
    volume_mounts_are_claimed_and_a_tenant_s_look_alike_only_planned,
);
