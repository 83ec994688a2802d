//! The NRI stub crate's node (`crates/nri/tests`): a [`CriNode`] started with NRI on, in the
//! words of a plugin's tests (a pod with annotations, a container running a script, its spec).
//! It fails (never skips) where it cannot run: not root, or a tool missing.
//!
//! It runs the system's containerd 1.7; with `NRI_PLUGIN_TEST_CONTAINERD` set (to anything but
//! empty), containerd 2.x from `$CARGO_TARGET_DIR/tools/containerd2` ([`Containerd::V2`]).
#![allow(dead_code)]

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use tonic::transport::Channel;

use crate::cri::{annotations, Containerd, CriNode, NodeOptions};

pub use crate::cri::Pod;

/// How long the tests wait for containerd or a plugin.
pub const WAIT: Duration = Duration::from_secs(30);

/// Polls `cond` every 50 ms until it holds; fails with `what` and `ctx()` after [`WAIT`].
pub fn wait_until(what: &str, ctx: impl Fn() -> String, cond: impl Fn() -> bool) {
    wait_within(WAIT, what, ctx, cond)
}

/// Polls `cond` every 50 ms until it holds; fails with `what` and `ctx()` after `limit`.
pub fn wait_within(limit: Duration, what: &str, ctx: impl Fn() -> String, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}\n{}",
            ctx()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The containerd the crate's tests run (`NRI_PLUGIN_TEST_CONTAINERD`).
pub fn flavour() -> Containerd {
    match std::env::var_os("NRI_PLUGIN_TEST_CONTAINERD") {
        Some(v) if !v.is_empty() => Containerd::V2,
        _ => Containerd::V17,
    }
}

/// A private containerd serving CRI with NRI on.
pub struct Node(CriNode);

impl Node {
    /// Lays out a node, starts containerd and imports the images.
    pub fn start() -> Node {
        let node = CriNode::with(NodeOptions::on(flavour()));
        node.start();
        Node(node)
    }

    /// The CRI node underneath.
    pub fn cri(&self) -> &CriNode {
        &self.0
    }

    /// `rel` under the node's directory.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.0.path(rel)
    }

    /// The socket NRI plugins connect to.
    pub fn nri_socket(&self) -> PathBuf {
        self.0.nri_socket()
    }

    /// containerd's log so far (all its runs).
    pub fn log(&self) -> String {
        self.0.log()
    }

    /// How many lines of containerd's log contain `what`.
    pub fn count(&self, what: &str) -> usize {
        self.log().lines().filter(|l| l.contains(what)).count()
    }

    /// Stops containerd (SIGTERM, then SIGKILL after 10 s); containers keep running.
    pub fn stop_daemon(&self) {
        self.0.stop_daemon();
    }

    /// Stops and starts containerd again with the same config and state.
    pub fn restart(&self) {
        self.0.restart();
    }

    /// One CRI call (a minute at most).
    pub fn try_call<T, F, Fut>(&self, f: F) -> Result<T, tonic::Status>
    where
        F: FnOnce(RuntimeServiceClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        self.0.try_call(f)
    }

    /// Runs a host-network pod `name` with `annotations`.
    pub fn run_pod(&self, name: &str, pairs: &[(&str, &str)]) -> Pod {
        let mut config = self.0.pod_config(name);
        config.annotations = annotations(pairs);
        self.0.run_pod(config, "")
    }

    /// Creates container `name` in `pod` running `sh -c script`; its id, or the runtime's error.
    pub fn try_create(&self, pod: &Pod, name: &str, script: &str) -> Result<String, tonic::Status> {
        self.0
            .try_create_container(pod, self.0.container_config(name, script))
    }

    /// Creates and starts container `name` in `pod`; its id.
    pub fn start_container(&self, pod: &Pod, name: &str, script: &str) -> String {
        let id = self
            .0
            .create_container(pod, self.0.container_config(name, script));
        self.0.start_container(&id);
        id
    }

    /// Runs container `name` in `pod` to its end; its id and what it printed.
    pub fn run(&self, pod: &Pod, name: &str, script: &str) -> (String, String) {
        let ran = self
            .0
            .run_container(pod, self.0.container_config(name, script));
        (ran.id, ran.log)
    }

    /// The container's OCI spec.
    pub fn spec(&self, id: &str) -> serde_json::Value {
        self.0.oci_spec(id)
    }

    /// StopContainer (1 s grace).
    pub fn stop_container(&self, id: &str) {
        self.0.stop_container(id, 1);
    }

    /// RemoveContainer.
    pub fn remove_container(&self, id: &str) {
        self.0.remove_container(id);
    }

    /// StopPodSandbox and RemovePodSandbox.
    pub fn remove_pod(&self, pod: &Pod) {
        self.0.remove_pod(pod);
    }
}
