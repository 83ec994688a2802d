//! A hook config that cannot be used, in the forms an operator makes it: a trailing comma, a
//! bad value, a claims directory below `/tmp`. The diagnostic commands still run after one
//! warning line; the hook logs where the file's `log` says, once per container; a claim planted
//! below a directory others may write is never read.

use std::path::Path;
use std::process::{Command, Output};

use common::fakehost::{FakeHost, PID};
use common::hookbin;
use common::statics::{bin, workspace_root};
use serde_json::json;

fn cpuplan(config: &Path, args: &[&str]) -> Output {
    Command::new(bin("cpuplan"))
        .arg("--config")
        .arg(config)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn status_explain_and_claims_run_on_a_broken_config_after_one_warning_line() {
    let h = FakeHost::bundle_only();
    h.write();
    let host = workspace_root().join("examples/host");
    let example = workspace_root().join("examples/bundle");
    let (host, example) = (host.to_str().unwrap(), example.to_str().unwrap());
    let bundle = h.bundle();
    let bundle = bundle.to_str().unwrap();
    let cfg = h.scratch("broken.json");
    for (text, error) in [
        (
            "{\n  \"step_thread_core\": \"auto\",\n}\n",
            "trailing comma at line 3 column 1",
        ),
        (
            r#"{"cpuset": "all"}"#,
            r#"key "cpuset": "all" is not "numa" or "keep""#,
        ),
        (
            r#"{"claims_dir": "/tmp/cpuplan/claims"}"#,
            r#"key "claims_dir": "/tmp/cpuplan/claims" is refused: /tmp (owner uid 0, mode 1777)"#,
        ),
    ] {
        std::fs::write(&cfg, text).unwrap();
        let warning = format!("cpuplan: warning: hook config {}: {error}", cfg.display());
        for args in [
            &["status", "--root", host][..],
            &["status", "--json", "--root", host],
            &[
                "explain",
                "--bundle",
                example,
                "--root",
                host,
                "--no-inventory",
            ],
            &["explain", "--bundle", bundle, "--no-inventory"],
            &["claims"],
            &["claims", "--json"],
        ] {
            let out = cpuplan(&cfg, args);
            let (stdout, err) = (
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
            );
            let said: Vec<&str> = err.lines().filter(|l| l.contains("warning")).collect();
            assert_eq!(said.len(), 1, "{args:?}: {err}");
            assert!(said[0].starts_with(&warning), "{args:?}: {err}");
            assert!(out.status.success(), "{args:?}: {stdout}{err}");
            assert!(!stdout.is_empty(), "{args:?}");
        }
    }
    // A config named with --config that does not exist is the command's error still.
    let out = cpuplan(&h.scratch("none.json"), &["claims"]);
    assert_eq!(out.status.code(), Some(2));
}

/// Runs the hook binary's `stage` on `h`'s container (pid [`PID`]) with its config file as it is.
fn hook(h: &FakeHost, stage: &str, status: &str) -> Output {
    let state = json!({"ociVersion": "1.0.2", "id": h.id, "status": status,
        "bundle": h.bundle(), "pid": PID});
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cpuplan-hook"));
    cmd.arg("--config")
        .arg(h.hook_path())
        .args(["hook", stage])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    hookbin::run_fed(&mut cmd, state.to_string().as_bytes())
}

#[test]
fn a_config_with_a_trailing_comma_logs_where_its_log_says_once_per_container() {
    let h = FakeHost::new();
    h.write();
    let log = h.scratch("operator.log");
    // The kept keys before the fault: where to log, the planted host's root, and the test's
    // own claims and inventory directories (never the host's).
    let mut text = format!("{{\n  \"log\": \"{}\",\n", log.display());
    for key in ["root", "topology_root", "claims_dir", "inventory_dir"] {
        text.push_str(&format!("  \"{key}\": {},\n", h.hook[key]));
    }
    text.push_str("}\n");
    std::fs::write(h.hook_path(), text).unwrap();
    let out = hook(&h, "createRuntime", "created");
    assert!(out.status.success(), "{out:?}");
    let plan = h.plan_file("plan.env").unwrap();
    assert!(
        plan.contains("trailing comma"),
        "the off plan says why: {plan}"
    );
    // The container is gone: its poststop releases and collects with the kept keys.
    std::fs::remove_dir_all(h.file(&format!("proc/{PID}"))).unwrap();
    let out = hook(&h, "poststop", "stopped");
    assert!(out.status.success(), "{out:?}");
    let written = std::fs::read_to_string(&log).unwrap();
    let warned: Vec<&str> = written
        .lines()
        .filter(|l| l.contains(" WARN ") && l.contains("trailing comma"))
        .collect();
    assert_eq!(warned.len(), 1, "{written}");
    assert!(
        warned[0].contains(&format!(
            "container {}: planning problem: hook config {}: trailing comma",
            h.id,
            h.hook_path().display()
        )),
        "{written}"
    );
    assert!(
        written.contains(&format!("container {}: stopped, released", h.id)),
        "poststop ran with the kept keys: {written}"
    );
    assert_eq!(
        h.plan_file("plan.env"),
        None,
        "poststop removed the plan files"
    );
}

#[test]
fn a_claim_planted_in_a_claims_dir_below_tmp_is_never_read_and_nothing_is_claimed() {
    // The operator's slip: claims_dir below /tmp. A local user's claim of the container's GPU,
    // naming a live process (this test's), is there first.
    let planted = tempfile::tempdir().unwrap();
    let claims = planted.path().join("claims");
    common::operator_dir::claim_as_this_process(&claims, "squatter", "/b/x", &["0000:3b:00.0"]);
    let listed = || cpuplan::list_claims(&claims, Path::new("/")).unwrap();
    let before = listed();
    let mut h = FakeHost::new();
    h.gpu(0);
    h.hook["claims_dir"] = json!(claims);
    // deny: the container is refused, in one line naming the key.
    let e = h.deny(Some(PID));
    assert!(
        e.contains(r#"key "claims_dir""#) && !e.contains('\n'),
        "{e}"
    );
    assert_eq!(listed(), before);
    // allow: the container starts, its plan says why it is off, and nothing is claimed.
    h.hook["on_error"] = json!("allow");
    h.write();
    let out = hook(&h, "createRuntime", "created");
    assert!(out.status.success(), "{out:?}");
    let plan = h.plan_file("plan.env").unwrap();
    assert!(
        plan.contains(&format!(
            "key \"claims_dir\": \"{}\" is refused: /tmp (owner uid 0, mode 1777)",
            claims.display()
        )),
        "{plan}"
    );
    assert_eq!(listed(), before, "the planted claim is as it was");
    // Its poststop takes the record the refused config's default directory got (the plan
    // files are in a host directory), as for any config that fails to load.
    std::fs::remove_dir_all(h.file(&format!("proc/{PID}"))).unwrap();
    assert!(hook(&h, "poststop", "stopped").status.success());
    assert_eq!(h.plan_file("plan.env"), None);
    assert_eq!(listed(), before);
}
