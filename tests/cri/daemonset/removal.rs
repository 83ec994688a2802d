//! Removal from the nodes: the chart's `removeFromNodes` run on the CRI node.

use common::helm;
use serde_json::json;

use super::{api, context, cri, node, rendered, run_daemonset_pod, up, Rendered};

/// Removal from the nodes as the chart does it (`removeFromNodes: true`, a `helm upgrade`): the
/// plugin's pod is replaced by one whose init container runs the image's `cpuplan uninstall
/// --nri` with the install's mounts, which takes containerd's NRI drop-in and its import out
/// again (the config as it was before the install, byte for byte), and whose keep-alive
/// container (the node's own sandbox image, nothing pulled) then holds the pod.
#[test]
fn remove_from_nodes_takes_the_nri_drop_in_out_again() {
    let node = node();
    let r = rendered();
    let before = std::fs::read_to_string(node.config_path()).unwrap();
    let plugin = up(&node, &r);
    let drop_in = node.path("etc/containerd/conf.d/cpuplan-nri.toml");
    assert!(drop_in.exists());
    assert_ne!(std::fs::read_to_string(node.config_path()).unwrap(), before);

    let mut values = helm::values_file("containerd-1.7");
    values["removeFromNodes"] = json!(true);
    values["hook"] = json!({"keepAliveImage": cri::PAUSE_IMAGE});
    let docs = helm::render(&values);
    let removal = Rendered {
        ds: helm::one(&docs, "DaemonSet").clone(),
        config_maps: Vec::new(),
    };
    assert_eq!(removal.ds["metadata"]["name"], r.ds["metadata"]["name"]);
    // The rollout: the plugin's pod goes, the removal's pod comes.
    node.stop_container(&plugin.container, 10);
    node.remove_container(&plugin.container);
    node.remove_pod(&plugin.pod);
    let cleanup = run_daemonset_pod(&node, &removal, 1);
    assert!(!drop_in.exists(), "{}", context(&node));
    assert_eq!(
        std::fs::read_to_string(node.config_path()).unwrap(),
        before,
        "the import is gone"
    );
    let status = node.container_status(&cleanup.container);
    assert_eq!(
        status.state,
        api::ContainerState::ContainerRunning as i32,
        "the keep-alive container holds the pod: {status:?}"
    );
    node.stop_container(&cleanup.container, 10);
    node.remove_container(&cleanup.container);
    node.remove_pod(&cleanup.pod);
}
