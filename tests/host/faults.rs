//! Faults: the plan dir, the claims dir or the log on a full or read-only filesystem, and a
//! claims lock held by a stuck process. The hook degrades (logs, plans without a claim) and
//! never blocks past its bounded wait.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::fakehost::{FakeHost, FakeRoot};
use common::hookbin;
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
    let mut fx = FakeHost::bundle_only();
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

fn run_binary(fx: &FakeHost, state: &str) -> (i32, String, Duration) {
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
    let mut fx = FakeHost::bundle_only();
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
fn claiming(fx: &mut FakeHost, t: &Path, pid: u32) -> FakeRoot {
    let croot = t.join("croot");
    let fake = FakeRoot::new(&t.join("host"), pid, "/ctr", &croot);
    std::fs::create_dir_all(croot.join(fx.rootfs().strip_prefix("/").unwrap())).unwrap();
    fx.hook["root"] = json!(fake.root);
    fx.hook["step_thread_core"] = json!("auto");
    fx.hook["cpuset"] = json!("keep");
    fx.gpu(0);
    fake
}

fn plan_why(fx: &FakeHost, croot: &Path) -> String {
    let p = croot
        .join(fx.rootfs().strip_prefix("/").unwrap())
        .join("run/cpuplan/plan.json");
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
    j["why"].as_str().unwrap().to_string()
}

#[test]
fn a_claims_dir_on_a_full_filesystem_plans_without_a_claim() {
    let t = tempfile::tempdir().unwrap();
    let mut fx = FakeHost::bundle_only();
    let _fake = claiming(&mut fx, t.path(), 4250);
    let fs = Tmpfs::new(&fx.scratch("claimsfs"), "size=64k,mode=755");
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
    let mut fx = FakeHost::bundle_only();
    let _fake = claiming(&mut fx, t.path(), 4251);
    let fs = Tmpfs::new(&fx.scratch("claimsfs"), "size=64k,mode=755");
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

/// A stuck process holding the flock of `lock` (util-linux flock, like any other flock(2)
/// holder), once it holds it.
fn hold_lock(lock: &Path) -> Stuck {
    let child = Command::new("flock")
        .arg(lock)
        .args(["sleep", "60"])
        .spawn()
        .expect("flock (util-linux)");
    let stuck = Stuck(child);
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        let probe = Command::new("flock")
            .args(["-n", "-E", "99"])
            .arg(lock)
            .arg("true")
            .status()
            .unwrap();
        if probe.code() == Some(99) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    stuck
}

#[test]
fn a_stuck_lock_holder_costs_at_most_the_bounded_wait() {
    let t = tempfile::tempdir().unwrap();
    let mut fx = FakeHost::bundle_only();
    let fake = claiming(&mut fx, t.path(), 4252);
    let claims = fx.scratch("claims");
    fx.hook["claims_dir"] = json!(claims);
    fx.hook["claim_wait_ms"] = json!(400);
    // A first run creates the claims dir and its lock file, and claims the GPU.
    let r = fx.allow(Some(4252));
    assert_eq!(r.problem, None);
    let lock = claims.join(".lock");
    assert!(lock.is_file(), "{:?}", names(&claims));
    let scope = fx.bundle().display().to_string();
    let held = cpuplan::list_claims(&claims, &fake.root).unwrap();
    let by = Some(&held[0].holder);
    let wait = Duration::from_secs(1);
    assert_eq!(
        cpuplan::release(&claims, &fake.root, "h6-ctr", &scope, by, wait).unwrap(),
        1
    );
    let _stuck = hold_lock(&lock);
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

#[test]
fn a_lock_held_past_the_hook_s_registered_timeout_still_lets_the_container_start() {
    use common::runc::{fixtures, Bundle};
    // The container copies its plan where the test reads it, says ready, and waits.
    let mut b = Bundle::new(
        "lockwait",
        "cp /run/cpuplan/plan.json /tmp/; touch /tmp/ready; while ! test -e /tmp/stop; do sleep 0.1; done",
    );
    b.gpu(0);
    let claims = b.scratch("claims");
    std::fs::create_dir_all(&claims).unwrap();
    let cfg = b.hook_config(json!({
        "topology_root": fixtures().join("e2e-host"),
        "claims_dir": claims,
        "log": b.scratch("hook.log"),
        // The most check-config takes: longer than a 3 s registration lets the hook run.
        "claim_wait_ms": 8000,
    }));
    b.hook_with_config(&cfg);
    for stage in ["createRuntime", "poststop"] {
        for h in b.config["hooks"][stage].as_array_mut().unwrap() {
            h["timeout"] = json!(3);
        }
    }
    let stuck = hold_lock(&claims.join(".lock"));
    let t0 = Instant::now();
    let mut running = b.spawn();
    let ready = b.rootfs().join("tmp/ready");
    while !ready.exists() && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = t0.elapsed();
    // The lock is let go before the container stops: poststop is not what is tested here.
    drop(stuck);
    std::fs::write(b.rootfs().join("tmp/stop"), "").unwrap();
    let (rc, err) = running.wait(Duration::from_secs(30));
    let log = std::fs::read_to_string(b.scratch("hook.log")).unwrap_or_default();
    assert!(ready.exists(), "the container did not start: {err}\n{log}");
    assert_eq!(rc, 0, "{err}\n{log}");
    assert!(took < Duration::from_secs(3), "started after {took:?}");
    let plan: serde_json::Value =
        serde_json::from_slice(&std::fs::read(b.rootfs().join("tmp/plan.json")).unwrap()).unwrap();
    let why = plan["why"].as_str().unwrap();
    assert!(
        why.contains("planned without a GPU claim")
            && why.contains("claim_wait_ms 8000 cut to")
            && why.contains("registered timeout of 3 s"),
        "{why}"
    );
    eprintln!("a lock held past a 3 s registration: the container started after {took:?}");
}

/// A container on the e2e fake GPU host (`auto`, one CPU, GPU 0) whose `/run` is the host
/// tmpfs `runfs` (bound in, so the test fills it before the hook runs), printing what it finds.
fn container_on_a_full_run(tag: &str, runfs: &Path) -> (common::runc::Bundle, PathBuf) {
    use common::runc::{fixtures, Bundle};
    let mut b = Bundle::new(
        tag,
        "echo started; echo \"cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)\"; \
         ls -a /run/cpuplan | sed 's/^/ls: /'; \
         [ -f /run/cpuplan/plan.env ] && . /run/cpuplan/plan.env && echo \"omp=$OMP_NUM_THREADS\"; true",
    );
    let mounts = b.config["mounts"].as_array_mut().unwrap();
    mounts.retain(|m| m["destination"] != "/run");
    mounts.push(
        json!({"destination": "/run", "type": "bind", "source": runfs, "options": ["rbind", "rw"]}),
    );
    let cfg = b.hook_config(json!({
        "topology_root": fixtures().join("e2e-host"),
        "claims_dir": b.scratch("claims"),
        "log": b.scratch("hook.log"),
    }));
    b.hook_with_config(&cfg);
    b.env("NVIDIA_VISIBLE_DEVICES=0");
    b.config["linux"]["resources"]["cpu"] = json!({"quota": 100000, "period": 100000});
    let log = b.scratch("hook.log");
    (b, log)
}

#[test]
fn a_full_run_tmpfs_leaves_no_plan_file_and_no_claim_and_the_container_starts() {
    // Full, and with one page left: plan.env fits, plan.json does not (all or nothing).
    for (tag, page_left) in [("fullrun", false), ("onepage", true)] {
        let host = tempfile::tempdir().unwrap();
        let runfs = host.path().join("runfs");
        let fs = Tmpfs::new(&runfs, "size=64k,mode=755");
        fs.fill();
        if page_left {
            let filler = runfs.join("filler");
            let len = std::fs::metadata(&filler).unwrap().len();
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&filler)
                .unwrap();
            f.set_len(len - 4096).unwrap();
        }
        let (b, log) = container_on_a_full_run(tag, &runfs);
        let (rc, out, err) = b.run();
        let log = std::fs::read_to_string(log).unwrap_or_default();
        assert_eq!(
            rc, 0,
            "{tag}: allow starts the container: {err}\n{out}\n{log}"
        );
        assert!(out.contains("started"), "{tag}: {out}");
        assert!(!out.contains("omp="), "{tag}: a plan was left: {out}");
        // Nothing in the plan dir: no plan file, no temporary file.
        let left = names(&runfs.join("cpuplan"));
        assert!(left.is_empty(), "{tag}: {left:?}");
        assert!(
            log.contains("No space left on device")
                && log.contains("cannot write the off plan either"),
            "{tag}: {log}"
        );
        if page_left {
            // plan.json (written first) fitted the page: the all-or-nothing undo removed it.
            assert!(
                log.contains("/run/cpuplan/plan.env: cannot write: No space left"),
                "{tag}: {log}"
            );
        }
        // The cpuset narrowed to the GPU's CPU 1 was put back: the off plan narrows nothing.
        assert!(log.contains("cpuset put back to"), "{tag}: {log}");
        let own = std::fs::read_to_string("/proc/self/status").unwrap();
        let own = own
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim();
        assert!(out.contains(&format!("cpus={own}\n")), "{tag}: {out}");
        // The claim createRuntime took was released by createRuntime itself: poststop found none.
        assert!(log.contains("released 0 GPU claim(s)"), "{tag}: {log}");
        let claims: Vec<String> = names(&b.scratch("claims"))
            .into_iter()
            .filter(|n| n.ends_with(".json"))
            .collect();
        assert!(claims.is_empty(), "{tag}: {claims:?}");
        drop(b);
        drop(fs);
    }
}

/// A pid that ran and is gone (reaped): no process has it, for a while.
fn dead_pid() -> u32 {
    let mut c = Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    pid
}

#[test]
fn a_killed_writers_temporary_files_are_removed_by_the_next_run_and_nothing_else() {
    let t = tempfile::tempdir().unwrap();
    let mut fx = FakeHost::bundle_only();
    let fake = claiming(&mut fx, t.path(), 4253);
    let claims = fx.scratch("claims");
    fx.hook["claims_dir"] = json!(claims);
    // What a hook SIGKILLed mid-write leaves: in the container's plan dir and in the claims dir.
    let plan_dir = t
        .path()
        .join("croot")
        .join(fx.rootfs().strip_prefix("/").unwrap())
        .join("run/cpuplan");
    std::fs::create_dir_all(&plan_dir).unwrap();
    std::fs::create_dir_all(&claims).unwrap();
    let dead = dead_pid();
    let stale_plan = [
        format!(".plan.env.{dead}.123456789.tmp"),
        format!(".plan.json.{dead}.42.tmp"),
    ];
    let keep_plan = [
        // Another name, another form, or a writer that still runs.
        format!(".other.{dead}.1.tmp"),
        ".plan.env.tmp".to_string(),
        format!(".plan.env.{dead}.1.tmp.bak"),
        format!(".plan.env.{}.1.tmp", std::process::id()),
        "notes.txt".to_string(),
    ];
    let stale_claims = [".0000:3b:00.0.json.tmp", ".0000:18:00.0.json.tmp"];
    let keep_claims = [".lock.tmp", ".notes.json.tmp", "README"];
    for n in stale_plan.iter().chain(&keep_plan) {
        std::fs::write(plan_dir.join(n), "OMP_NUM_THREADS=999\n").unwrap();
    }
    for n in stale_claims.iter().chain(&keep_claims) {
        std::fs::write(claims.join(n), "{\"container\": \"torn").unwrap();
    }
    let r = fx.allow(Some(4253));
    assert_eq!(r.problem, None, "{r:?}");
    let mut want_plan: Vec<String> = keep_plan.to_vec();
    want_plan.extend(["plan.env".into(), "plan.json".into()]);
    want_plan.sort();
    assert_eq!(names(&plan_dir), want_plan);
    // The claim of 3b wrote over 3b's temporary; the claims directory is not listed at a
    // claim, so 18's stays until a release lists it.
    let mut want_claims: Vec<String> = keep_claims.iter().map(|s| s.to_string()).collect();
    want_claims.extend([".lock".into(), "0000:3b:00.0.json".into()]);
    let mut after_claim = want_claims.clone();
    after_claim.push(".0000:18:00.0.json.tmp".into());
    after_claim.sort();
    want_claims.sort();
    assert_eq!(names(&claims), after_claim);
    // Beside it: the record that the plan sits in the rootfs's own filesystem (a plain
    // directory here), in `hostplans` beside the claims directory (docs/engines.md), which
    // poststop takes away.
    let records = claims.parent().unwrap().join("hostplans");
    let recorded = names(&records);
    assert!(
        recorded.len() == 3
            && recorded[0].starts_with(".hostplan.")
            && recorded[1] == ".lock"
            && recorded[2].starts_with(".plandir."),
        "the container's record, the lock, the plan directory's: {recorded:?}"
    );
    // A poststop (release) removes them from the claims dir too. By then the init has exited.
    for n in stale_claims {
        std::fs::write(claims.join(n), "x").unwrap();
    }
    std::fs::remove_file(fake.root.join(format!("proc/{}/stat", fake.pid))).unwrap();
    let stopped =
        json!({"ociVersion": "1.0.2", "id": "h6-ctr", "status": "stopped", "bundle": fx.bundle()});
    common::fakehost::run_hook(
        Some("poststop"),
        stopped.to_string().as_bytes(),
        &fx.hook_path(),
    )
    .unwrap();
    want_claims.retain(|n| n != "0000:3b:00.0.json");
    assert_eq!(names(&claims), want_claims);
    assert_eq!(names(&records), [".lock"], "both records went at poststop");
}

#[test]
fn a_log_that_is_a_fifo_does_not_block_the_hook() {
    let mut fx = FakeHost::bundle_only();
    let fifo = fx.scratch("hook.log.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    fx.hook["log"] = json!(fifo);
    fx.write();
    let t = Instant::now();
    let mut child = hookbin::create_runtime(
        Path::new(env!("CARGO_BIN_EXE_cpuplan-hook")),
        &fx.hook_path(),
    )
    .spawn()
    .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(fx.state(None).as_bytes())
        .unwrap();
    // Bounded: a hook blocked on the FIFO is killed after 10 s, and the test fails.
    let status = common::procs::wait_at_most(&mut child, Duration::from_secs(10))
        .expect("the hook blocked on a FIFO log file");
    let took = t.elapsed();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{err}");
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert!(
        err.contains("cannot open log file")
            && err.contains(&fifo.display().to_string())
            && err.contains("FIFO"),
        "{err}"
    );
    assert!(fx.rootfs().join("run/cpuplan/plan.env").is_file(), "{err}");
}
