//! End to end with real containerd (1.7, runc shim v2) outside CRI: the base spec that
//! `install --containerd` derives from `ctr oci spec` runs its createRuntime and poststop hooks
//! through `ctr run --config`. The CRI path kubelet uses is tested in `tests/cri/cri_node.rs`.

use std::path::{Path, PathBuf};

use common::containerd::{runnable, Containerd};
use common::podman::{claims_json, explain_json, pid_free};
use common::runc::{fixtures, hook_bin, line_value};
use cpuplan_hook::install::{containerd, Layout};
use serde_json::{json, Value};

/// The setting the tests' hook config uses.
const SETTING: &str = "auto";

const PROBE: &str = r#"echo "cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)"
echo '--- planenv'; cat /run/cpuplan/plan.env; echo '--- planjson'; cat /run/cpuplan/plan.json"#;

fn section<'a>(out: &'a str, name: &str) -> &'a str {
    let Some(i) = out.find(&format!("--- {name}\n")) else {
        panic!("no section {name} in:\n{out}");
    };
    let rest = &out[i + name.len() + 5..];
    &rest[..rest.find("\n--- ").map(|i| i + 1).unwrap_or(rest.len())]
}

/// The base spec `install --containerd` writes, its hooks running this build with `config`.
fn base_spec(config: &Path) -> Value {
    let layout = Layout {
        prefix: PathBuf::from("/unused"),
        hooks_dir: PathBuf::from("/unused"),
        config: config.to_path_buf(),
    };
    let (default, _) = containerd::ctr_default_spec(Path::new("/")).expect("ctr oci spec");
    let mut spec = containerd::base_spec(&layout, default);
    for stage in ["createRuntime", "poststop"] {
        spec["hooks"][stage][0]["path"] = json!(hook_bin());
    }
    spec
}

#[test]
fn the_base_spec_hooks_plan_the_container_and_poststop_runs() {
    let c = Containerd::start();
    let id = format!("cpuplan-ctr-{}", std::process::id());
    let cfg = c.dir.path().join("hook.json");
    let op = common::operator_dir::tempdir();
    std::fs::write(
        &cfg,
        serde_json::to_vec_pretty(&json!({
            "step_thread_core": SETTING,
            "topology_root": fixtures().join("e2e-host"),
            "claims_dir": op.path().join("claims"),
            "log": c.dir.path().join("hook.log"),
        }))
        .unwrap(),
    )
    .unwrap();
    let rootfs = c.rootfs(&id);
    let mut spec = runnable(base_spec(&cfg), &id, &rootfs, PROBE);
    // CRI fills process.env from the image and the pod; here the test does.
    spec["process"]["env"] = json!(["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0"]);
    // The GPU's device node, as NVIDIA's toolkit adds it (the env alone is never claimed).
    spec["linux"]["devices"] = json!([{"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0,
        "fileMode": 0o666, "uid": 0, "gid": 0}]);
    spec["linux"]["resources"]["cpu"] = json!({"quota": 100000, "period": 100000});
    let run = c.run_config(&id, &spec);
    assert_eq!(run.rc, 0, "ctr run: {}\n{}\n{}", run.err, run.out, c.log());
    let out = &run.out;
    assert!(out.contains("cpus=1\n"), "numa rule: {out}");
    let env = section(out, "planenv");
    assert_eq!(line_value(env, "CPUPLAN_MASK"), Some("'1'"), "{env}");
    assert_eq!(line_value(env, "CPUPLAN_USABLE"), Some("'1'"), "{env}");
    assert_eq!(line_value(env, "CPUPLAN_DEVICES"), Some("'0000:3b:00.0'"));
    assert_eq!(line_value(env, "GOMAXPROCS"), Some("'1'"));
    let plan: Value = serde_json::from_str(section(out, "planjson")).expect("plan.json");
    assert_eq!(plan["container"], id.as_str());
    assert_eq!(plan["inputs"]["quota"], 1.0);
    let explained = explain_json(&cfg, &c.bundle(&id));
    assert_eq!(pid_free(&plan), pid_free(&explained), "hook vs explain");
    // ctr run --rm deleted the task: the poststop hook ran for this container.
    let log = std::fs::read_to_string(c.dir.path().join("hook.log")).unwrap();
    assert!(log.contains(&format!("container {id}: pid")), "{log}");
    assert!(
        log.contains(&format!("container {id}: stopped, released 1 GPU claim")),
        "poststop released the claim createRuntime took: {log}"
    );
    assert_eq!(claims_json(&cfg), json!([]), "claims left after poststop");
}
