//! End to end with real containerd (Debian's 1.6, runc shim v2): the shipped base spec's
//! createRuntime and poststop hooks through `ctr run --config`, and the shipped config.toml
//! lines loading that base spec into the CRI plugin.

mod common;

use std::path::{Path, PathBuf};

use common::containerd::{runnable, Containerd};
use common::podman::{claims_json, explain_json, pid_free};
use common::runc::{fixtures, hook_bin, line_value};
use serde_json::{json, Value};

/// The setting the tests' hook config uses.
const SETTING: &str = "auto";

const PROBE: &str = r#"echo "cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)"
echo '--- planenv'; cat /run/cpuplan/plan.env; echo '--- planjson'; cat /run/cpuplan/plan.json"#;

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn section<'a>(out: &'a str, name: &str) -> &'a str {
    let Some(i) = out.find(&format!("--- {name}\n")) else {
        panic!("no section {name} in:\n{out}");
    };
    let rest = &out[i + name.len() + 5..];
    &rest[..rest.find("\n--- ").map(|i| i + 1).unwrap_or(rest.len())]
}

/// The shipped base spec with the hooks pointed at this build and `config` (the two paths
/// `install --prefix` and `--config` change); everything else as shipped.
fn base_spec(config: &Path) -> Value {
    let text = std::fs::read_to_string(repo("hooks/containerd/cpuplan-base-spec.json")).unwrap();
    let spec: Value = serde_json::from_str(&text).expect("the base spec is JSON");
    assert_eq!(
        spec["hooks"]["createRuntime"][0]["args"],
        json!([
            "cpuplan-hook",
            "--config",
            "/etc/cpuplan/hook.json",
            "hook",
            "createRuntime"
        ])
    );
    let text = text
        .replace(
            "/usr/local/libexec/cpuplan/cpuplan-hook",
            &hook_bin().display().to_string(),
        )
        .replace("/etc/cpuplan/hook.json", &config.display().to_string());
    serde_json::from_str(&text).unwrap()
}

#[test]
fn the_base_spec_hooks_plan_the_container_and_poststop_runs() {
    let c = Containerd::start();
    let id = format!("cpuplan-ctr-{}", std::process::id());
    let cfg = c.dir.path().join("hook.json");
    std::fs::write(
        &cfg,
        serde_json::to_vec_pretty(&json!({
            "step_thread_core": SETTING,
            "topology_root": fixtures().join("e2e-host"),
            "claims_dir": c.dir.path().join("claims"),
            "log": c.dir.path().join("hook.log"),
        }))
        .unwrap(),
    )
    .unwrap();
    let rootfs = c.rootfs(&id);
    let mut spec = runnable(base_spec(&cfg), &id, &rootfs, PROBE);
    // CRI fills process.env from the image and the pod; here the test does.
    spec["process"]["env"] = json!(["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0"]);
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

/// The shipped containerd 1.7 lines, with the base spec's path pointed at the repo's file.
fn cri_tables(base_spec: &Path) -> String {
    let text = std::fs::read_to_string(repo("hooks/containerd/config-1.7.toml")).unwrap();
    assert!(
        text.contains("base_runtime_spec = \"/etc/containerd/cpuplan-base-spec.json\""),
        "{text}"
    );
    text.lines()
        .filter(|l| !l.starts_with("version") && !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
        .replace(
            "/etc/containerd/cpuplan-base-spec.json",
            &base_spec.display().to_string(),
        )
}

fn cri_status(c: &Containerd) -> String {
    let plugins = c.ctr(&["plugins", "ls"]);
    assert_eq!(plugins.rc, 0, "{}", plugins.err);
    plugins
        .out
        .lines()
        .find(|l| {
            let mut f = l.split_whitespace();
            f.next() == Some("io.containerd.grpc.v1") && f.next() == Some("cri")
        })
        .unwrap_or_else(|| panic!("no CRI plugin in:\n{}", plugins.out))
        .to_string()
}

#[test]
fn the_config_lines_load_the_base_spec_into_the_cri_plugin() {
    // containerd 1.6 has 1.7's CRI plugin id and config version 2.
    let ok = Containerd::start_with(
        "",
        &cri_tables(&repo("hooks/containerd/cpuplan-base-spec.json")),
    );
    let status = cri_status(&ok);
    assert!(status.trim_end().ends_with("ok"), "{status}\n{}", ok.log());
    drop(ok);
    // The control: a base spec that is not there fails the CRI plugin, so the check above
    // shows the file was read.
    let missing = Containerd::start_with("", &cri_tables(Path::new("/nonexistent/spec.json")));
    let status = cri_status(&missing);
    assert!(status.trim_end().ends_with("error"), "{status}");
}
