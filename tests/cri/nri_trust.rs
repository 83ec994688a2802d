//! The NRI plugin's trust rules on the CRI node, on containerd 1.7 and 2.x: it never stops a
//! start or hides the tenant's mount with its plan mount (a pod volume at or under the plan
//! directory `/dev/cpuplan`, an image's own files or volume at either plan directory), never
//! plans a pod that mounts its host
//! directory, refuses overlapping directories, and removes in `nri_dir` only what carries its
//! record. The plugin's socket driven with hostile ids is `tests/host/nri_hostile_ids.rs`.

use common::cri;
use common::nriplugin;

use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
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
echo '--- ls'; ls /dev/cpuplan /dev/cpuplan/data 2>&1
echo '--- marker'; cat /dev/cpuplan/marker /dev/cpuplan/data/marker 2>/dev/null; echo '--- end'"#;

fn a_pod_volume_at_or_under_the_plan_directory_starts_and_is_never_replaced(c: Containerd) {
    let node = CriNode::on(c);
    let cfg = plugin_config(&node, json!({}));
    node.start();
    let plugin = Plugin::external(&node, &cfg);
    let ctx = || context(&node, &plugin.log());
    let pod = node.run_pod(node.pod_config("volumes"), "");

    // At /dev/cpuplan/data: the plan mount would be read-only above it (runc: "mkdir
    // .../dev/cpuplan/data: read-only file system"); the container starts with its env.
    let under = with_volume(
        quota(node.container_config("under", VOLUME_PROBE), 100000, 100000),
        &node.path("volumes/data"),
        "/dev/cpuplan/data",
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
    assert!(!dests.contains(&"/dev/cpuplan"), "no plan mount: {dests:?}");
    assert_eq!(
        plugin.count("covers the plan directory /dev/cpuplan: env only, no plan mount"),
        1,
        "{}",
        ctx()
    );
    node.remove_container(&id);

    // At /dev/cpuplan itself: the tenant's volume stays (NRI would replace a mount with the
    // same destination).
    let at = with_volume(
        quota(node.container_config("at", VOLUME_PROBE), 100000, 100000),
        &node.path("volumes/own"),
        "/dev/cpuplan",
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

/// What a container of an image with its own files at the plan directories sees: its env, the
/// plan mount, the plan that `$CPUPLAN_PLAN` names, and its own `/run/cpuplan`.
const IMAGE_PROBE: &str = r#"echo '--- env'; env | sort
echo '--- mounts'; grep ' /dev/cpuplan ' /proc/mounts
echo '--- plan'; cat "$CPUPLAN_PLAN" 2>/dev/null
echo '--- run'; if [ -L /run/cpuplan ]; then readlink /run/cpuplan; else cat /run/cpuplan /run 2>/dev/null; fi
echo '--- end'"#;

fn an_image_s_own_files_at_either_plan_directory_never_stop_a_start(c: Containerd) {
    // The plugin cannot see the image: whatever it holds at the hook's /run/cpuplan or at
    // /dev/cpuplan (a file, a symlink to a file, a volume), the first start goes through.
    let node = CriNode::on(c);
    let cfg = plugin_config(&node, json!({}));
    node.start();
    let images = [
        // `run` itself a file (runc on a mount at /run/cpuplan: "not a directory"), and a
        // file at /dev/cpuplan, under the runtime's /dev.
        (
            "runfile",
            cri::ImageExtra {
                files: &[
                    ("run", b"the image's own /run\n"),
                    ("dev/cpuplan", b"the image's own /dev/cpuplan\n"),
                ],
                ..Default::default()
            },
        ),
        // Both plan directories symlinks to a file of the image.
        (
            "runlink",
            cri::ImageExtra {
                links: &[
                    ("run/cpuplan", "/bin/busybox"),
                    ("dev/cpuplan", "/bin/busybox"),
                ],
                ..Default::default()
            },
        ),
        // A volume at /dev/cpuplan (containerd mounts one there for the image's `Volumes`).
        (
            "volume",
            cri::ImageExtra {
                volumes: &["/dev/cpuplan"],
                ..Default::default()
            },
        ),
    ];
    for (name, extra) in &images {
        let tar = node.path(&format!("images/{name}.tar"));
        cri::image_tar_with(
            &tar,
            &format!("localhost/cpuplan-{name}:1"),
            &["sh"],
            *extra,
        );
        node.import(&tar);
    }
    let plugin = Plugin::external(&node, &cfg);
    let ctx = || context(&node, &plugin.log());
    let pod = node.run_pod(node.pod_config("images"), "");
    for (name, _) in images {
        let image = format!("localhost/cpuplan-{name}:1");
        let mut config = quota(node.container_config(name, IMAGE_PROBE), 100000, 100000);
        config.image.as_mut().unwrap().image = image.clone();
        // containerd 2.x's CRI may learn of an image a moment after `ctr` imported it.
        let deadline = Instant::now() + WAIT;
        let id = loop {
            match node.try_create_container(&pod, config.clone()) {
                Err(e) if e.code() == tonic::Code::NotFound && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(200))
                }
                created => break created.unwrap_or_else(|e| panic!("{name}: {e:?}\n{}", ctx())),
            }
        };
        node.try_start_container(&id)
            .unwrap_or_else(|e| panic!("{name}: the first start fails: {e:?}\n{}", ctx()));
        assert_eq!(node.wait_exit(&id, WAIT), 0, "{name}\n{}", ctx());
        let out = node.wait_log(&pod, &config, "--- end");
        let env = section(&out, "env");
        assert!(
            env.contains("OMP_NUM_THREADS=1"),
            "{name}: {out}\n{}",
            ctx()
        );
        let run = section(&out, "run").trim().to_string();
        if name == "volume" {
            // env only: no plan mount, no CPUPLAN_PLAN naming a file that is not there
            assert!(!env.contains("CPUPLAN_PLAN="), "{name}: {out}");
            assert!(
                section(&out, "mounts").contains("/dev/cpuplan"),
                "the volume: {out}"
            );
            assert!(!section(&out, "plan").contains("\"container\""), "{out}");
            node.remove_container(&id);
            continue;
        }
        assert!(
            env.contains("CPUPLAN_PLAN=/dev/cpuplan/plan.json"),
            "{name}: {out}"
        );
        let mounts = section(&out, "mounts");
        assert!(
            mounts.lines().count() == 1 && mounts.contains(" ro,"),
            "{name}: the plan mount, read-only: {out}"
        );
        let plan: serde_json::Value = serde_json::from_str(section(&out, "plan"))
            .unwrap_or_else(|e| panic!("{name}: {e}: {out}"));
        assert_eq!(plan["container"], id.as_str(), "{name}: {plan}");
        let own = match name {
            "runfile" => "the image's own /run",
            _ => "/bin/busybox",
        };
        assert_eq!(run, own, "{name}: its own /run/cpuplan stays: {out}");
        node.remove_container(&id);
    }
    assert_eq!(
        plugin.count("covers the plan directory /dev/cpuplan: env only, no plan mount"),
        1,
        "the volume's container only\n{}",
        ctx()
    );
    assert_eq!(plugin.count("never ran"), 0, "{}", ctx());
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
    let probe = r#"echo "--- env"; env | sort
echo '--- ls'; ls /run/cpuplan /dev/cpuplan 2>&1; echo '--- end'"#;
    let mut c = quota(node.container_config("plugin", probe), 100000, 100000);
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

/// Runs the plugin with `config` against the node's socket, its stderr to `stderr`, for at most
/// 10 s: how it exited (`None`: still running, then killed) and what it wrote.
fn run_to_refusal(node: &CriNode, config: &Path, stderr: &Path) -> (Option<ExitStatus>, String) {
    let mut child = Command::new(plugin_bin())
        .arg("--config")
        .arg(config)
        .arg("--socket")
        .arg(node.nri_socket())
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(stderr).unwrap())
        .spawn()
        .unwrap();
    let status = common::procs::wait_at_most(&mut child, Duration::from_secs(10));
    (status, std::fs::read_to_string(stderr).unwrap())
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
    let (status, err) = run_to_refusal(&node, &bad, &stderr);
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

#[test]
fn a_planted_plugin_lock_is_refused_and_never_written() {
    // Planted in nri_dir by someone with write access to it: a hard link to a file elsewhere,
    // or another user's file, under the plugin's lock. The plugin refuses to start in one line
    // naming the lock and what is wrong, and truncates or writes nothing. No containerd runs.
    use std::os::unix::fs::MetadataExt;
    for plant in ["hard link", "another user's"] {
        let node = CriNode::new();
        let cfg = plugin_config(&node, json!({}));
        let lock = nri_dir(&node).join(".plugin.lock");
        std::fs::create_dir_all(nri_dir(&node)).unwrap();
        let target = node.path("elsewhere");
        std::fs::write(&target, "keep").unwrap();
        let what = if plant == "hard link" {
            std::fs::hard_link(&target, &lock).unwrap();
            "2 links to it (a hard link)"
        } else {
            std::fs::write(&lock, "theirs").unwrap();
            std::os::unix::fs::chown(&lock, Some(4242), None).unwrap();
            "owned by uid 4242, not by uid 0"
        };
        let stderr = node.path("plugin.stderr");
        let (status, err) = run_to_refusal(&node, &cfg, &stderr);
        assert!(
            status.is_some_and(|st| !st.success()),
            "{plant}: refused at once, not {status:?}: {err}"
        );
        let lines: Vec<&str> = err.lines().filter(|l| l.contains(what)).collect();
        assert!(
            lines.len() == 1 && lines[0].contains(&lock.display().to_string()),
            "{plant}: {err}"
        );
        let kept = if plant == "hard link" {
            "keep"
        } else {
            "theirs"
        };
        assert_eq!(std::fs::read_to_string(&lock).unwrap(), kept, "{plant}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep", "{plant}");
        assert_eq!(
            std::fs::metadata(&lock).unwrap().uid() == 4242,
            plant != "hard link"
        );
    }
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
    an_image_s_own_files_at_either_plan_directory_never_stop_a_start,
    a_pod_that_mounts_the_plugin_s_host_directory_is_never_planned,
    synchronize_keeps_what_does_not_carry_the_plugin_s_record,
);
