//! End to end with real runc: the hook registered at createRuntime and poststop, checked from inside the container.

use common::runc::{fixtures, line_value, Bundle};
use serde_json::{json, Value};

const PROBE: &str = r#"echo "cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)"
grep ' /run ' /proc/mounts | sed 's/^/mount=/'
echo '--- env'; cat /run/cpuplan/plan.env
echo '--- json'; cat /run/cpuplan/plan.json
echo '--- sourced'; . /run/cpuplan/plan.env; echo "omp=$OMP_NUM_THREADS gomaxprocs=$GOMAXPROCS"
stat -c 'mode=%a %n' /run/cpuplan /run/cpuplan/plan.env /run/cpuplan/plan.json"#;

fn gpu_bundle(tag: &str, cmd: &str, extra_config: Value) -> (Bundle, std::path::PathBuf) {
    let mut b = Bundle::new(tag, cmd);
    let mut cfg = json!({
        "topology_root": fixtures().join("e2e-host"),
        "claims_dir": b.scratch("claims"),
        "log": b.scratch("hook.log"),
    });
    for (k, v) in extra_config.as_object().unwrap() {
        cfg[k] = v.clone();
    }
    let cfg_path = b.hook_config(cfg);
    b.hook_with_config(&cfg_path);
    b.gpu(0);
    b.config["linux"]["resources"]["cpu"] = json!({"quota": 100000, "period": 100000});
    let log = b.scratch("hook.log");
    (b, log)
}

fn section<'a>(out: &'a str, name: &str) -> &'a str {
    let start = out
        .find(&format!("--- {name}\n"))
        .map(|i| i + name.len() + 5)
        .unwrap_or(0);
    let rest = &out[start..];
    &rest[..rest.find("\n--- ").map(|i| i + 1).unwrap_or(rest.len())]
}

#[test]
fn the_container_sees_its_plan_and_cpuset_before_it_starts() {
    let (b, log) = gpu_bundle("plan", PROBE, json!({}));
    let (rc, out, err) = b.run();
    assert_eq!(rc, 0, "runc failed: {err}\n{out}");
    // The cpuset the hook chose: the GPU's local CPU 1 holds the 1 usable CPU.
    assert!(out.contains("cpus=1\n"), "{out}");
    assert!(
        out.contains("mount=tmpfs /run tmpfs"),
        "plan files must sit on the runtime's /run tmpfs: {out}"
    );
    let env = section(&out, "env");
    assert_eq!(line_value(env, "CPUPLAN_MASK"), Some("'1'"), "{env}");
    assert_eq!(line_value(env, "CPUPLAN_USABLE"), Some("'1'"));
    assert_eq!(line_value(env, "CPUPLAN_LEFT"), Some("'1'"));
    assert_eq!(line_value(env, "CPUPLAN_DEVICES"), Some("'0000:3b:00.0'"));
    assert_eq!(line_value(env, "CPUPLAN_SETTING"), Some("'auto'"));
    assert_eq!(line_value(env, "OMP_NUM_THREADS"), Some("'1'"));
    assert_eq!(line_value(env, "GOMAXPROCS"), Some("'1'"));
    assert!(
        line_value(env, "CPUPLAN_WHY").unwrap().contains("cpuset 1"),
        "{env}"
    );
    let json: Value = serde_json::from_str(section(&out, "json")).expect("plan.json parses");
    assert_eq!(json["container"], b.id.as_str());
    assert_eq!(json["mask"], "1");
    assert_eq!(json["inputs"]["cpuset"], "1");
    assert_eq!(json["inputs"]["quota"], 1.0);
    assert_eq!(json["inputs"]["gpus"], json!(["0000:3b:00.0"]));
    assert!(out.contains("omp=1 gomaxprocs=1"), "{out}");
    assert!(out.contains("mode=755 /run/cpuplan"), "{out}");
    assert!(out.contains("mode=644 /run/cpuplan/plan.env"), "{out}");
    // poststop released the claim the createRuntime hook took.
    let log = std::fs::read_to_string(log).unwrap();
    assert!(log.contains(&format!("container {}: pid", b.id)), "{log}");
    assert!(log.contains("released 1 GPU claim"), "{log}");
    let left: Vec<_> = std::fs::read_dir(b.scratch("claims"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .collect();
    assert!(left.is_empty(), "claims left after poststop: {left:?}");
}

#[test]
fn an_unwritable_plan_dir_still_starts_the_container_with_the_cause_logged() {
    let (mut b, log) = gpu_bundle("rofs", "echo started; ls /run/cpuplan", json!({}));
    // A read-only bind mount on the plan dir (runc remounts a bind read-only as it mounts it,
    // before the createRuntime hooks run; a read-only tmpfs would only turn so after them).
    let ro = b.scratch("ro-plan-dir");
    std::fs::create_dir_all(&ro).unwrap();
    b.config["mounts"]
        .as_array_mut()
        .unwrap()
        .push(json!({"destination": "/run/cpuplan", "type": "bind", "source": ro, "options": ["rbind", "ro"]}));
    let (rc, out, err) = b.run();
    assert_eq!(rc, 0, "the container must start: {err}");
    assert!(out.contains("started"), "{out}");
    let log = std::fs::read_to_string(log).unwrap();
    assert!(
        log.contains("planning problem") && log.contains("/run/cpuplan"),
        "{log}"
    );
    assert!(
        log.contains("Read-only file system") || log.contains("EROFS"),
        "{log}"
    );
}

#[test]
fn deny_refuses_the_container_naming_the_cause() {
    let (mut b, _log) = gpu_bundle("deny", "echo should-not-run", json!({"on_error": "deny"}));
    b.config["annotations"] = json!({"cpuplan.step-thread-core": "fast"});
    let (rc, out, err) = b.run();
    assert_ne!(rc, 0, "deny must refuse the container: {out}");
    assert!(!out.contains("should-not-run"));
    assert!(
        err.contains("fast") && err.contains("cpuplan.step-thread-core"),
        "{err}"
    );
}

#[test]
fn a_bad_setting_under_allow_starts_with_the_off_plan_and_the_cause() {
    let (mut b, _log) = gpu_bundle("allow", "cat /run/cpuplan/plan.env", json!({}));
    b.config["annotations"] = json!({"cpuplan.step-thread-core": "fast"});
    let (rc, out, err) = b.run();
    assert_eq!(rc, 0, "{err}");
    assert_eq!(line_value(&out, "CPUPLAN_SETTING"), Some("'off'"), "{out}");
    assert!(
        line_value(&out, "CPUPLAN_WHY")
            .unwrap()
            .contains("\"fast\""),
        "{out}"
    );
}

#[test]
fn a_hook_config_with_a_typo_gives_the_container_the_off_plan_carrying_the_cause() {
    // "step_thread_cor": a typo, which makes the whole config fail to load.
    let (b, log) = gpu_bundle(
        "typo",
        "cat /run/cpuplan/plan.env",
        json!({"step_thread_cor": "auto"}),
    );
    let (rc, out, err) = b.run();
    assert_eq!(rc, 0, "on_error allow: the container starts: {err}");
    assert_eq!(line_value(&out, "CPUPLAN_SETTING"), Some("'off'"), "{out}");
    let why = line_value(&out, "CPUPLAN_WHY").unwrap_or_default();
    assert!(
        why.contains("unknown field `step_thread_cor`") && why.contains("hook.json"),
        "the plan says why: {out}"
    );
    // The config's own valid log still holds: the host log says it too.
    let log = std::fs::read_to_string(log).unwrap();
    assert!(log.contains("step_thread_cor"), "{log}");

    // The same typo beside on_error deny: the container is refused, naming it.
    let (b, _) = gpu_bundle(
        "typo-deny",
        "echo should-not-run",
        json!({"step_thread_cor": "auto", "on_error": "deny"}),
    );
    let (rc, out, err) = b.run();
    assert_ne!(rc, 0, "deny refuses the container: {out}");
    assert!(!out.contains("should-not-run"), "{out}");
    assert!(err.contains("step_thread_cor"), "{err}");
}

/// `status --json` with the config `cfg`, as the operator runs it on the node.
fn status(cfg: &std::path::Path) -> (Value, String) {
    use common::hookbin::{cpuplan_json, cpuplan_ok};
    (
        cpuplan_json(cfg, &["status", "--json"]),
        cpuplan_ok(cfg, &["status"]),
    )
}

#[test]
fn status_shows_each_running_container_s_cores_and_gpu_claim_until_poststop() {
    let wait = "touch /tmp/ready; while [ ! -e /tmp/stop ]; do sleep 0.1; done";
    let (a, _) = gpu_bundle("status-a", wait, json!({}));
    // A second container without a GPU, its /run the rootfs's own filesystem (no tmpfs): the
    // hook keeps a plan record for it beside the claims.
    let mut b = Bundle::new("status-b", wait);
    b.config["mounts"]
        .as_array_mut()
        .unwrap()
        .retain(|m| m["destination"] != "/run");
    let cfg = a.dir.path().join("hook.json");
    b.hook_with_config(&cfg);
    let ta = a.run_until(&a.rootfs().join("tmp/ready"));
    let tb = b.run_until(&b.rootfs().join("tmp/ready"));
    let (v, text) = status(&cfg);
    let containers = v["containers"].as_array().unwrap();
    let find = |id: &str| {
        containers
            .iter()
            .find(|c| c["container"] == id)
            .unwrap_or_else(|| panic!("{id} not in {v}"))
    };
    let (ca, cb) = (find(&a.id), find(&b.id));
    assert_eq!(containers.len(), 2, "{v}");
    assert_eq!(ca["route"], "hook");
    assert!(ca["pid"].as_u64().unwrap() > 0, "{ca}");
    assert_eq!(ca["cpuset"], "1", "the GPU's local CPU: {ca}");
    assert_eq!(ca["gpus"], json!(["0000:3b:00.0"]));
    assert_eq!(ca["workers"][0]["device"], "0000:3b:00.0");
    assert_eq!(ca["plan"], "current");
    assert_eq!(cb["gpus"], json!([]));
    assert_eq!(cb["plan"], "current");
    let gpu = &v["gpus"][0];
    assert_eq!(gpu["address"], "0000:3b:00.0");
    assert_eq!(gpu["claim"]["container"], a.id.as_str());
    assert_eq!(gpu["claim"]["live"], true);
    let mark = ca["mark"].as_str().unwrap();
    assert!(
        text.contains(&format!(
            "gpu 0000:3b:00.0 (node 0): claimed by container {} [{mark}]",
            a.id
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("container {} [{mark}] (hook, pid ", a.id)),
        "{text}"
    );
    // Both stop; their poststop releases the claim and the record.
    for (bundle, t) in [(&a, ta), (&b, tb)] {
        std::fs::write(bundle.rootfs().join("tmp/stop"), "").unwrap();
        let (rc, out, err) = t.join().unwrap();
        assert_eq!(rc, 0, "{}: {err}\n{out}", bundle.id);
    }
    let (v, text) = status(&cfg);
    assert_eq!(v["containers"], json!([]), "{v}");
    assert!(v["gpus"][0]["claim"].is_null(), "{v}");
    assert!(text.contains("gpu 0000:3b:00.0 (node 0): free"), "{text}");
}
