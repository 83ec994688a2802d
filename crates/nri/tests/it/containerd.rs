//! The crate's plugins against a real containerd (the CI's 1.7, NRI v0.6.1 on the wire; 2.x
//! the same way) driven through CRI: what a plugin answers reaches the container, events come
//! by the route that runtime uses, and the stub reconnects when containerd restarts. The
//! plugins run in this process ([`nri_plugin::spawn`]), built from the examples' own code.

#[allow(dead_code)]
#[path = "../../examples/env.rs"]
mod env_example;
#[allow(dead_code)]
#[path = "../../examples/recorder.rs"]
mod recorder_example;

use std::sync::Arc;

use common::nri_node::{wait_until, Node};
use env_example::EnvPlugin;
use nri_plugin::Options;
use recorder_example::Recorder;

/// containerd's log line for a plugin that registered as `name`.
fn registered(name: &str) -> String {
    format!(r#"registered as \"{name}\""#)
}

#[test]
fn the_env_example_s_variable_reaches_a_container_started_through_cri() {
    let node = Node::start();
    let opts = Options::new("env", "50")
        .unwrap()
        .with_socket(node.nri_socket());
    let plugin = nri_plugin::spawn(
        opts,
        Arc::new(EnvPlugin {
            key: "HELLO_NRI".into(),
            value: "from-rust".into(),
        }),
    )
    .unwrap();
    wait_until(
        "containerd to synchronize the plugin",
        || node.log(),
        || node.count(&registered("50-env")) == 1 && node.count("synchronizing plugin 50-env") == 1,
    );
    let pod = node.run_pod("env", &[]);
    let (id, out) = node.run(&pod, "app", "echo HELLO_NRI=$HELLO_NRI");
    assert!(out.contains("HELLO_NRI=from-rust"), "{out}\n{}", node.log());
    let env = node.spec(&id)["process"]["env"].to_string();
    assert!(env.contains("HELLO_NRI=from-rust"), "{env}");
    node.remove_container(&id);
    node.remove_pod(&pod);
    plugin.stop().unwrap();
    wait_until(
        "containerd to see the plugin go",
        || node.log(),
        || {
            node.log()
                .contains(r#"connection to plugin \"50-env\" closed"#)
        },
    );
    assert_eq!(node.count("invalid plugin events"), 0, "{}", node.log());
}

#[test]
fn the_recorder_adjusts_refuses_follows_events_and_is_synchronized_with_running_pods() {
    let node = Node::start();
    let recorder = Arc::new(Recorder::default());
    let opts = Options::new("recorder", "90")
        .unwrap()
        .with_socket(node.nri_socket());
    let first = nri_plugin::spawn(opts.clone(), recorder.clone()).unwrap();
    let calls = || recorder.calls().join("\n");
    wait_until("the first synchronization", calls, || {
        recorder.calls().contains(&"synchronize 0 0".to_string())
    });
    assert!(calls().starts_with("configure containerd"), "{}", calls());
    let pod = node.run_pod("demo", &[(recorder_example::CPUS_ANNOTATION, "0")]);
    let (id, out) = node.run(
        &pod,
        "srv",
        "echo NRI_TEST=$NRI_TEST; grep Cpus_allowed_list /proc/self/status",
    );
    assert!(out.contains("NRI_TEST=1"), "the env: {out}");
    assert!(out.contains("Cpus_allowed_list:\t0"), "the cpuset: {out}");
    assert_eq!(
        node.spec(&id)["annotations"][recorder_example::ANNOTATION.0],
        recorder_example::ANNOTATION.1
    );
    let err = node
        .try_create(&pod, recorder_example::REJECTED, "true")
        .expect_err("the recorder refuses it");
    assert!(err.message().contains("the recorder refuses"), "{err:?}");
    // Start and remove come as a state change from NRI < 0.12, as their own calls after.
    node.remove_container(&id);
    wait_until("the removal", calls, || {
        recorder.calls().contains(&format!("remove {id}"))
    });
    assert!(
        recorder.calls().contains(&format!("start {id}")),
        "{}",
        calls()
    );
    assert!(
        recorder.calls().contains(&"run-pod demo".to_string()),
        "{}",
        calls()
    );

    // A second plugin, started while the pod runs, is synchronized with it; both see a stop.
    let keep = node.start_container(&pod, "keep", "exec sleep 3600");
    let second_rec = Arc::new(Recorder::default());
    let second = nri_plugin::spawn(opts.with_socket(node.nri_socket()), second_rec.clone());
    let second = second.unwrap();
    wait_until(
        "the second plugin's synchronization",
        || second_rec.calls().join("\n"),
        || second_rec.calls().contains(&"synchronize 1 1".to_string()),
    );
    node.stop_container(&keep);
    for r in [&recorder, &second_rec] {
        wait_until(
            "the stop",
            || r.calls().join("\n"),
            || r.calls().contains(&format!("stop {keep}")),
        );
    }
    node.remove_container(&keep);
    node.remove_pod(&pod);
    let creates = recorder
        .calls()
        .iter()
        .filter(|c| c.starts_with("create "))
        .count();
    assert_eq!(creates, 3, "srv, the refused one and keep: {}", calls());
    second.stop().unwrap();
    first.stop().unwrap();
}

#[test]
fn the_stub_reconnects_and_is_synchronized_again_after_containerd_restarts() {
    let node = Node::start();
    let recorder = Arc::new(Recorder::default());
    let opts = Options::new("recorder", "90")
        .unwrap()
        .with_socket(node.nri_socket());
    let plugin = nri_plugin::spawn(opts, recorder.clone()).unwrap();
    let syncs = || {
        recorder
            .calls()
            .iter()
            .filter(|c| *c == "synchronize 0 0")
            .count()
    };
    wait_until("the first synchronization", || node.log(), || syncs() == 1);
    node.restart();
    wait_until(
        "a second registration and synchronization",
        || node.log(),
        || syncs() == 2,
    );
    assert_eq!(node.count(&registered("90-recorder")), 2, "{}", node.log());
    let configures = recorder
        .calls()
        .iter()
        .filter(|c| c.starts_with("configure"))
        .count();
    assert_eq!(configures, 2, "configured once per connection");
    // The reconnected plugin still adjusts containers.
    let pod = node.run_pod("again", &[]);
    let (_, out) = node.run(&pod, "srv", "echo NRI_TEST=$NRI_TEST");
    assert!(out.contains("NRI_TEST=1"), "{out}");
    node.remove_pod(&pod);
    plugin.stop().unwrap();
}
