//! Which container a claim, a cpuset and the plan files are for: the same container id in two
//! runc roots keeps apart (claims are scoped by the bundle), and a host process that the state
//! names (a pid reused by a service with a private mount namespace) gets nothing, while a pid
//! in the cgroup the spec names, in path or systemd form, gets its plan.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::fakehost::FakeHost;
use common::hookbin;
use common::runc::{cpuplan_bin, fixtures, hook_bin, line_value, Bundle};
use serde_json::{json, Value};

/// Polls `what` every 50 ms until it is true, failing after `limit`.
fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `cpuplan --config CFG ARGS…`, its output.
fn cpuplan_cli(cfg: &Path, args: &[&str]) -> Output {
    Command::new(cpuplan_bin())
        .arg("--config")
        .arg(cfg)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn the_same_id_in_two_runc_roots_neither_takes_nor_releases_the_others_claim() {
    // One host: one claims dir and one log for both runtime roots.
    let host = common::operator_dir::tempdir();
    let claims = host.path().join("claims");
    let log = host.path().join("hook.log");
    let cfg = host.path().join("hook.json");
    std::fs::write(
        &cfg,
        serde_json::to_vec(&json!({
            "topology_root": fixtures().join("e2e-host"),
            "claims_dir": claims,
            "log": log,
            "step_thread_core": "auto",
        }))
        .unwrap(),
    )
    .unwrap();
    let hook_args = vec![
        hook_bin().display().to_string(),
        "--config".into(),
        cfg.display().to_string(),
        "hook".into(),
    ];
    let gpu = |b: &mut Bundle| {
        b.hook(&["createRuntime", "poststop"], &hook_args);
        b.gpu(0);
        b.config["linux"]["resources"]["cpu"] = json!({"quota": 100000, "period": 100000});
    };
    // Root A: a container that runs until the test creates /stop in its rootfs.
    let mut a = Bundle::new(
        "roots",
        "echo started; while [ ! -e /stop ]; do sleep 0.1; done",
    );
    gpu(&mut a);
    let id = a.id.clone();
    // Root B (its own bundle, state dir and cgroup): the same id, printing its plan.
    let mut b = Bundle::new(
        "roots-b",
        "echo started; cat /run/cpuplan/plan.env; ls -a /run/cpuplan",
    );
    b.id = id.clone();
    b.cgroup = format!("/{id}-b");
    b.config["linux"]["cgroupsPath"] = json!(b.cgroup.clone());
    gpu(&mut b);

    let mut running = a.spawn();
    let live_claim = || {
        cpuplan::list_claims(&claims, Path::new("/"))
            .map(|c| c.len() == 1 && c[0].live)
            .unwrap_or(false)
    };
    wait_until(Duration::from_secs(30), "container A's claim", live_claim);
    let held = cpuplan::list_claims(&claims, Path::new("/")).unwrap();
    let scope_a = a.path().display().to_string();
    assert_eq!(held[0].holder.container, id);
    assert_eq!(held[0].holder.scope, scope_a);

    // B starts while A runs: the GPU is held against it, so it pins nothing.
    let (rc, out, err) = b.run();
    assert_eq!(rc, 0, "{err}\n{out}");
    assert!(out.contains("started"), "{out}");
    let why = line_value(&out, "CPUPLAN_WHY").unwrap_or_default();
    assert!(why.contains("is held by another container"), "{out}");
    assert!(!why.contains(&id), "A's id shown to B: {out}");
    assert!(!why.contains(&scope_a), "A's bundle shown to B: {out}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains(&format!("is held by live container {id} (pid "))
            && text.contains(&format!("bundle {scope_a})")),
        "the host's log names the holder's bundle: {text}"
    );
    // B's poststop has run (runc run deletes the container): A's claim is still A's.
    let after = cpuplan::list_claims(&claims, Path::new("/")).unwrap();
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(after[0].holder, held[0].holder, "B took A's claim");
    assert!(after[0].live);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("released 0 GPU claim(s)"), "{text}");

    // The claims command names the bundle, in text and JSON.
    let listed = cpuplan_cli(&cfg, &["claims"]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.contains(&format!("container {id}  bundle {scope_a}  pid"))
            && listed.contains("live"),
        "{listed}"
    );
    let listed = cpuplan_cli(&cfg, &["claims", "--json"]);
    let v: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(v[0]["holder"]["scope"], scope_a.as_str(), "{v}");
    assert_eq!(v[0]["holder"]["container"], id.as_str(), "{v}");

    // A stops: its own poststop releases its claim.
    std::fs::write(a.rootfs().join("stop"), "").unwrap();
    let (rc, err) = running.wait(Duration::from_secs(30));
    assert_eq!(rc, 0, "{err}");
    assert!(
        cpuplan::list_claims(&claims, Path::new("/"))
            .unwrap()
            .is_empty(),
        "A's poststop left its claim"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("released 1 GPU claim(s)"), "{text}");
}

/// Cgroup directories the test made, removed (deepest first) on drop once their processes are gone.
struct CgDirs(Vec<PathBuf>);

impl Drop for CgDirs {
    fn drop(&mut self) {
        for d in self.0.iter().rev() {
            let start = Instant::now();
            while d.exists() && std::fs::remove_dir(d).is_err() {
                if start.elapsed() > Duration::from_secs(5) {
                    eprintln!("cannot remove {}", d.display());
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// A process killed and reaped on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The v1 `cpuset` and `cpu` hierarchies' mount points (else the v2 one), from the test's own cgroups.
fn hierarchies() -> Vec<(PathBuf, bool)> {
    let own = cpuplan::Cgroups::of(Path::new("/"), cpuplan::Process::Current).unwrap();
    let mut out: Vec<(PathBuf, bool)> = own
        .dirs()
        .iter()
        .filter(|d| d.has_v1_controller("cpuset") || d.has_v1_controller("cpu"))
        .map(|d| (d.mount.clone(), d.has_v1_controller("cpuset")))
        .collect();
    if out.is_empty() {
        out = own
            .dirs()
            .iter()
            .filter(|d| d.version == cpuplan::CgroupVersion::V2)
            .map(|d| (d.mount.clone(), false))
            .collect();
    }
    assert!(!out.is_empty(), "no cgroup hierarchy found");
    out
}

/// Creates `rel` (nested) in every hierarchy, recording each new dir in `made`, and moves `pid` into it.
/// On a v1 cpuset hierarchy each new level gets its parent's `cpuset.cpus` and `cpuset.mems`.
fn move_into(rel: &str, pid: u32, made: &mut CgDirs) -> Vec<PathBuf> {
    let mut leaves = Vec::new();
    for (mount, cpuset) in hierarchies() {
        let mut dir = mount.clone();
        for comp in rel.split('/').filter(|c| !c.is_empty()) {
            let parent = dir.clone();
            dir.push(comp);
            if !dir.exists() {
                std::fs::create_dir(&dir).unwrap();
                made.0.push(dir.clone());
                if cpuset {
                    for f in ["cpuset.cpus", "cpuset.mems"] {
                        let v = std::fs::read_to_string(parent.join(f)).unwrap();
                        std::fs::write(dir.join(f), v.trim()).unwrap();
                    }
                }
            }
        }
        std::fs::write(dir.join("cgroup.procs"), pid.to_string()).unwrap();
        leaves.push(dir);
    }
    leaves
}

/// The cpuset.cpus of the v1 cpuset hierarchy's `rel`, if there is one.
fn cpuset_of(rel: &str) -> Option<String> {
    let (mount, _) = hierarchies().into_iter().find(|(_, c)| *c)?;
    std::fs::read_to_string(mount.join(rel.trim_start_matches('/')).join("cpuset.cpus"))
        .ok()
        .map(|s| s.trim().to_string())
}

fn claim_files(fx: &FakeHost) -> Vec<String> {
    std::fs::read_dir(fx.scratch("claims"))
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".json"))
                .collect()
        })
        .unwrap_or_default()
}

/// Runs the hook binary at createRuntime on `fx` for `pid`: exit code and stderr.
fn run(fx: &FakeHost, pid: u32) -> (i32, String) {
    fx.write();
    let out = hookbin::run_fed(
        &mut hookbin::create_runtime(&hook_bin(), &fx.hook_path()),
        fx.state(Some(pid)).as_bytes(),
    );
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_host_process_with_a_private_mount_namespace_gets_nothing() {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "makes cgroups: runs as root (CI does)"
    );
    let tag = std::process::id();
    let mut made = CgDirs(Vec::new());
    // A host "service": its own mount namespace (unshare -m, like PrivateTmp=), its own cgroup.
    let child = Command::new("unshare")
        .args(["-m", "sleep", "120"])
        .stdin(Stdio::null())
        .spawn()
        .expect("unshare (util-linux)");
    let sleeper = Proc(child);
    let pid = sleeper.0.id();
    let own_ns = std::fs::read_link("/proc/self/ns/mnt").unwrap();
    wait_until(
        Duration::from_secs(10),
        "the private mount namespace",
        || std::fs::read_link(format!("/proc/{pid}/ns/mnt")).is_ok_and(|ns| ns != own_ns),
    );
    let service = format!("cpuplan-h11-svc-{tag}.service");
    move_into(&service, pid, &mut made);
    let cpus_before = cpuset_of(&service);

    // The state names it as the container's init; the spec's container cgroup is elsewhere.
    let mut fx = FakeHost::bundle_only();
    fx.hook["step_thread_core"] = json!("auto");
    fx.gpu(0);
    fx.spec["linux"]["resources"] = json!({"cpu": {"quota": 100000, "period": 100000}});
    fx.spec["linux"]["cgroupsPath"] = json!(format!("/cpuplan-h11-ctr-{tag}"));
    let (rc, err) = run(&fx, pid);
    assert_eq!(rc, 0, "allow starts the container: {err}");
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.contains(&format!("pid {pid} is not the container's init")))
        .collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains(&service)
            && lines[0].contains(&format!("/cpuplan-h11-ctr-{tag}"))
            && lines[0].contains("writing nothing"),
        "{err}"
    );
    assert_eq!(cpuset_of(&service), cpus_before, "its cpuset was narrowed");
    assert!(claim_files(&fx).is_empty(), "a claim was made");
    assert!(fx.plan_files("").is_empty(), "{:?}", fx.plan_files(""));
    fx.hook["on_error"] = json!("deny");
    let (rc, err) = run(&fx, pid);
    assert_ne!(rc, 0, "deny refuses: {err}");
    assert!(err.contains("is not the container's init"), "{err}");
    assert!(fx.plan_files("").is_empty());
    fx.hook["on_error"] = json!("allow");
    // A systemd-form cgroupsPath names a scope it is not in either.
    fx.spec["linux"]["cgroupsPath"] = json!(format!("cpuplan11-x{tag}.slice:h11:c{tag}"));
    let (rc, err) = run(&fx, pid);
    assert_eq!(rc, 0, "{err}");
    assert!(
        err.contains("is not the container's init")
            && err.contains(&format!(
                "cpuplan11.slice/cpuplan11-x{tag}.slice/h11-c{tag}.scope"
            )),
        "{err}"
    );
    assert_eq!(cpuset_of(&service), cpus_before, "its cpuset was narrowed");
    assert!(claim_files(&fx).is_empty(), "a claim was made");
    assert!(fx.plan_files("").is_empty(), "{:?}", fx.plan_files(""));

    // The same process in the cgroup a systemd-form cgroupsPath names: it is the container's.
    let slice = format!("cpuplan11-t{tag}.slice");
    let scope = format!("cpuplan11.slice/{slice}/h11-c{tag}.scope");
    move_into(&scope, pid, &mut made);
    fx.spec["linux"]["cgroupsPath"] = json!(format!("{slice}:h11:c{tag}"));
    let (rc, err) = run(&fx, pid);
    assert_eq!(rc, 0, "{err}");
    assert!(!err.contains("not the container's init"), "{err}");
    assert_eq!(
        fx.plan_files("run/cpuplan"),
        ["plan.env", "plan.json"],
        "{err}"
    );
    assert_eq!(claim_files(&fx), ["0000:3b:00.0.json"]);
    if let Some(cpus) = cpuset_of(&scope) {
        assert_eq!(cpus, "1", "narrowed to the GPU's CPU: {err}");
    }
    // And in path form.
    std::fs::remove_dir_all(fx.rootfs().join("run")).unwrap();
    let path_form = format!("cpuplan-h11-ctr-{tag}/inner");
    move_into(&path_form, pid, &mut made);
    fx.spec["linux"]["cgroupsPath"] = json!(format!("/{path_form}"));
    let (rc, err) = run(&fx, pid);
    assert_eq!(rc, 0, "{err}");
    assert_eq!(
        fx.plan_files("run/cpuplan"),
        ["plan.env", "plan.json"],
        "{err}"
    );
    drop(sleeper);
}
