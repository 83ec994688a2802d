//! The NRI plugin's trust rules on the CRI node (issue 18), on containerd 1.7 and 2.x: it never
//! stops a start or hides the tenant's mount with its plan mount (a pod volume at or under the
//! plan directory, an image's own file there), never plans a pod that mounts its host
//! directory, refuses overlapping directories, and removes in `nri_dir` only what carries its
//! record. The plugin's socket driven with hostile ids is `tests/nri_hostile_ids.rs`.

mod common; // with tests/common/log_guard.rs: fails this binary if the real hook log changed

#[path = "common/cri.rs"]
mod cri;
#[path = "common/nriplugin.rs"]
mod nriplugin;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cri::{cri as api, quota, section, Containerd, CriNode};
use nriplugin::{context, nri_dir, plugin_bin, plugin_config, Plugin, PROBE, WAIT};
use serde_json::json;

/// `config` with a host directory `host` (holding a file `marker`) mounted at `at`.
fn with_volume(mut config: api::ContainerConfig, host: &Path, at: &str) -> api::ContainerConfig {
    std::fs::create_dir_all(host).unwrap();
    std::fs::write(host.join("marker"), "the tenant's\n").unwrap();
    config.mounts.push(api::Mount {
        container_path: at.into(),
        host_path: host.display().to_string(),
        readonly: true,
        ..Default::default()
    });
    config
}

/// What a probe container sees of its volume, its env and the plan directory.
const VOLUME_PROBE: &str = r#"echo "--- env"; env | sort
echo '--- ls'; ls /run/cpuplan /run/cpuplan/data 2>&1
echo '--- marker'; cat /run/cpuplan/marker /run/cpuplan/data/marker 2>/dev/null; echo '--- end'"#;

fn a_pod_volume_at_or_under_the_plan_directory_starts_and_is_never_replaced(c: Containerd) {
    let node = CriNode::on(c);
    let cfg = plugin_config(&node, json!({}));
    node.start();
    let plugin = Plugin::external(&node, &cfg);
    let ctx = || context(&node, &plugin.log());
    let pod = node.run_pod(node.pod_config("volumes"), "");

    // At /run/cpuplan/data: the plan mount would be read-only above it (runc: "mkdir
    // .../run/cpuplan/data: read-only file system"); the container starts with its env.
    let under = with_volume(
        quota(node.container_config("under", VOLUME_PROBE), 100000, 100000),
        &node.path("volumes/data"),
        "/run/cpuplan/data",
    );
    let id = node
        .try_create_container(&pod, under.clone())
        .unwrap_or_else(|e| panic!("{e:?}\n{}", ctx()));
    node.try_start_container(&id).unwrap_or_else(|e| {
        panic!(
            "a volume under the plan directory stops the start: {e:?}\n{}",
            ctx()
        )
    });
    assert_eq!(node.wait_exit(&id, WAIT), 0);
    let out = node.wait_log(&pod, &under, "--- end");
    assert!(
        section(&out, "env").contains("OMP_NUM_THREADS=1"),
        "{out}\n{}",
        ctx()
    );
    assert_eq!(section(&out, "marker").trim(), "the tenant's", "{out}");
    let spec = node.oci_spec(&id);
    let dests: Vec<&str> = spec["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["destination"].as_str())
        .collect();
    assert!(!dests.contains(&"/run/cpuplan"), "no plan mount: {dests:?}");
    assert_eq!(
        plugin.count("covers the plan directory /run/cpuplan: env only, no plan mount"),
        1,
        "{}",
        ctx()
    );
    node.remove_container(&id);

    // At /run/cpuplan itself: the tenant's volume stays (NRI would replace a mount with the
    // same destination).
    let at = with_volume(
        quota(node.container_config("at", VOLUME_PROBE), 100000, 100000),
        &node.path("volumes/own"),
        "/run/cpuplan",
    );
    let ran = node.run_container(&pod, at);
    assert_eq!(ran.exit_code, 0, "{}\n{}", ran.log, ctx());
    assert_eq!(
        section(&ran.log, "marker").trim(),
        "the tenant's",
        "{}",
        ran.log
    );
    assert!(!section(&ran.log, "ls").contains("plan.env"), "{}", ran.log);
    assert!(
        section(&ran.log, "env").contains("OMP_NUM_THREADS=1"),
        "{}",
        ran.log
    );
    node.remove_container(&ran.id);
    node.remove_pod(&pod);
}

fn an_image_with_the_plan_directory_as_a_file_starts_at_kubelet_s_next_attempt(c: Containerd) {
    // The plugin cannot see the image: its first container fails on the plan mount (runc:
    // "not a directory"); kubelet's next attempt (a new container of the same name in the same
    // pod) gets the env and no plan mount, under `allow`.
    let node = CriNode::on(c);
    let cfg = plugin_config(&node, json!({}));
    node.start();
    let image = "localhost/cpuplan-runfile:1";
    let tar = node.path("images/runfile.tar");
    cri::image_tar_with(
        &tar,
        image,
        &["sh"],
        cri::ImageExtra {
            files: &[("run/cpuplan", b"the image's own file\n")],
            ..Default::default()
        },
    );
    let r = node.ctr(&[
        "images",
        "import",
        "--snapshotter",
        "native",
        tar.to_str().unwrap(),
    ]);
    assert_eq!(r.rc, 0, "{}{}", r.out, r.err);
    let plugin = Plugin::external(&node, &cfg);
    let ctx = || context(&node, &plugin.log());
    let pod = node.run_pod(node.pod_config("runfile"), "");
    let config = |attempt: u32| {
        let mut c = quota(
            node.container_config("app", "env | sort; echo '--- file'; cat /run/cpuplan"),
            100000,
            100000,
        );
        c.image.as_mut().unwrap().image = image.into();
        c.metadata.as_mut().unwrap().attempt = attempt;
        c.log_path = format!("app-{attempt}.log");
        c
    };
    let first = node.create_container(&pod, config(0));
    let err = node
        .try_start_container(&first)
        .expect_err("the plan mount on the image's file");
    assert!(
        err.message().contains("not a directory"),
        "{err:?}\n{}",
        ctx()
    );
    let second = config(1);
    let id = node.create_container(&pod, second.clone());
    node.try_start_container(&id)
        .unwrap_or_else(|e| panic!("the next attempt starts: {e:?}\n{}", ctx()));
    assert_eq!(node.wait_exit(&id, WAIT), 0);
    let out = node.wait_log(&pod, &second, "the image's own file");
    assert!(out.contains("OMP_NUM_THREADS=1"), "the env: {out}");
    assert!(
        plugin.count("got the plan mount and never ran") == 1,
        "{}",
        ctx()
    );
    node.remove_container(&id);
    node.remove_container(&first);
    node.remove_pod(&pod);
}

fn a_pod_that_mounts_the_plugin_s_host_directory_is_never_planned(c: Containerd) {
    // The DaemonSet's own pod (or a second one in a rollout): hostPath /run/cpuplan, the
    // parent of nri_dir and claims_dir, at /run/cpuplan.
    let node = CriNode::on(c);
    let cfg = plugin_config(&node, json!({}));
    node.start();
    let plugin = Plugin::external(&node, &cfg);
    let pod = node.run_pod(node.pod_config("plugin-like"), "");
    let host = node.path("run/cpuplan");
    let mut c = quota(
        node.container_config("plugin", VOLUME_PROBE),
        100000,
        100000,
    );
    c.mounts.push(api::Mount {
        container_path: "/run/cpuplan".into(),
        host_path: host.display().to_string(),
        ..Default::default()
    });
    let ran = node.run_container(&pod, c);
    assert_eq!(ran.exit_code, 0, "{}", ran.log);
    assert!(
        section(&ran.log, "ls").contains("nri"),
        "it sees the host's directory, not a plan: {}\n{}",
        ran.log,
        context(&node, &plugin.log())
    );
    assert!(
        !section(&ran.log, "env").contains("OMP_NUM_THREADS="),
        "{}",
        ran.log
    );
    assert!(
        plugin.count("not planned: it mounts") == 1,
        "{}",
        plugin.log()
    );
    node.remove_container(&ran.id);
    node.remove_pod(&pod);
}

#[test]
fn overlapping_plugin_directories_are_refused_in_one_line_naming_both() {
    // The plugin refuses its config before it connects: no containerd runs, so one flavour.
    let node = CriNode::new();
    // nri_dir above claims_dir: the plugin refuses the config in one line naming both.
    let d = node.path("run/cpuplan");
    let bad = plugin_config(&node, json!({"nri_dir": d, "claims_dir": d.join("claims")}));
    let stderr = node.path("var/log/overlap.stderr");
    std::fs::create_dir_all(stderr.parent().unwrap()).unwrap();
    let mut child = Command::new(plugin_bin())
        .arg("--config")
        .arg(&bad)
        .args(["nri", "--socket"])
        .arg(node.nri_socket())
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = std::fs::read_to_string(&stderr).unwrap();
    assert!(
        status.is_some_and(|st| !st.success()),
        "refused at once, not {status:?}: {err}"
    );
    assert_eq!(
        err.lines()
            .filter(|l| l.contains(r#"keys "nri_dir" and "claims_dir" overlap"#))
            .count(),
        1,
        "{err}"
    );
}

fn synchronize_keeps_what_does_not_carry_the_plugin_s_record(c: Containerd) {
    // An operator's directory and a record-less one in nri_dir: a Synchronize (each
    // connection, and after a containerd restart) keeps them.
    let node = CriNode::on(c);
    let cfg = plugin_config(&node, json!({}));
    let notes = nri_dir(&node).join("operator-notes");
    let orphan = nri_dir(&node).join("0123abcd");
    for d in [&notes, &orphan] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join("keep"), "x").unwrap();
    }
    node.start();
    let plugin = Plugin::external(&node, &cfg);
    let pod = node.run_pod(node.pod_config("sync"), "");
    let ran = node.run_container(
        &pod,
        quota(node.container_config("app", PROBE), 100000, 100000),
    );
    assert_eq!(ran.exit_code, 0, "{}", ran.log);
    node.remove_container(&ran.id);
    node.restart();
    plugin.wait_for(&node, "nri: synchronized with", 2);
    assert!(notes.join("keep").is_file(), "{}", plugin.log());
    assert!(orphan.join("keep").is_file(), "{}", plugin.log());
    node.remove_pod(&pod);
}

crate::on_both!(
    a_pod_volume_at_or_under_the_plan_directory_starts_and_is_never_replaced,
    an_image_with_the_plan_directory_as_a_file_starts_at_kubelet_s_next_attempt,
    a_pod_that_mounts_the_plugin_s_host_directory_is_never_planned,
    synchronize_keeps_what_does_not_carry_the_plugin_s_record,
);
