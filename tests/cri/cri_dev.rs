//! A tenant's `/dev` on a Kubernetes node (containerd's CRI, 1.7 and 2.x, the hook registered by
//! `install --containerd`): a GPU device node the container's image or mounts put in its `/dev`
//! is planned for but never claimed, so a container with no GPU cannot take another tenant's.
//!
//! The attacks, as a pod author can mount them: an image whose config declares a `/dev` volume
//! and whose layer holds `dev/nvidia1` (containerd copies it into the volume); a node made in an
//! emptyDir (as an init container with `CAP_MKNOD` would) mounted at `/dev/nvidia1` (`subPath`)
//! or the whole emptyDir at `/dev`; and the node mounted through a link of the image
//! (`/devlink -> /dev`), which the runtime follows. GPU 1 is `0000:86:00.0` on the fake host.

use common::cri;
use common::cri_hook;

use std::path::Path;

use common::runc::line_value;
use cri::{
    cri as api, image_tar_with, section, Containerd, CriNode, ImageExtra, NodeOptions,
    STANDARD_NODES,
};
use cri_hook::{claims, hook_log, hooked, PROBE};
use serde_json::{json, Value};

/// GPU 1 of the fake host, `/dev/nvidia1` (195:1).
const GPU1: &str = "0000:86:00.0";

/// The probe, the node's type and numbers as the container sees them, then sleep.
fn sleeper() -> String {
    format!("echo \"node=$(stat -c %F:%t:%T /dev/nvidia1)\"; {PROBE}; exec sleep 3600")
}

/// Makes char device 195:1 (and, with `standard`, the nodes a `/dev` needs) in `dir` on the
/// host, as an init container would in an emptyDir.
fn make_nodes(dir: &Path, standard: bool) {
    std::fs::create_dir_all(dir).unwrap();
    let nodes = STANDARD_NODES
        .iter()
        .filter(|_| standard)
        .chain([&("nvidia1", 195, 1)]);
    for (name, major, minor) in nodes {
        nix::sys::stat::mknod(
            &dir.join(name),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev((*major).into(), (*minor).into()),
        )
        .unwrap();
    }
}

/// Runs `config` in a new pod until it has printed its plan: (pod, container id, its output).
fn start(node: &CriNode, name: &str, config: api::ContainerConfig) -> (cri::Pod, String, String) {
    let pod = node.run_pod(node.pod_config(name), "");
    let (id, out) = node.start_until(&pod, &config, "--- end");
    (pod, id, out)
}

/// What is wrong with the attacker's start, if anything: its plan must name GPU 1 but not
/// claim it, saying why (the hook's log says which rule), and nobody may hold GPU 1.
fn planned_not_claimed(node: &CriNode, id: &str, out: &str, why_node: &str) -> Option<String> {
    if !out.contains("node=character special file:c3:1") {
        return Some(format!("no 195:1 in the container's /dev: {out}"));
    }
    let held = claims(node);
    if held != json!([]) {
        return Some(format!("a container with no GPU claimed GPU 1: {held}"));
    }
    let env = section(out, "planenv");
    if line_value(env, "CPUPLAN_DEVICES") != Some(&*format!("'{GPU1}'")) {
        return Some(format!("not planned for: {env}"));
    }
    let why = line_value(env, "CPUPLAN_WHY").unwrap_or_default();
    if !why.contains(&format!(
        "not claimed, as no source gpu_sources trusts names them: {GPU1}"
    )) {
        return Some(format!("the plan does not say why: {why}"));
    }
    let log = hook_log(node);
    let note = format!("container {id}: /dev/nvidia1 (195:1) is not the runtime's device node (");
    if !log.contains(&note) || !log.contains(why_node) {
        return Some(format!("no note {why_node:?} in the log: {log}"));
    }
    None
}

fn an_image_s_dev_volume_holding_a_gpu_node_claims_nothing(c: Containerd) {
    let node = hooked(NodeOptions::on(c), json!({}));
    let image = "localhost/cpuplan-devvolume:1";
    let tar = node.path("images/devvolume.tar");
    let nodes: Vec<(String, u32, u32)> = STANDARD_NODES
        .iter()
        .chain([&("nvidia1", 195, 1)])
        .map(|(n, a, b)| (format!("dev/{n}"), *a, *b))
        .collect();
    let nodes: Vec<(&str, u32, u32)> = nodes.iter().map(|(n, a, b)| (n.as_str(), *a, *b)).collect();
    image_tar_with(
        &tar,
        image,
        &["sh"],
        ImageExtra {
            volumes: &["/dev"],
            char_devices: &nodes,
            ..Default::default()
        },
    );
    node.import(&tar);
    let mut c = node.container_config("attacker", &sleeper());
    c.image.as_mut().unwrap().image = image.into();
    let (pod, a, out) = start(&node, "devvolume", c);
    // containerd replaced the runtime's /dev tmpfs with the image's volume.
    let mounts = node.oci_spec(&a)["mounts"].clone();
    let dev: Vec<&Value> = mounts
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["destination"] == "/dev")
        .collect();
    assert!(
        dev.len() == 1 && dev[0]["type"] == "bind",
        "the image's /dev volume: {mounts}"
    );
    let wrong = planned_not_claimed(
        &node,
        &a,
        &out,
        "/dev is a \"bind\" mount, not the runtime's tmpfs",
    );
    assert_eq!(wrong, None, "the image's /dev volume");

    // The pod that really has GPU 1 (CRI devices) claims it while the attacker runs.
    let v = node.with_gpu(node.container_config("victim", &sleeper()), 1);
    let (vpod, vid, vout) = start(&node, "victim", v);
    let why = line_value(section(&vout, "planenv"), "CPUPLAN_WHY").unwrap();
    assert!(!why.contains("held by"), "{why}");
    let held = claims(&node);
    assert_eq!(held.as_array().map(Vec::len), Some(1), "{held}");
    assert_eq!(held[0]["address"], GPU1);
    assert_eq!(held[0]["holder"]["container"], vid.as_str());
    for (id, p) in [(&a, &pod), (&vid, &vpod)] {
        node.remove_container(id);
        node.remove_pod(p);
    }
    assert_eq!(claims(&node), json!([]));
}

fn a_gpu_node_bind_mounted_into_dev_claims_nothing(c: Containerd) {
    let node = hooked(NodeOptions::on(c), json!({}));
    let image = "localhost/cpuplan-devlink:1";
    let tar = node.path("images/devlink.tar");
    image_tar_with(
        &tar,
        image,
        &["sh"],
        ImageExtra {
            links: &[("devlink", "/dev")],
            ..Default::default()
        },
    );
    node.import(&tar);
    let emptydir = node.path("var/lib/kubelet/pods/attacker/volumes/kubernetes.io~empty-dir");
    make_nodes(&emptydir.join("node"), false);
    make_nodes(&emptydir.join("dev"), true);
    let mut wrong = Vec::new();
    let mount = |container_path: &str, host: &Path| api::Mount {
        container_path: container_path.into(),
        host_path: host.display().to_string(),
        ..Default::default()
    };
    for (name, m, link_image, why) in [
        // An emptyDir's node through subPath at /dev/nvidia1.
        (
            "subpath",
            mount("/dev/nvidia1", &emptydir.join("node/nvidia1")),
            false,
            "the spec mounts \"/dev/nvidia1\" (\"bind\") on it",
        ),
        // The whole emptyDir at /dev.
        (
            "emptydir",
            mount("/dev", &emptydir.join("dev")),
            false,
            "/dev is a \"bind\" mount, not the runtime's tmpfs",
        ),
        // The node through the image's /devlink -> /dev, which runc follows.
        (
            "link",
            mount("/devlink/nvidia1", &emptydir.join("node/nvidia1")),
            true,
            "the spec's mount \"/devlink/nvidia1\" (\"bind\") lands on it",
        ),
    ] {
        // Every way is tried, and every one that works is reported.
        let mut c = node.container_config(name, &sleeper());
        if link_image {
            c.image.as_mut().unwrap().image = image.into();
        }
        c.mounts.push(m);
        let (pod, id, out) = start(&node, name, c);
        if let Some(w) = planned_not_claimed(&node, &id, &out, why) {
            wrong.push(format!("{name}: {w}"));
        }
        node.remove_container(&id);
        node.remove_pod(&pod);
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

crate::on_both!(
    an_image_s_dev_volume_holding_a_gpu_node_claims_nothing,
    a_gpu_node_bind_mounted_into_dev_claims_nothing,
);
