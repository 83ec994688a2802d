//! Load: 64 real runc containers started with bounded concurrency, all asking `auto` for the same
//! fake GPU. At most one live holder at any moment, whole plan files in every container, stale
//! claims of SIGKILLed containers deleted without poststop taken over, a bounded claims dir, and
//! the hook's p50/p99 time under this load.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::runc::{fixtures, hook_bin, Bundle};
use serde_json::{json, Value};

const CONTAINERS: usize = 64;
const CONCURRENCY: usize = 6;
const GPU: &str = "0000:3b:00.0";

/// What every container runs: timestamps (boot clock) around a short life, and its plan files.
const CMD: &str = r#"read up _ < /proc/uptime; echo "$CTR start $up" >> /shared/events
echo '--- env'; cat /run/cpuplan/plan.env; echo '--- json'; cat /run/cpuplan/plan.json; echo '--- end'
sleep 0.2
read up _ < /proc/uptime; echo "$CTR end $up" >> /shared/events"#;

struct Shared {
    dir: tempfile::TempDir,
}

impl Shared {
    fn claims(&self) -> PathBuf {
        self.dir.path().join("claims")
    }
    fn log(&self) -> PathBuf {
        self.dir.path().join("hook.log")
    }
    fn events(&self) -> PathBuf {
        self.dir.path().join("shared/events")
    }
    fn times(&self) -> PathBuf {
        self.dir.path().join("times")
    }
    fn config(&self) -> PathBuf {
        self.dir.path().join("hook.json")
    }
}

/// A bundle for container `tag`, its hook timed by a shell wrapper; `poststop` registered when asked.
fn bundle(s: &Shared, tag: &str, cmd: &str, poststop: bool) -> Bundle {
    let mut b = Bundle::new(tag, cmd);
    std::fs::create_dir_all(b.rootfs().join("shared")).unwrap();
    b.config["mounts"].as_array_mut().unwrap().push(json!({
        "destination": "/shared", "type": "bind",
        "source": s.dir.path().join("shared"), "options": ["rbind", "rw"]
    }));
    b.config["linux"]["resources"]["cpu"] = json!({"quota": 100000, "period": 100000});
    b.gpu(0);
    let ctr = format!("CTR={}", b.id);
    b.env(&ctr);
    let hook = format!("{} --config {}", hook_bin().display(), s.config().display());
    // createRuntime through a timing wrapper (two `date` forks add ~2 ms to each figure).
    let timed = format!(
        "s=$(date +%s%N); {hook} hook createRuntime; rc=$?; e=$(date +%s%N); echo $(( (e - s) / 1000 )) >> {}; exit $rc",
        s.times().display()
    );
    let mut hooks = json!({"createRuntime": [{"path": "/bin/sh", "args": ["sh", "-c", timed],
        "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], "timeout": 30}]});
    if poststop {
        hooks["poststop"] = json!([{"path": hook_bin(), "args": [hook_bin(), "--config", s.config(), "hook", "poststop"],
            "env": ["PATH=/usr/bin:/bin"], "timeout": 30}]);
    }
    b.config["hooks"] = hooks;
    b
}

fn section<'a>(out: &'a str, name: &str) -> Option<&'a str> {
    let start = out.find(&format!("--- {name}\n"))? + name.len() + 5;
    let rest = &out[start..];
    Some(&rest[..rest.find("--- ")?])
}

/// Checks the plan files are whole; returns whether this container holds the GPU's claim.
fn whole_plan(id: &str, out: &str) -> bool {
    let env = section(out, "env").unwrap_or_else(|| panic!("{id}: no plan.env: {out}"));
    let lines: Vec<&str> = env.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(lines.len(), 25, "{id}: torn plan.env: {env}");
    assert!(
        lines.last().unwrap().starts_with("CPUPLAN_GENERATION='"),
        "{id}: the last line is missing: {env}"
    );
    let json: Value = serde_json::from_str(section(out, "json").unwrap())
        .unwrap_or_else(|e| panic!("{id}: torn plan.json ({e}): {out}"));
    assert_eq!(json["container"], id);
    assert_eq!(json["inputs"]["gpus"], json!([GPU]));
    let why = json["why"].as_str().unwrap();
    assert!(!why.contains("without a GPU claim"), "{id}: {why}");
    !why.contains("held by another container")
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

#[test]
fn sixty_four_containers_share_one_gpu() {
    let s = Shared {
        dir: common::operator_dir::tempdir(),
    };
    std::fs::create_dir_all(s.dir.path().join("shared")).unwrap();
    std::fs::write(s.events(), "").unwrap();
    std::fs::write(
        s.config(),
        json!({
            "topology_root": fixtures().join("e2e-host"),
            "claims_dir": s.claims(),
            "log": s.log(),
            "step_thread_core": "auto",
        })
        .to_string(),
    )
    .unwrap();
    // Watch the claims dir: it never holds more than the lock, one claim and one temp file.
    let stop = AtomicBool::new(false);
    let most = AtomicUsize::new(0);
    let next = AtomicUsize::new(0);
    let holders: Mutex<HashMap<String, bool>> = Mutex::new(HashMap::new());
    let t0 = Instant::now();
    std::thread::scope(|sc| {
        sc.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let n = std::fs::read_dir(s.claims())
                    .map(|r| r.count())
                    .unwrap_or(0);
                most.fetch_max(n, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let workers: Vec<_> = (0..CONCURRENCY)
            .map(|_| {
                sc.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= CONTAINERS {
                        break;
                    }
                    let b = bundle(&s, &format!("load{i}"), CMD, true);
                    let (rc, out, err) = b.run();
                    assert_eq!(rc, 0, "{}: {err}\n{out}", b.id);
                    let holds = whole_plan(&b.id, &out);
                    holders.lock().unwrap().insert(b.id.clone(), holds);
                })
            })
            .collect();
        for w in workers {
            if let Err(p) = w.join() {
                stop.store(true, Ordering::Relaxed);
                std::panic::resume_unwind(p);
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    let wall = t0.elapsed();
    let holders = holders.into_inner().unwrap();
    assert_eq!(holders.len(), CONTAINERS);
    let n_holders = holders.values().filter(|h| **h).count();
    assert!(n_holders >= 1, "no container ever held the GPU");
    // At most one live holder at any moment: the holders' lives (boot clock) never overlap.
    let events = std::fs::read_to_string(s.events()).unwrap();
    let mut spans: HashMap<String, (f64, f64)> = HashMap::new();
    for l in events.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        let e = spans.entry(f[0].to_string()).or_insert((0.0, 0.0));
        let t: f64 = f[2].parse().unwrap();
        if f[1] == "start" {
            e.0 = t;
        } else {
            e.1 = t;
        }
    }
    let mut held: Vec<(f64, f64, &String)> = holders
        .iter()
        .filter(|(_, h)| **h)
        .map(|(id, _)| {
            let (a, b) = spans[id];
            (a, b, id)
        })
        .collect();
    held.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
    for w in held.windows(2) {
        assert!(
            w[0].1 <= w[1].0,
            "two live holders: {} [{}, {}] and {} [{}, {}]",
            w[0].2,
            w[0].0,
            w[0].1,
            w[1].2,
            w[1].0,
            w[1].1
        );
    }
    // Some containers overlapped a holder, so the claim was contended.
    assert!(
        n_holders < CONTAINERS,
        "no contention: every container held the GPU"
    );
    // One log line per container (its plan), and every claim released by poststop.
    let log = std::fs::read_to_string(s.log()).unwrap();
    for id in holders.keys() {
        let n = log
            .lines()
            .filter(|l| l.contains(&format!("container {id}: pid")))
            .count();
        assert_eq!(n, 1, "{id}: {n} plan lines in the log");
    }
    let most = most.load(Ordering::Relaxed);
    assert!(most <= 3, "the claims dir held {most} entries at once");
    let left: Vec<String> = std::fs::read_dir(s.claims())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, vec![".lock".to_string()], "after poststop");
    let mut times: Vec<u64> = std::fs::read_to_string(s.times())
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(times.len(), CONTAINERS);
    times.sort();
    eprintln!(
        "load: {CONTAINERS} containers, {CONCURRENCY} at a time, in {wall:?}; {n_holders} held the GPU; \
         hook createRuntime p50 {} ms, p99 {} ms, max {} ms; claims dir peak {most} entries",
        percentile(&times, 0.5) as f64 / 1000.0,
        percentile(&times, 0.99) as f64 / 1000.0,
        *times.last().unwrap() as f64 / 1000.0
    );
    stale_claims_are_taken_over(&s);
}

fn claim_holder(s: &Shared) -> Option<String> {
    let text = std::fs::read_to_string(s.claims().join(format!("{GPU}.json"))).ok()?;
    let v: Value = serde_json::from_str(&text).unwrap();
    v["container"].as_str().map(String::from)
}

/// A detached container without poststop, SIGKILLed and deleted: its claim stays, stale, and the next container takes it over.
fn stale_claims_are_taken_over(s: &Shared) {
    for round in 0..2 {
        let k = bundle(
            s,
            &format!("killed{round}"),
            "cat /run/cpuplan/plan.json > /shared/killed.json; sleep 600",
            false,
        );
        std::fs::write(
            k.path().join("config.json"),
            serde_json::to_vec_pretty(&k.config).unwrap(),
        )
        .unwrap();
        let state = k.dir.path().join("state");
        let out = Command::new("timeout")
            .arg("60")
            .arg("runc")
            .arg("--root")
            .arg(&state)
            .args(["run", "-d", "--bundle"])
            .arg(k.path())
            .arg(&k.id)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            // A file, not a pipe: the detached container inherits it and would hold a pipe open.
            .stderr(std::fs::File::create(k.dir.path().join("runc.err")).unwrap())
            .status()
            .unwrap();
        let err = std::fs::read_to_string(k.dir.path().join("runc.err")).unwrap_or_default();
        assert!(out.success(), "{err}");
        assert_eq!(
            claim_holder(s).as_deref(),
            Some(k.id.as_str()),
            "the killed container held the GPU"
        );
        let st = Command::new("runc")
            .arg("--root")
            .arg(&state)
            .args(["state", &k.id])
            .output()
            .unwrap();
        let pid = serde_json::from_slice::<Value>(&st.stdout).unwrap()["pid"]
            .as_i64()
            .unwrap();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let t = Instant::now();
        while Path::new(&format!("/proc/{pid}")).exists() && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let del = Command::new("runc")
            .arg("--root")
            .arg(&state)
            .args(["delete", "-f", &k.id])
            .output()
            .unwrap();
        assert!(
            del.status.success(),
            "{}",
            String::from_utf8_lossy(&del.stderr)
        );
        assert_eq!(
            claim_holder(s).as_deref(),
            Some(k.id.as_str()),
            "no poststop ran, so the claim is still there (stale)"
        );
        // The next container takes the stale claim over.
        let n = bundle(s, &format!("after{round}"), CMD, true);
        let (rc, out, err) = n.run();
        assert_eq!(rc, 0, "{err}");
        assert!(
            whole_plan(&n.id, &out),
            "{}: did not take the stale claim over: {out}",
            n.id
        );
        assert_eq!(claim_holder(s), None, "released by its poststop");
    }
}
