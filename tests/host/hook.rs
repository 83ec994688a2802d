//! The hook's library entry point over a fake host: every input source, output and failure mode.

use std::path::Path;

use common::fakehost::run_hook;
use common::fakehost::FakeHost;
use common::hookbin;
use cpuplan_hook::hook::{HookError, Report};
use serde_json::{json, Value};

fn run(h: &FakeHost) -> Result<Option<Report>, HookError> {
    let (state, cfg) = h.written();
    run_hook(Some("createRuntime"), state.as_bytes(), &cfg)
}

fn report(h: &FakeHost) -> Report {
    run(h).expect("hook ran").expect("a createRuntime report")
}

fn env_line(h: &FakeHost, key: &str) -> String {
    let env = h.plan_file("plan.env").expect("plan.env written");
    env.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")).map(String::from))
        .unwrap_or_else(|| panic!("{key} not in plan.env:\n{env}"))
}

#[test]
fn visible_devices_and_a_cpu_number_setting() {
    let mut h = FakeHost::new();
    h.env("NVIDIA_VISIBLE_DEVICES=1,0");
    let r = report(&h);
    assert_eq!(r.problem, None);
    // numa: both GPUs on node 0, whose 112 CPUs hold the 8 usable ones.
    assert_eq!(h.cpuset(), "0-55,112-167");
    assert_eq!(r.plan.plan.mask.to_string(), "0-55,112-167");
    assert_eq!(r.plan.plan.usable, 8);
    let w: Vec<String> = r
        .plan
        .plan
        .workers
        .iter()
        .map(|w| w.as_ref().unwrap().cpus.to_string())
        .collect();
    assert_eq!(w, ["2,114", "3,115"]);
    assert_eq!(
        r.plan.plan.result.as_ref().unwrap().cpus.to_string(),
        "55,167"
    );
    assert_eq!(env_line(&h, "CPUPLAN_WORKERS"), "'2,114;3,115'");
    assert_eq!(
        env_line(&h, "CPUPLAN_DEVICES"),
        "'0000:18:00.0;0000:2a:00.0'"
    );
    assert_eq!(env_line(&h, "CPUPLAN_RESULT"), "'55,167'");
    assert_eq!(env_line(&h, "CPUPLAN_PINNED"), "'2-3,55,114-115,167'");
    assert_eq!(env_line(&h, "CPUPLAN_LEFT"), "'2'");
    // Two worker processes and the API server share the 2 CPUs left: one thread each.
    assert_eq!(env_line(&h, "RAYON_NUM_THREADS"), "'1'");
    assert_eq!(env_line(&h, "CPUPLAN_WORKER_THREADS"), "'1'");
    assert_eq!(env_line(&h, "CPUPLAN_POOL_SPLIT"), "'per-process'");
    assert_eq!(env_line(&h, "GOMAXPROCS"), "'8'");
    assert_eq!(env_line(&h, "CPUPLAN_PREPROCESS_THREADS"), "'1'");
    assert_eq!(env_line(&h, "CPUPLAN_PNG_THREADS"), "'1'");
    assert_eq!(env_line(&h, "CPUPLAN_ENCODE_WORKERS"), "'2'");
    assert_eq!(env_line(&h, "CPUPLAN_COPY_WORKERS"), "'1'");
    let json: Value = serde_json::from_str(&h.plan_file("plan.json").unwrap()).unwrap();
    assert_eq!(json["container"], "ctr");
    assert_eq!(json["inputs"]["cgroup_quota"], 8.0);
    assert_eq!(json["inputs"]["cpuset"], "0-55,112-167");
    assert_eq!(json["inputs"]["setting_from"], "hook config");
}

#[test]
fn linux_devices_name_gpus_by_minor() {
    let mut h = FakeHost::new();
    h.spec["linux"]["devices"] = json!([
        {"path": "/dev/nvidia5", "type": "c", "major": 195, "minor": 5},
        {"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255}
    ]);
    h.hook["step_thread_core"] = json!("60");
    let r = report(&h);
    assert_eq!(r.plan.inputs.gpus, ["0000:ab:00.0"]);
    assert_eq!(h.cpuset(), "56-111,168-223", "GPU 5 is on node 1");
}

#[test]
fn setting_sources_in_order() {
    let mut h = FakeHost::new();
    h.env("NVIDIA_VISIBLE_DEVICES=0");
    h.env("CPUPLAN_STEP_THREAD_CORE=off");
    let r = report(&h);
    assert_eq!(r.plan.plan.setting, "off");
    assert_eq!(
        r.plan.inputs.setting_from,
        "process.env CPUPLAN_STEP_THREAD_CORE"
    );
    h.spec["annotations"] = json!({"cpuplan.step-thread-core": "4"});
    let r = report(&h);
    assert_eq!(r.plan.plan.setting, "4");
    assert_eq!(
        r.plan.plan.workers[0].as_ref().unwrap().cpus.to_string(),
        "4,116"
    );
    assert_eq!(
        r.plan.inputs.setting_from,
        "annotation cpuplan.step-thread-core"
    );
}

#[test]
fn quota_and_cpus_from_config_and_cgroup_tightest_wins() {
    let mut h = FakeHost::new();
    h.spec["linux"]["resources"] =
        json!({"cpu": {"quota": 250000, "period": 100000, "cpus": "0-5,112-117"}});
    h.hook["step_thread_core"] = json!("off");
    let r = report(&h);
    assert_eq!(r.plan.inputs.quota, Some(2.5));
    assert_eq!(r.plan.plan.usable, 2);
    assert_eq!(r.plan.plan.mask.to_string(), "0-5,112-117");
    assert_eq!(h.cpuset(), "0-223", "no GPU: the cpuset is left alone");
    assert_eq!(env_line(&h, "GOMAXPROCS"), "'2'");
}

#[test]
fn numa_keeps_the_mask_when_the_gpus_local_cpus_are_too_few() {
    let mut h = FakeHost::new();
    h.env("NVIDIA_VISIBLE_DEVICES=0");
    h.spec["linux"]["resources"] = json!({"cpu": {"cpus": "50-60"}});
    h.hook["step_thread_core"] = json!("off");
    let r = report(&h);
    // node 0's CPUs in the mask are 50-55: 6 < 8 usable.
    assert_eq!(h.cpuset(), "0-223");
    assert_eq!(r.plan.plan.mask.to_string(), "50-60");
    assert!(
        r.plan.plan.why.contains("fewer than the 8 usable"),
        "{}",
        r.plan.plan.why
    );
}

#[test]
fn cpuset_keep_never_writes() {
    let mut h = FakeHost::new();
    h.env("NVIDIA_VISIBLE_DEVICES=0");
    h.hook["cpuset"] = json!("keep");
    let r = report(&h);
    assert_eq!(h.cpuset(), "0-223");
    assert!(r.cpuset_file.is_none());
}

#[test]
fn an_unknown_gpu_is_a_note_and_never_a_planning_problem_allow_and_deny() {
    let mut h = FakeHost::new();
    h.env("NVIDIA_VISIBLE_DEVICES=GPU-00000000-0000-0000-0000-000000000000,1");
    for on_error in ["allow", "deny"] {
        h.hook["on_error"] = json!(on_error);
        let r = report(&h);
        assert_eq!(r.problem, None, "{on_error}");
        // The GPU that resolves is planned for; the one that does not is a note in plan.json.
        assert_ne!(env_line(&h, "CPUPLAN_SETTING"), "'off'");
        assert_eq!(env_line(&h, "CPUPLAN_DEVICES"), "'0000:2a:00.0'");
        assert_eq!(r.plan.inputs.gpus, ["0000:2a:00.0"]);
        let notes = &r.plan.inputs.gpu_notes;
        assert!(
            notes.len() == 1
                && notes[0].contains("\"GPU-00000000-0000-0000-0000-000000000000\" matches no GPU"),
            "{notes:?}"
        );
        let json: Value = serde_json::from_str(&h.plan_file("plan.json").unwrap()).unwrap();
        assert_eq!(json["inputs"]["gpu_notes"][0], notes[0].as_str());
    }
}

#[test]
fn malformed_cgroup_files_name_the_file() {
    let h = FakeHost::new();
    std::fs::write(
        h.file("sys/fs/cgroup/cpu,cpuacct/ctr/cpu.cfs_quota_us"),
        "lots\n",
    )
    .unwrap();
    let cause = report(&h).problem.expect("a problem");
    assert!(
        cause.contains("cpu.cfs_quota_us") && cause.contains("lots"),
        "{cause}"
    );
}

#[test]
fn a_bad_hook_config_names_file_and_key() {
    let mut h = FakeHost::new();
    h.hook["cpuset"] = json!("everything");
    let (state, cfg) = h.written();
    // The container gets the off plan carrying the cause, not no plan at all.
    let r = run_hook(Some("createRuntime"), state.as_bytes(), &cfg)
        .unwrap()
        .expect("a report");
    assert!(
        r.problem.as_deref().unwrap().contains("everything"),
        "{r:?}"
    );
    let env = h.plan_file("plan.env").expect("the off plan's plan.env");
    assert!(env.contains("CPUPLAN_SETTING='off'"), "{env}");
    let why = common::runc::line_value(&env, "CPUPLAN_WHY").unwrap();
    assert!(
        why.contains(&cfg.display().to_string()) && why.contains("everything"),
        "{why}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&h.plan_file("plan.json").expect("plan.json")).unwrap();
    assert_eq!(json["setting"], "off");
    assert_eq!(h.cpuset(), "0-223", "the off plan writes no cpuset");
    let err = hook_binary_stderr(&state, &cfg);
    assert!(
        err.contains(&cfg.display().to_string()) && err.contains("everything"),
        "{err}"
    );
    let mut h = FakeHost::new();
    h.hook["on_error"] = json!("deny");
    h.hook["surprise"] = json!(1);
    let (state, cfg) = h.written();
    // A config that fails to load but still says deny is honoured: the container is refused.
    let e = run_hook(Some("createRuntime"), state.as_bytes(), &cfg).unwrap_err();
    assert!(matches!(e, HookError::Denied { .. }), "{e}");
    let bin = Path::new(env!("CARGO_BIN_EXE_cpuplan-hook"));
    let out = hookbin::run_fed(&mut hookbin::create_runtime(bin, &cfg), state.as_bytes());
    assert_eq!(out.status.code(), Some(1), "deny refuses the container");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&cfg.display().to_string()) && err.contains("surprise"),
        "{err}"
    );
    assert!(h.plan_file("plan.env").is_none(), "deny writes nothing");
    // Where on_error itself cannot be read, the default (allow) applies; a typo of a key
    // ("step_thread_cor") is such a config too, and a valid `dir` still says where the plan goes.
    h.hook["on_error"] = json!("maybe");
    let (state, cfg) = h.written();
    let r = run_hook(Some("createRuntime"), state.as_bytes(), &cfg)
        .unwrap()
        .expect("a report");
    assert_eq!(r.plan.plan.setting, "off");
    let err = hook_binary_stderr(&state, &cfg);
    assert!(err.contains("maybe"), "{err}");
    h.hook.as_object_mut().unwrap().remove("on_error");
    h.hook.as_object_mut().unwrap().remove("surprise");
    h.hook["step_thread_cor"] = json!("auto");
    h.hook["dir"] = json!("/run/elsewhere");
    let (state, cfg) = h.written();
    let r = run_hook(Some("createRuntime"), state.as_bytes(), &cfg)
        .unwrap()
        .expect("a report");
    assert_eq!(r.plan.plan.setting, "off");
    let env = std::fs::read_to_string(h.bundle().join("rootfs/run/elsewhere/plan.env")).unwrap();
    assert!(env.contains("unknown field `step_thread_cor`"), "{env}");
}

/// Runs the `cpuplan-hook` binary at createRuntime on `state` with `cfg`; it must exit 0. Returns its stderr.
fn hook_binary_stderr(state: &str, cfg: &Path) -> String {
    let bin = Path::new(env!("CARGO_BIN_EXE_cpuplan-hook"));
    let out = hookbin::run_fed(&mut hookbin::create_runtime(bin, cfg), state.as_bytes());
    assert!(out.status.success(), "allow: the container starts");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn an_unwritable_plan_dir_is_reported_and_allowed() {
    let mut h = FakeHost::new();
    h.env("NVIDIA_VISIBLE_DEVICES=0");
    std::fs::write(h.bundle().join("rootfs/run"), "not a dir").unwrap();
    let r = report(&h);
    let cause = r.problem.expect("a problem");
    assert!(
        cause.contains("/run") && cause.contains("not a directory"),
        "{cause}"
    );
}

#[test]
fn a_malformed_state_always_fails() {
    let h = FakeHost::new();
    let (_, cfg) = h.written();
    for bad in ["", "{", r#"{"id":"x","status":"creating","bundle":"rel"}"#] {
        assert!(
            run_hook(Some("createRuntime"), bad.as_bytes(), &cfg).is_err(),
            "{bad:?}"
        );
    }
}

#[test]
fn other_stages_do_nothing() {
    let h = FakeHost::new();
    let (state, cfg) = h.written();
    assert!(run_hook(Some("startContainer"), state.as_bytes(), &cfg)
        .unwrap()
        .is_none());
    assert!(h.plan_file("plan.env").is_none());
    assert_eq!(h.cpuset(), "0-223", "the cpuset is untouched");
}

#[test]
fn auto_claims_the_gpus_and_a_second_container_pins_nothing_until_poststop() {
    let mut h = FakeHost::new();
    h.gpus(&[0, 1]);
    h.hook["step_thread_core"] = json!("auto");
    let r = report(&h);
    let w: Vec<String> = r
        .plan
        .plan
        .workers
        .iter()
        .map(|w| w.as_ref().unwrap().cpus.to_string())
        .collect();
    assert_eq!(w, ["0,112", "1,113"], "{}", r.plan.plan.why);
    assert_eq!(
        r.plan.plan.result.as_ref().unwrap().cpus.to_string(),
        "55,167"
    );
    let claims = cpuplan::list_claims(&h.dir.path().join("claims"), &h.root()).unwrap();
    assert_eq!(claims.len(), 2);
    assert!(claims
        .iter()
        .all(|c| c.live && c.holder.container == "ctr" && c.holder.start_time == 777));

    // A second live container on the same GPUs.
    let other = 4243;
    let stat = std::fs::read_to_string(h.file("proc/4242/stat"))
        .unwrap()
        .replace("4242", "4243");
    for f in ["cgroup", "status"] {
        let from = h.file(&format!("proc/4242/{f}"));
        let to = h.file(&format!("proc/{other}/{f}"));
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, to).unwrap();
    }
    std::fs::write(h.file(&format!("proc/{other}/stat")), stat).unwrap();
    std::fs::create_dir_all(h.file(&format!("proc/{other}/ns"))).unwrap();
    std::os::unix::fs::symlink("mnt:[4026532998]", h.file(&format!("proc/{other}/ns/mnt")))
        .unwrap();
    std::os::unix::fs::symlink("/", h.file(&format!("proc/{other}/root"))).unwrap();
    let (_, cfg) = h.written();
    // Its own bundle and rootfs (a rootfs directory is planned for by one container at a time).
    let bundle2 = h.dir.path().join("bundle2");
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(h.bundle())
        .arg(&bundle2)
        .status()
        .unwrap();
    assert!(copied.success());
    let second = json!({"ociVersion": "1.0.2", "id": "ctr2", "status": "creating", "pid": other, "bundle": bundle2});
    let r2 = run_hook(Some("createRuntime"), second.to_string().as_bytes(), &cfg)
        .unwrap()
        .unwrap();
    assert!(r2.plan.plan.workers.iter().all(|w| w.is_none()));
    // The plan (the second tenant's to read) says the GPU is held, never by whom.
    let why = &r2.plan.plan.why;
    assert!(
        why.contains("GPU 0000:18:00.0 is held by another container"),
        "{why}"
    );
    assert!(
        !why.contains("ctr ") && !why.contains("ctr)") && !why.contains("4242"),
        "the holder's id or pid in the plan: {why}"
    );
    let json = std::fs::read_to_string(bundle2.join("rootfs/run/cpuplan/plan.json")).unwrap();
    assert!(
        !json.contains("\"ctr\"") && !json.contains("4242"),
        "the holder in plan.json: {json}"
    );

    // poststop of the first (its init has exited) releases its claims; the second
    // container's next start takes them.
    std::fs::remove_file(h.file("proc/4242/stat")).unwrap();
    let stopped =
        json!({"ociVersion": "1.0.2", "id": "ctr", "status": "stopped", "bundle": h.bundle()});
    assert!(run_hook(None, stopped.to_string().as_bytes(), &cfg)
        .unwrap()
        .is_none());
    assert!(
        cpuplan::list_claims(&h.dir.path().join("claims"), &h.root())
            .unwrap()
            .is_empty()
    );
    let r3 = run_hook(Some("createRuntime"), second.to_string().as_bytes(), &cfg)
        .unwrap()
        .unwrap();
    assert!(
        r3.plan.plan.workers.iter().all(|w| w.is_some()),
        "{}",
        r3.plan.plan.why
    );
}

#[test]
fn a_stale_holder_is_taken_over() {
    let mut h = FakeHost::new();
    h.gpus(&[0]);
    h.hook["step_thread_core"] = json!("auto");
    report(&h);
    // The holder's pid now has another start time: it exited and the pid was reused.
    let stat = std::fs::read_to_string(h.file("proc/4242/stat"))
        .unwrap()
        .replace(" 777 ", " 999 ");
    std::fs::write(h.file("proc/4242/stat"), stat).unwrap();
    let (_, cfg) = h.written();
    let other = json!({"ociVersion": "1.0.2", "id": "ctr-new", "status": "creating", "pid": 4242, "bundle": h.bundle()});
    let r = run_hook(Some("createRuntime"), other.to_string().as_bytes(), &cfg)
        .unwrap()
        .unwrap();
    assert!(r.plan.plan.workers[0].is_some(), "{}", r.plan.plan.why);
    let claims = cpuplan::list_claims(&h.dir.path().join("claims"), &h.root()).unwrap();
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0].holder.container, "ctr-new");
    assert_eq!(claims[0].holder.start_time, 999);
}

#[test]
fn gpus_the_environment_alone_names_are_planned_for_but_never_claimed() {
    let mut h = FakeHost::new();
    h.env("NVIDIA_VISIBLE_DEVICES=all");
    h.hook["step_thread_core"] = json!("auto");
    let r = report(&h);
    assert_eq!(r.plan.inputs.gpus.len(), 8, "planned for");
    assert!(
        r.plan
            .plan
            .why
            .contains("not claimed, as no source gpu_sources trusts names them"),
        "{}",
        r.plan.plan.why
    );
    let claims = cpuplan::list_claims(&h.dir.path().join("claims"), &h.root()).unwrap();
    assert!(claims.is_empty(), "{claims:?}");
    // An operator who trusts the environment (only the device plugin sets it) gets the claims.
    h.hook["gpu_sources"] = json!(["devices", "nodes", "env"]);
    report(&h);
    let claims = cpuplan::list_claims(&h.dir.path().join("claims"), &h.root()).unwrap();
    assert_eq!(claims.len(), 8);
}

#[test]
fn a_container_id_with_a_newline_forges_no_log_or_claims_line() {
    let mut h = FakeHost::new();
    h.gpus(&[0]);
    h.hook["step_thread_core"] = json!("auto");
    let (_, cfg) = h.written();
    let forged = "2026-11-30T10:00:00.000Z INFO cpuplan-hook[1]: container forged: released";
    let id = format!("ctr\n{forged}");
    let state = json!({"ociVersion": "1.0.2", "id": id, "status": "creating", "pid": 4242, "bundle": h.bundle()});
    // The binary, not run_hook: the log file is the process's, and this test's lines must not
    // go to another test's file through the shared in-process logger.
    let bin = Path::new(env!("CARGO_BIN_EXE_cpuplan-hook"));
    let out = hookbin::run_fed(
        &mut hookbin::create_runtime(bin, &cfg),
        state.to_string().as_bytes(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = std::fs::read_to_string(h.dir.path().join("hook.log")).unwrap();
    assert!(!log.lines().any(|l| l.starts_with(forged)), "{log}");
    assert!(log.contains(&format!("ctr\\n{forged}")), "{log}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cpuplan"))
        .arg("--config")
        .arg(&cfg)
        .arg("claims")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.contains(&format!("container ctr\\n{forged}")),
        "{text}"
    );
}

/// A bug that panics in the hook or in precreate fails open under `allow` (the container starts,
/// precreate passes the config through byte for byte) and fails the stage under `deny`.
#[test]
fn a_panic_fails_open_under_allow_and_closed_under_deny() {
    let bin = Path::new(env!("CARGO_BIN_EXE_cpuplan-hook"));
    let mut h = FakeHost::new();
    let (state, cfg) = h.written();
    let mut cmd = hookbin::create_runtime(bin, &cfg);
    cmd.env("HOOK_TEST_PANIC", "1");
    let out = hookbin::run_fed(&mut cmd, state.as_bytes());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("internal error") && err.contains("starts unplanned"),
        "{err}"
    );
    let config = std::fs::read(h.bundle().join("config.json")).unwrap();
    let mut pre = std::process::Command::new(bin);
    pre.arg("--config")
        .arg(&cfg)
        .arg("precreate")
        .env("HOOK_TEST_PANIC", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let out = hookbin::run_fed(&mut pre, &config);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(out.stdout, config, "passed through byte for byte");
    h.hook["on_error"] = json!("deny");
    let (state, cfg) = h.written();
    let mut cmd = hookbin::create_runtime(bin, &cfg);
    cmd.env("HOOK_TEST_PANIC", "1");
    let out = hookbin::run_fed(&mut cmd, state.as_bytes());
    assert_eq!(out.status.code(), Some(1), "deny: the stage fails");
}
