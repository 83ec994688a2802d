//! Bad input to the hook: each case gets one clear message naming the source and the value, no panic, and nothing written where it must not be.

use std::path::Path;
use std::process::{Command, Stdio};

use common::fakehost::run_hook;
use common::fakehost::{fingerprint, fixtures, list_tree, FakeHost, FakeRoot};
use common::hookbin;
use cpuplan_hook::hook::HookError;
use serde_json::json;

fn state_error(input: &[u8]) -> String {
    let fx = FakeHost::bundle_only();
    fx.write();
    match run_hook(Some("createRuntime"), input, &fx.hook_path()) {
        Err(e @ HookError::State(_)) => e.to_string(),
        other => panic!("expected a state error, got {other:?}"),
    }
}

#[test]
fn malformed_truncated_and_oversized_states() {
    let e = state_error(b"{\"id\": \"c\", \"status\": nope}");
    assert!(
        e.contains("malformed OCI state on stdin") && e.contains("nope"),
        "{e}"
    );
    let e = state_error(b"{\"ociVersion\":\"1.0.2\",\"id\":\"c\",\"sta");
    assert!(e.contains("malformed") && e.contains("EOF"), "{e}");
    let e = state_error(b"");
    assert!(e.contains("malformed"), "{e}");
    let e = state_error(b"\xff\xfe\x00junk");
    assert!(e.contains("malformed"), "{e}");
    let mut big =
        br#"{"ociVersion":"1.0.2","id":"c","status":"created","bundle":"/b","annotations":{"x":""#
            .to_vec();
    big.extend(std::iter::repeat_n(b'a', (1 << 20) + 10));
    big.extend(b"\"}}");
    let e = state_error(&big);
    assert!(e.contains("over 1048576 bytes"), "{e}");
}

#[test]
fn relative_or_missing_bundle() {
    let e =
        state_error(br#"{"ociVersion":"1.0.2","id":"c","status":"created","bundle":"rel/bundle"}"#);
    assert!(
        e.contains("\"rel/bundle\"") && e.contains("not an absolute path"),
        "{e}"
    );
    let e = state_error(br#"{"ociVersion":"1.0.2","id":"c","status":"created"}"#);
    assert!(e.contains("bundle"), "{e}");
    // An absolute bundle that does not exist: a planning problem naming its config.json.
    let mut fx = FakeHost::bundle_only();
    let gone = fx.scratch("no-such-bundle");
    let state =
        json!({"ociVersion":"1.0.2","id":"c","status":"created","bundle": gone}).to_string();
    fx.hook["on_error"] = json!("deny");
    fx.write();
    let e = run_hook(Some("createRuntime"), state.as_bytes(), &fx.hook_path())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&gone.join("config.json").display().to_string()) && e.contains("cannot read"),
        "{e}"
    );
    // Allow: nothing to write into, no panic, no report.
    fx.hook["on_error"] = json!("allow");
    fx.write();
    let r = run_hook(Some("createRuntime"), state.as_bytes(), &fx.hook_path()).unwrap();
    assert!(r.is_none());
    assert!(!gone.exists(), "nothing created for a missing bundle");
}

#[test]
fn bad_bundle_configs_name_the_file_and_value() {
    let cases: Vec<(serde_json::Value, &str)> = vec![
        (json!({"ociVersion": "1.0.2"}), "root: missing"),
        (
            json!({"ociVersion": "1.0.2", "root": {"path": "/nonexistent/h6-rootfs"}}),
            "\"/nonexistent/h6-rootfs\" is not a directory",
        ),
        (
            json!({"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "linux": {"resources": {"cpu": {"cpus": "0-3x"}}}}),
            "\"0-3x\"",
        ),
        (
            json!({"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "linux": {"resources": {"cpu": {"cpus": "3-1"}}}}),
            "\"3-1\"",
        ),
        (
            json!({"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "linux": {"resources": {"cpu": {"quota": -7}}}}),
            "linux.resources.cpu.quota: -7 is neither positive, 0 (unset) nor -1",
        ),
    ];
    for (config, needle) in cases {
        let mut fx = FakeHost::bundle_only();
        fx.spec = config.clone();
        let e = fx.deny(None);
        let file = fx.bundle().join("config.json").display().to_string();
        assert!(e.contains(&file) && e.contains(needle), "{config}: {e}");
        assert!(
            fx.plan_files("").is_empty(),
            "deny writes nothing: {config}"
        );
        // Allow: no panic; a bundle that cannot be read gets no plan, the cause is logged.
        fx.hook["on_error"] = json!("allow");
        match fx.run(None) {
            Ok(Some(r)) => assert!(r.problem.as_deref().unwrap().contains(needle), "{r:?}"),
            Ok(None) => {}
            Err(e) => panic!("allow failed: {e}"),
        }
    }
    // Malformed JSON.
    let fx = FakeHost::bundle_only();
    fx.write();
    std::fs::write(
        fx.bundle().join("config.json"),
        b"{\"ociVersion\": \"1.0.2\", \"root\": {",
    )
    .unwrap();
    let mut h = fx.hook.clone();
    h["on_error"] = json!("deny");
    std::fs::write(fx.hook_path(), h.to_string()).unwrap();
    let e = run_hook(
        Some("createRuntime"),
        fx.state(None).as_bytes(),
        &fx.hook_path(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("config.json") && e.contains("not a runtime spec"),
        "{e}"
    );
}

#[test]
fn a_relative_root_path_is_relative_to_the_bundle() {
    let mut fx = FakeHost::bundle_only();
    std::fs::create_dir_all(fx.bundle().join("images/r1")).unwrap();
    fx.spec["root"]["path"] = json!("images/r1");
    let r = fx.allow(None);
    assert_eq!(r.problem, None);
    let env = std::fs::read_to_string(fx.bundle().join("images/r1/run/cpuplan/plan.env")).unwrap();
    assert!(env.contains("CPUPLAN_SETTING='off'"), "{env}");
}

#[test]
fn a_huge_process_env_is_read_and_an_oversized_config_refused() {
    let mut fx = FakeHost::bundle_only();
    for i in 0..100_000 {
        fx.env(&format!("JUNK_{i}=x$(touch /tmp/h6-pwned)`id`"));
    }
    fx.env("NVIDIA_VISIBLE_DEVICES=0");
    let t = std::time::Instant::now();
    let r = fx.allow(None);
    assert_eq!(r.problem, None, "{r:?}");
    assert_eq!(r.plan.inputs.gpus, vec!["0000:3b:00.0".to_string()]);
    assert!(t.elapsed().as_secs() < 20, "took {:?}", t.elapsed());
    // Over the 16 MiB limit: refused before parsing, naming the file and the limit.
    let mut fx = FakeHost::bundle_only();
    fx.spec["annotations"] = json!({"pad": "p".repeat(17 << 20)});
    let e = fx.deny(None);
    assert!(
        e.contains("config.json") && e.contains("16777216-byte limit"),
        "{e}"
    );
    assert!(!Path::new("/tmp/h6-pwned").exists());
}

#[test]
fn nvidia_visible_devices_junk_is_a_note_quoting_the_value_never_a_refusal() {
    for (value, needle) in [
        ("abc", "\"abc\""),
        ("0,-1", "\"-1\""),
        ("99999999999999999999999", "\"99999999999999999999999\""),
        ("4097", "\"4097\""),
        ("1,,0", "\"1,,0\""),
        ("0;rm -rf /", "\"0;rm -rf /\""),
        ("GPU-deadbeef-0000", "\"GPU-deadbeef-0000\" matches no GPU"),
        ("GPU-", "\"GPU-\""),
        ("3", "\"3\""),
        ("0000:99:00.0", "matches no GPU"),
    ] {
        let mut fx = FakeHost::bundle_only();
        fx.env(&format!("NVIDIA_VISIBLE_DEVICES={value}"));
        // Under deny too: the tenant's env never refuses the container.
        fx.hook["on_error"] = json!("deny");
        let r = fx
            .run(None)
            .expect("deny does not refuse")
            .expect("a report");
        assert_eq!(r.problem, None, "{value}");
        let notes = r.plan.inputs.gpu_notes.join("\n");
        assert!(
            notes.contains("NVIDIA_VISIBLE_DEVICES") && notes.contains(needle),
            "{value}: {notes}"
        );
    }
    // Duplicates count once.
    let mut fx = FakeHost::bundle_only();
    fx.env("NVIDIA_VISIBLE_DEVICES=0,0,GPU-5D1B2C3E-0000-4A6F-9C1D-3B0000000000,0000:3b:00.0");
    let r = fx.allow(None);
    assert_eq!(r.problem, None);
    assert_eq!(r.plan.inputs.gpus, vec!["0000:3b:00.0".to_string()]);
}

#[test]
fn nvidia_information_without_device_minor_names_the_file() {
    let topo = tempfile::tempdir().unwrap();
    copy_tree(&fixtures().join("e2e-host"), topo.path());
    let info = topo
        .path()
        .join("proc/driver/nvidia/gpus/0000:3b:00.0/information");
    let text = std::fs::read_to_string(&info).unwrap();
    std::fs::write(
        &info,
        text.lines()
            .filter(|l| !l.starts_with("Device Minor"))
            .collect::<Vec<_>>()
            .join("\n"),
    )
    .unwrap();
    let mut fx = FakeHost::bundle_only();
    fx.hook["topology_root"] = json!(topo.path());
    fx.spec["linux"]["devices"] =
        json!([{"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0}]);
    let e = fx.deny(None);
    assert!(
        e.contains(&info.display().to_string()) && e.contains("Device Minor"),
        "{e}"
    );
    std::fs::write(
        &info,
        text.replace("Device Minor: \t 0", "Device Minor: \t zero"),
    )
    .unwrap();
    let e = fx.deny(None);
    assert!(e.contains("\"zero\""), "{e}");
}

fn copy_tree(from: &Path, to: &Path) {
    for (rel, _) in list_tree(from) {
        let src = from.join(&rel);
        let dst = to.join(&rel);
        if src.is_dir() {
            std::fs::create_dir_all(&dst).unwrap();
        } else {
            std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

#[test]
fn hostile_setting_values_stay_inert_in_plan_env() {
    let marker = tempfile::tempdir().unwrap();
    let m = marker.path().join("pwned");
    let nasty = format!(
        "x'\n$(touch {m})\n`touch {m}`\"; touch {m}; '\\'' $((1+1)) ${{HOME}}",
        m = m.display()
    );
    let mut fx = FakeHost::bundle_only();
    fx.spec["annotations"] = json!({"cpuplan.step-thread-core": nasty, "other": nasty});
    fx.env(&format!("CPUPLAN_STEP_THREAD_CORE={nasty}"));
    let r = fx.allow(None);
    assert_eq!(r.cause, Some("setting"), "{r:?}");
    assert!(r.problem.unwrap().contains("cpuplan.step-thread-core"));
    let env = fx.rootfs().join("run/cpuplan/plan.env");
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#"set -eu; . "$1"; printf '%s' "$CPUPLAN_WHY""#)
        .arg("sh")
        .arg(&env)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let why = String::from_utf8_lossy(&out.stdout);
    assert!(why.contains("touch") && why.contains("$((1+1))"), "{why}");
    assert!(!m.exists(), "sourcing plan.env ran a command");
    // Every line of plan.env is one KEY='…' assignment.
    let text = std::fs::read_to_string(&env).unwrap();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (k, v) = line.split_once('=').unwrap();
        assert!(
            k.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'),
            "{line}"
        );
        assert!(v.starts_with('\'') && v.ends_with('\''), "{line}");
    }
    // plan.json is valid JSON carrying the value.
    let j: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fx.rootfs().join("run/cpuplan/plan.json")).unwrap())
            .unwrap();
    assert!(j["why"].as_str().unwrap().contains("touch"));
}

#[test]
fn a_pid_that_exited_writes_nothing_anywhere() {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    let mut fx = FakeHost::bundle_only();
    let e = fx.deny(Some(pid));
    assert!(e.contains(&format!("/proc/{pid}")), "{e}");
    let r = fx.allow(Some(pid));
    assert!(r.problem.is_some());
    assert!(fx.plan_files("").is_empty(), "{:?}", fx.plan_files(""));
}

/// A cpuset cgroup made by the test, removed on drop (after its tasks are killed).
struct TestCgroup {
    dir: std::path::PathBuf,
    child: Option<std::process::Child>,
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[test]
fn a_host_pid_reused_in_our_namespace_gets_no_cpuset_and_no_plan() {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "this test runs as root (CI does)"
    );
    // A host process in a cpuset cgroup of its own, like a reused container pid would be.
    let name = format!("cpuplan-h6-hostpid-{}", std::process::id());
    let dir = Path::new("/sys/fs/cgroup/cpuset").join(&name);
    assert!(
        Path::new("/sys/fs/cgroup/cpuset/cpuset.cpus").exists(),
        "needs the cgroup v1 cpuset hierarchy at /sys/fs/cgroup/cpuset"
    );
    std::fs::create_dir(&dir).unwrap();
    let mut g = TestCgroup {
        dir: dir.clone(),
        child: None,
    };
    let all = std::fs::read_to_string("/sys/fs/cgroup/cpuset/cpuset.cpus").unwrap();
    std::fs::write(dir.join("cpuset.cpus"), all.trim()).unwrap();
    let mems = std::fs::read_to_string("/sys/fs/cgroup/cpuset/cpuset.mems").unwrap();
    std::fs::write(dir.join("cpuset.mems"), mems.trim()).unwrap();
    let child = Command::new("sleep")
        .arg("30")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    g.child = Some(child);
    std::fs::write(dir.join("cgroup.procs"), pid.to_string()).unwrap();
    let before = fingerprint(&dir.join("cpuset.cpus"));
    let cpus_before = std::fs::read_to_string(dir.join("cpuset.cpus")).unwrap();
    // The container asks for the fake host's GPU, whose local CPU 1 would narrow the cpuset.
    let mut fx = FakeHost::bundle_only();
    fx.env("NVIDIA_VISIBLE_DEVICES=0");
    fx.spec["linux"]["resources"] = json!({"cpu": {"quota": 100000, "period": 100000}});
    let e = fx.deny(Some(pid));
    assert!(
        e.contains("mount namespace") && e.contains(&pid.to_string()),
        "{e}"
    );
    let _ = fx.allow(Some(pid));
    assert_eq!(
        std::fs::read_to_string(dir.join("cpuset.cpus")).unwrap(),
        cpus_before,
        "the host process's cpuset was rewritten"
    );
    assert_eq!(fingerprint(&dir.join("cpuset.cpus")), before);
    assert!(fx.plan_files("").is_empty(), "{:?}", fx.plan_files(""));
}

#[test]
fn a_pid_of_another_container_is_refused() {
    // The pid's cgroup is /other-ctr; the bundle says its container is /mine.
    let t = tempfile::tempdir().unwrap();
    let other_root = t.path().join("other-rootfs");
    std::fs::create_dir_all(&other_root).unwrap();
    let fake = FakeRoot::new(&t.path().join("host"), 4242, "/other-ctr", &other_root);
    let mut fx = FakeHost::bundle_only();
    fx.hook["root"] = json!(fake.root);
    fx.spec["linux"]["cgroupsPath"] = json!("/mine");
    fx.env("NVIDIA_VISIBLE_DEVICES=0");
    fx.spec["linux"]["resources"] = json!({"cpu": {"quota": 100000, "period": 100000}});
    let cpuset = fake.cg_file("cpuset", "cpuset.cpus");
    let before = fingerprint(&cpuset);
    // Our rootfs is not in its mount namespace: refused before any write.
    let e = fx.deny(Some(4242));
    assert!(
        e.contains("cannot open the rootfs in the container's mount namespace"),
        "{e}"
    );
    let _ = fx.allow(Some(4242));
    assert_eq!(fingerprint(&cpuset), before);
    assert!(
        list_tree(&other_root).is_empty(),
        "written into the other container"
    );
    assert!(fx.plan_files("").is_empty());
    // Where the path exists there too, the cgroup check refuses the pid before any write.
    std::fs::create_dir_all(other_root.join(fx.rootfs().strip_prefix("/").unwrap())).unwrap();
    let e = fx.deny(Some(4242));
    assert!(
        e.contains("pid 4242 is not the container's init")
            && e.contains("other-ctr")
            && e.contains("\"/mine\"")
            && e.contains("writing nothing"),
        "{e}"
    );
    assert_eq!(fingerprint(&cpuset), before);
    assert!(fx.plan_files("").is_empty());
}

#[test]
fn cgroup_files_missing_empty_or_junk() {
    let t = tempfile::tempdir().unwrap();
    let croot = t.path().join("croot");
    let fake = FakeRoot::new(&t.path().join("host"), 4243, "/ctr", &croot);
    let quota = fake.cg_file("cpu,cpuacct", "cpu.cfs_quota_us");
    let mut fx = FakeHost::bundle_only();
    fx.hook["root"] = json!(fake.root);
    // Where the container's rootfs shows through the fake /proc/<pid>/root.
    let inside = croot.join(fx.rootfs().strip_prefix("/").unwrap());
    std::fs::create_dir_all(&inside).unwrap();
    // Missing quota file: no limit at that level, the plan goes through.
    std::fs::remove_file(&quota).unwrap();
    let r = fx.allow(Some(4243));
    assert_eq!(r.problem, None, "{r:?}");
    assert_eq!(r.plan.inputs.cgroup_quota, None);
    assert!(inside.join("run/cpuplan/plan.env").is_file());
    for (text, needle) in [
        ("", "empty"),
        ("lots\n", "\"lots\\n\""),
        ("12 34\n", "more than one field"),
        ("-5\n", "neither -1 nor a positive integer"),
    ] {
        std::fs::write(&quota, text).unwrap();
        let e = fx.deny(Some(4243));
        assert!(
            e.contains(&quota.display().to_string()) && e.contains(needle),
            "{text:?}: {e}"
        );
    }
    std::fs::write(&quota, "50000\n").unwrap();
    std::fs::write(fake.cg_file("cpu,cpuacct", "cpu.cfs_period_us"), "0\n").unwrap();
    let e = fx.deny(Some(4243));
    assert!(
        e.contains("cpu.cfs_period_us") && e.contains("positive"),
        "{e}"
    );
    // Junk in /proc/<pid>/cgroup and in the status mask.
    std::fs::write(fake.root.join("proc/4243/cgroup"), "garbage line\n").unwrap();
    let e = fx.deny(Some(4243));
    assert!(
        e.contains("proc/4243/cgroup") && e.contains("garbage line"),
        "{e}"
    );
    std::fs::remove_file(fake.root.join("proc/4243/cgroup")).unwrap();
    let e = fx.deny(Some(4243));
    assert!(
        e.contains("proc/4243/cgroup") && e.contains("cannot read"),
        "{e}"
    );
}

#[test]
fn the_binary_prints_one_line_and_exits_1_on_a_bad_state() {
    let fx = FakeHost::bundle_only();
    fx.write();
    let out = hookbin::run_fed(
        &mut hookbin::create_runtime(
            Path::new(env!("CARGO_BIN_EXE_cpuplan-hook")),
            &fx.hook_path(),
        ),
        b"{\"id\": \"x\", truncated",
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<_> = err
        .lines()
        .filter(|l| l.starts_with("cpuplan-hook:"))
        .collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("malformed OCI state on stdin"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
