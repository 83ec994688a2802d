//! Plan files in a rootfs's own filesystem (a host directory given as rootfs, no tmpfs on
//! `/run`), with real runc: one rootfs directory shared by several containers is planned for by
//! one live container at a time; an image's own stale temporary files cost one log line; the
//! records of a container whose poststop never ran are collected by a later start.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::runc::{fixtures, Bundle};
use serde_json::{json, Value};

/// The operator's side shared by every container of a test: a hook config, its claims and log.
struct Node {
    dir: tempfile::TempDir,
    config: PathBuf,
}

impl Node {
    fn new() -> Node {
        let dir = common::operator_dir::tempdir();
        let config = dir.path().join("hook.json");
        let cfg = json!({
            "topology_root": fixtures().join("e2e-host"),
            "claims_dir": dir.path().join("claims"),
            "log": dir.path().join("hook.log"),
        });
        std::fs::write(&config, serde_json::to_vec(&cfg).unwrap()).unwrap();
        Node { dir, config }
    }

    /// A bundle running `cmd` with the hook registered, no tmpfs on `/run`, and its rootfs at
    /// `rootfs` where given (another bundle's: a shared host directory).
    fn bundle(&self, tag: &str, cmd: &str, rootfs: Option<&Path>) -> Bundle {
        let mut b = Bundle::new(tag, cmd);
        b.hook_with_config(&self.config);
        b.config["linux"]["resources"]["cpu"] = json!({"quota": 100000, "period": 100000});
        b.config["mounts"]
            .as_array_mut()
            .unwrap()
            .retain(|m| m["destination"] != "/run");
        if let Some(r) = rootfs {
            b.config["root"]["path"] = json!(r);
        }
        b
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("hook.log")).unwrap_or_default()
    }

    /// The host-plan records left (the lock aside).
    fn records(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.dir.path().join("hostplans"))
            .map(|d| {
                d.map(|e| e.unwrap().file_name().into_string().unwrap())
                    .filter(|n| n != ".lock")
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }
}

/// Holds until `/tmp/<tag>.stop` exists, after `/tmp/<tag>.ready` (the rootfs is shared, so each
/// container's files carry its tag).
fn hold(tag: &str) -> String {
    format!("touch /tmp/{tag}.ready; while ! test -e /tmp/{tag}.stop; do sleep 0.1; done")
}

/// Runs `b` in a thread (runc in the foreground there) until its init wrote `/tmp/<tag>.ready`
/// in `rootfs`.
fn start(b: &Bundle, rootfs: &Path, tag: &str) -> std::thread::JoinHandle<(i32, String, String)> {
    b.run_until(&rootfs.join(format!("tmp/{tag}.ready")))
}

/// Stops a container started with [`start`]; asserts runc succeeded.
fn stop(rootfs: &Path, tag: &str, t: std::thread::JoinHandle<(i32, String, String)>) {
    std::fs::write(rootfs.join(format!("tmp/{tag}.stop")), "").unwrap();
    let (rc, out, err) = t.join().unwrap();
    assert_eq!(rc, 0, "{tag}: {out}{err}");
}

/// The container `plan.json` in `rootfs` names, if there is one.
fn planned_for(rootfs: &Path) -> Option<String> {
    let bytes = std::fs::read(rootfs.join("run/cpuplan/plan.json")).ok()?;
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    Some(v["container"].as_str().unwrap().to_string())
}

#[test]
fn a_shared_rootfs_directory_is_planned_for_by_one_live_container_at_a_time() {
    let node = Node::new();
    let a = node.bundle("shared-a", &hold("a"), None);
    let rootfs = a.rootfs();
    let b = node.bundle("shared-b", &hold("b"), Some(&rootfs));
    let c = node.bundle("shared-c", &hold("c"), Some(&rootfs));
    let ta = start(&a, &rootfs, "a");
    assert_eq!(planned_for(&rootfs).as_deref(), Some(a.id.as_str()));
    let a_env = std::fs::read(rootfs.join("run/cpuplan/plan.env")).unwrap();
    // B on the same directory while A runs: A's plan stays, B gets none, one line says why.
    let tb = start(&b, &rootfs, "b");
    assert_eq!(planned_for(&rootfs).as_deref(), Some(a.id.as_str()));
    assert_eq!(
        std::fs::read(rootfs.join("run/cpuplan/plan.env")).unwrap(),
        a_env
    );
    let log = node.log();
    let line = log
        .lines()
        .find(|l| l.contains(&format!("container {}: planning problem", b.id)))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        line.contains("shared with another live container that plans for it")
            && line.contains(&format!("held by live container {}", a.id)),
        "{line}"
    );
    // A stops first: its poststop removes its own files.
    stop(&rootfs, "a", ta);
    assert_eq!(planned_for(&rootfs), None, "{}", node.log());
    // C starts while B still runs: the directory is free again, C plans there.
    let tc = start(&c, &rootfs, "c");
    assert_eq!(planned_for(&rootfs).as_deref(), Some(c.id.as_str()));
    // B (which never planned there) stops: C's plan stays.
    stop(&rootfs, "b", tb);
    assert_eq!(planned_for(&rootfs).as_deref(), Some(c.id.as_str()));
    stop(&rootfs, "c", tc);
    assert_eq!(planned_for(&rootfs), None);
    assert_eq!(node.records(), Vec::<String>::new(), "every record went");
}

#[test]
fn an_image_s_thousands_of_stale_temporaries_cost_one_log_line_a_start() {
    let node = Node::new();
    let b = node.bundle("temps", "ls -a /run/cpuplan | grep -c tmp; true", None);
    let dir = b.rootfs().join("run/cpuplan");
    std::fs::create_dir_all(&dir).unwrap();
    // More than the hook lists in one start (4096 entries): pid 4294967295 never runs.
    let planted = 5000;
    for i in 0..planted {
        std::fs::write(dir.join(format!(".plan.json.4294967295.{i}.tmp")), "").unwrap();
    }
    let mut removed = 0;
    for run in 0..2 {
        let before = node.log().lines().count();
        let (rc, out, err) = b.run();
        assert_eq!(rc, 0, "{out}{err}");
        let log = node.log();
        let new: Vec<&str> = log.lines().skip(before).collect();
        let lines: Vec<&&str> = new
            .iter()
            .filter(|l| l.contains("stale temporary"))
            .collect();
        assert_eq!(lines.len(), 1, "run {run}: {new:#?}");
        let n: usize = lines[0]
            .split("removed ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{}", lines[0]));
        assert!(lines[0].contains("from /run/cpuplan"), "{}", lines[0]);
        assert_eq!(
            lines[0].contains("the rest wait for a later run"),
            run == 0,
            "{}",
            lines[0]
        );
        assert!(new.len() < 20, "run {run}: {} lines", new.len());
        removed += n;
    }
    assert_eq!(removed, planted);
    let left = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".tmp")
        })
        .count();
    assert_eq!(left, 0);
}

/// `runc state`'s pid of container `b`.
fn init_pid(b: &Bundle) -> i32 {
    let out = Command::new("runc")
        .arg("--root")
        .arg(b.dir.path().join("state"))
        .args(["state", &b.id])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["pid"].as_i64().unwrap() as i32
}

#[test]
fn the_records_of_a_container_killed_without_poststop_go_at_the_next_start() {
    let node = Node::new();
    let a = node.bundle("killed", &hold("k"), None);
    a.write_config();
    // runc itself in the foreground (no wrapper), so the test holds its pid.
    let mut runc = Command::new("runc")
        .arg("--root")
        .arg(a.dir.path().join("state"))
        .args(["run", "--bundle"])
        .arg(a.path())
        .arg(&a.id)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let ready = a.rootfs().join("tmp/k.ready");
    let t0 = Instant::now();
    while !ready.exists() {
        assert!(t0.elapsed() < Duration::from_secs(20), "did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(planned_for(&a.rootfs()).as_deref(), Some(a.id.as_str()));
    assert_eq!(node.records().len(), 2, "{:?}", node.records());
    // runc SIGKILLed first (so nothing runs poststop when the init dies), then the init.
    let init = init_pid(&a);
    let sigkill = nix::sys::signal::Signal::SIGKILL;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(runc.id() as i32), sigkill).unwrap();
    runc.wait().unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(init), sigkill).unwrap();
    let t0 = Instant::now();
    while Path::new(&format!("/proc/{init}")).exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "init {init} still there"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(node.records().len(), 2, "no poststop ran");
    // Another container's start (its plan on its own rootfs directory) collects them, and
    // removes the killed one's plan files as its poststop would have.
    let b = node.bundle("next", "true", None);
    let (rc, out, err) = b.run();
    assert_eq!(rc, 0, "{out}{err}");
    let log = node.log();
    assert!(
        log.contains("removed 2 record(s) of gone containers from")
            && log.contains(&format!("container {}: removed its plan files", a.id)),
        "{log}"
    );
    assert_eq!(planned_for(&a.rootfs()), None);
    // What is left is the next container's, gone at its poststop: nothing.
    assert_eq!(node.records(), Vec::<String>::new());
}
