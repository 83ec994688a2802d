//! podman's `precreate` stage on configs it cannot plan for: under `on_error: allow` it passes
//! them through byte for byte and exits 0 (a runtime never fails for it); under `deny` it
//! refuses them with one line. A config it edits keeps every member it does not touch.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

fn precreate(config: &Path, input: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cpuplan-hook"))
        .arg("--config")
        .arg(config)
        .arg("precreate")
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    // Fed from a thread: precreate may answer before it has read a large input whole.
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    out
}

fn hook_config(dir: &Path, on_error: &str) -> std::path::PathBuf {
    let p = dir.join("hook.json");
    let cfg = json!({
        "on_error": on_error,
        "log": dir.join("hook.log"),
        "topology_root": Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/e2e-host"),
    });
    std::fs::write(&p, serde_json::to_vec(&cfg).unwrap()).unwrap();
    p
}

/// A runtime config with odd spacing, key order and members cpuplan does not know.
const CONFIG: &str = r#"{"ociVersion": "1.0.2",  "zz-unknown": {"keep": [1, 2.50, "\u00e9"]},
 "process": {"args": ["sh"], "env": ["PATH=/bin", "OMP_NUM_THREADS=3"], "cwd": "/"},
 "root": {"path": "rootfs"}, "annotations": {"b": "2", "a": "1"},
 "linux": {"resources": {"cpu": {"quota": 100000, "period": 100000}}, "namespaces": [{"type": "pid"}]}}"#;

/// The config precreate (under `allow`) prints for `input`; it must succeed.
fn edited(dir: &Path, input: &str) -> String {
    let out = precreate(&hook_config(dir, "allow"), input.as_bytes());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The `process.env` entries of an edited config.
fn env_of(v: &Value) -> Vec<&str> {
    v["process"]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect()
}

#[test]
fn an_edited_config_keeps_what_cpuplan_does_not_touch() {
    let t = tempfile::tempdir().unwrap();
    let text = edited(t.path(), CONFIG);
    assert!(
        text.contains(r#""zz-unknown":{"keep": [1, 2.50, "\u00e9"]}"#),
        "an unknown member passes through as written: {text}"
    );
    let v: Value = serde_json::from_str(&text).unwrap();
    let env = env_of(&v);
    assert!(
        env.contains(&"OMP_NUM_THREADS=3"),
        "the container's own value stays"
    );
    assert!(!env.contains(&"OMP_NUM_THREADS=1"), "{env:?}");
    assert!(env.contains(&"GOMAXPROCS=1") && env.contains(&"CUDA_DEVICE_ORDER=PCI_BUS_ID"));
    let keys: Vec<&String> = v["annotations"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["a", "b", "cpuplan.plan"], "{keys:?}");
    assert_eq!(v["linux"]["namespaces"], json!([{"type": "pid"}]));
}

#[test]
fn what_allow_cannot_plan_passes_through_byte_for_byte() {
    let t = tempfile::tempdir().unwrap();
    let cfg = hook_config(t.path(), "allow");
    let mut big = String::from(r#"{"ociVersion":"1.0.2","annotations":{"x":""#);
    big.push_str(&"a".repeat(16 << 20));
    big.push_str(r#""}}"#);
    let bad_setting = CONFIG.replace(
        r#""b": "2""#,
        r#""b": "2", "cpuplan.step-thread-core": "fast""#,
    );
    for (name, input) in [
        ("over 16 MiB", big.into_bytes()),
        ("not JSON", b"{\"process\": [".to_vec()),
        ("not an object", b"[1, 2]".to_vec()),
        ("env not strings", br#"{"process": {"env": [1]}}"#.to_vec()),
    ] {
        let out = precreate(&cfg, &input);
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.stdout == input,
            "{name}: not passed through byte for byte"
        );
    }
    // A setting it cannot honour is planned for: the off plan's variables go in, the rest stays.
    let out = precreate(&cfg, bad_setting.as_bytes());
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["process"]["env"]
        .as_array()
        .unwrap()
        .contains(&json!("CPUPLAN_SETTING=off")));
}

#[test]
fn deny_refuses_what_it_cannot_plan_with_one_line() {
    let t = tempfile::tempdir().unwrap();
    let cfg = hook_config(t.path(), "deny");
    for input in [
        &b"{\"process\": ["[..],
        CONFIG
            .replace(
                r#""b": "2""#,
                r#""b": "2", "cpuplan.step-thread-core": "fast""#,
            )
            .as_bytes(),
    ] {
        let out = precreate(&cfg, input);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn every_key_cpuplan_writes_is_there_once() {
    let t = tempfile::tempdir().unwrap();
    // A forged cpuplan.plan before and after the other annotations (Go's and Python's JSON
    // parsers keep the last duplicate), and a bare GOMAXPROCS with no value.
    let forged = CONFIG
        .replace(
            r#""annotations": {"b": "2", "a": "1"}"#,
            r#""annotations": {"cpuplan.plan": "forged-1", "b": "2", "cpuplan.plan": "forged-2", "a": "1", "cpuplan.plan": "forged-3"}"#,
        )
        .replace(r#""PATH=/bin""#, r#""PATH=/bin", "GOMAXPROCS""#);
    assert_ne!(forged, CONFIG);
    let text = edited(t.path(), &forged);
    assert_eq!(text.matches("\"cpuplan.plan\"").count(), 1, "{text}");
    assert!(!text.contains("forged"), "{text}");
    // The one left is the real plan, whichever duplicate a parser keeps.
    let v: Value = serde_json::from_str(&text).unwrap();
    let plan: Value =
        serde_json::from_str(v["annotations"]["cpuplan.plan"].as_str().unwrap()).unwrap();
    assert_eq!(plan["setting"], "auto", "{plan}");
    let env = env_of(&v);
    let gomaxprocs: Vec<&&str> = env
        .iter()
        .filter(|e| e.split('=').next() == Some("GOMAXPROCS"))
        .collect();
    assert_eq!(gomaxprocs, [&"GOMAXPROCS=1"], "{env:?}");
}
