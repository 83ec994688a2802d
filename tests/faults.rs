//! Faults: the plan dir, the claims dir or the log on a full or read-only filesystem, and a
//! claims lock held by a stuck process. The hook degrades (logs, plans without a claim) and
//! never blocks past its bounded wait.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::hookbin;
use common::hookfx::{FakeRoot, Fx};
use serde_json::json;

/// A small tmpfs mounted by the test, unmounted (lazily) on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn new(dir: &Path, opts: &str) -> Tmpfs {
        assert!(
            nix::unistd::Uid::effective().is_root(),
            "mounting a tmpfs needs root (CI runs as root)"
        );
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", opts, "h6-tmpfs"])
            .arg(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mount tmpfs: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs(dir.to_path_buf())
    }

    /// Fills the filesystem until it says ENOSPC.
    fn fill(&self) {
        let mut f = std::fs::File::create(self.0.join("filler")).unwrap();
        let chunk = vec![b'x'; 4096];
        loop {
            if let Err(e) = f.write_all(&chunk).and_then(|_| f.sync_all()) {
                assert_eq!(e.raw_os_error(), Some(nix::libc::ENOSPC), "{e}");
                break;
            }
        }
    }

    fn read_only(&self) {
        let out = Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(&self.0)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).output();
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn a_full_plan_dir_is_a_logged_problem_and_leaves_no_temp_file() {
    let mut fx = Fx::new();
    fx.hook["dir"] = json!("/opt/plan");
    let fs = Tmpfs::new(&fx.rootfs().join("opt"), "size=64k");
    fs.fill();
    let r = fx.allow(None);
    let p = r.problem.expect("a problem");
    assert!(
        p.contains("No space left on device") || p.contains("ENOSPC"),
        "{p}"
    );
    let e = fx.deny(None);
    assert!(
        e.contains("/opt/plan") && e.contains("No space left"),
        "{e}"
    );
    // Only the filler and the plan dir; no leftover temporary file in it.
    assert_eq!(names(&fx.rootfs().join("opt")), vec!["filler", "plan"]);
    let left = names(&fx.rootfs().join("opt/plan"));
    assert!(left.iter().all(|n| !n.ends_with(".tmp")), "{left:?}");
}

fn run_binary(fx: &Fx, state: &str) -> (i32, String, Duration) {
    fx.write();
    let t = Instant::now();
    let out = hookbin::run_fed(
        &mut hookbin::create_runtime(
            Path::new(env!("CARGO_BIN_EXE_cpuplan-hook")),
            &fx.hook_path(),
        ),
        state.as_bytes(),
    );
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        t.elapsed(),
    )
}

#[test]
fn a_log_on_a_full_or_read_only_filesystem_does_not_stop_the_hook() {
    let mut fx = Fx::new();
    let fs = Tmpfs::new(&fx.scratch("logfs"), "size=64k");
    fs.fill();
    fx.hook["log"] = json!(fx.scratch("logfs/hook.log"));
    let (rc, err, _) = run_binary(&fx, &fx.state(None));
    assert_eq!(rc, 0, "{err}");
    assert!(
        err.contains("container h6-ctr"),
        "the log still reaches stderr: {err}"
    );
    assert!(fx.rootfs().join("run/cpuplan/plan.env").is_file());
    // Read-only: the log cannot even be created.
    std::fs::remove_dir_all(fx.rootfs().join("run")).unwrap();
    std::fs::remove_file(fx.scratch("logfs/hook.log")).unwrap();
    fs.read_only();
    let (rc, err, _) = run_binary(&fx, &fx.state(None));
    assert_eq!(rc, 0, "{err}");
    assert!(
        err.contains("cannot open log file") && err.contains("Read-only file system"),
        "{err}"
    );
    assert!(fx.rootfs().join("run/cpuplan/plan.env").is_file());
}

/// A fake container (pid 4250 under a fake root) asking `auto` for the fake host's GPU.
fn claiming(fx: &mut Fx, t: &Path, pid: u32) -> FakeRoot {
    let croot = t.join("croot");
    let fake = FakeRoot::new(&t.join("host"), pid, "/ctr", &croot);
    std::fs::create_dir_all(croot.join(fx.rootfs().strip_prefix("/").unwrap())).unwrap();
    fx.hook["root"] = json!(fake.root);
    fx.hook["step_thread_core"] = json!("auto");
    fx.hook["cpuset"] = json!("keep");
    fx.env("NVIDIA_VISIBLE_DEVICES=0");
    fake
}

fn plan_why(fx: &Fx, croot: &Path) -> String {
    let p = croot
        .join(fx.rootfs().strip_prefix("/").unwrap())
        .join("run/cpuplan/plan.json");
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
    j["why"].as_str().unwrap().to_string()
}

#[test]
fn a_claims_dir_on_a_full_filesystem_plans_without_a_claim() {
    let t = tempfile::tempdir().unwrap();
    let mut fx = Fx::new();
    let _fake = claiming(&mut fx, t.path(), 4250);
    let fs = Tmpfs::new(&fx.scratch("claimsfs"), "size=64k");
    fs.fill();
    fx.hook["claims_dir"] = json!(fx.scratch("claimsfs"));
    fx.hook["claim_wait_ms"] = json!(300);
    let r = fx.allow(Some(4250));
    assert_eq!(r.problem, None, "{r:?}");
    let why = plan_why(&fx, &t.path().join("croot"));
    assert!(why.contains("without a GPU claim"), "{why}");
    assert!(
        !names(&fx.scratch("claimsfs"))
            .iter()
            .any(|n| n.ends_with(".json")),
        "{:?}",
        names(&fx.scratch("claimsfs"))
    );
}

#[test]
fn a_read_only_claims_dir_plans_without_a_claim() {
    let t = tempfile::tempdir().unwrap();
    let mut fx = Fx::new();
    let _fake = claiming(&mut fx, t.path(), 4251);
    let fs = Tmpfs::new(&fx.scratch("claimsfs"), "size=64k");
    fs.read_only();
    fx.hook["claims_dir"] = json!(fx.scratch("claimsfs/claims"));
    fx.hook["claim_wait_ms"] = json!(300);
    let r = fx.allow(Some(4251));
    assert_eq!(r.problem, None, "{r:?}");
    let why = plan_why(&fx, &t.path().join("croot"));
    assert!(
        why.contains("without a GPU claim") && why.contains("Read-only file system"),
        "{why}"
    );
}

/// A process holding an flock, killed on drop.
struct Stuck(Child);

impl Drop for Stuck {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_stuck_lock_holder_costs_at_most_the_bounded_wait() {
    let t = tempfile::tempdir().unwrap();
    let mut fx = Fx::new();
    let _fake = claiming(&mut fx, t.path(), 4252);
    let claims = fx.scratch("claims");
    fx.hook["claims_dir"] = json!(claims);
    fx.hook["claim_wait_ms"] = json!(400);
    // A first run creates the claims dir and its lock file, and claims the GPU.
    let r = fx.allow(Some(4252));
    assert_eq!(r.problem, None);
    let lock = claims.join(".lock");
    assert!(lock.is_file(), "{:?}", names(&claims));
    let scope = fx.bundle().display().to_string();
    assert_eq!(
        cpuplan::release(&claims, "h6-ctr", &scope, Duration::from_secs(1)).unwrap(),
        1
    );
    // A stuck process holds the lock (util-linux flock, like any other flock(2) holder).
    let child = Command::new("flock")
        .arg(&lock)
        .args(["sleep", "60"])
        .spawn()
        .expect("flock (util-linux)");
    let _stuck = Stuck(child);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        let probe = Command::new("flock")
            .args(["-n", "-E", "99"])
            .arg(&lock)
            .arg("true")
            .status()
            .unwrap();
        if probe.code() == Some(99) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // The binary, as a runtime runs it: done well within its registered timeout.
    let croot = t.path().join("croot");
    std::fs::remove_dir_all(
        croot
            .join(fx.rootfs().strip_prefix("/").unwrap())
            .join("run"),
    )
    .unwrap();
    let (rc, err, took) = run_binary(&fx, &fx.state(Some(4252)));
    assert_eq!(rc, 0, "{err}");
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(3),
        "took {took:?}"
    );
    assert!(err.contains("no GPU claim"), "{err}");
    let why = plan_why(&fx, &croot);
    assert!(why.contains("without a GPU claim"), "{why}");
    eprintln!("stuck lock: the hook finished in {took:?} with claim_wait_ms 400");
}
