//! A hook config that cannot be used, in the forms an operator makes it: a trailing comma, a
//! bad value, a claims directory below `/tmp`. The diagnostic commands still run after one
//! warning line; the hook logs where the file's `log` says, once per container; a claim planted
//! below a directory others may write is never read.

use std::path::Path;
use std::process::{Command, Output};

use common::fakehost::{FakeHost, PID};
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
            &["explain", "--bundle", example, "--root", host, "--no-inventory"],
            &["explain", "--bundle", bundle, "--no-inventory"],
            &["explain", "--pid", &PID.to_string(), "--root", &h.root().display().to_string()],
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
            if args[0] == "explain" && args[1] == "--pid" {
                // Its own job fails here (no such container on this host): its own error.
                assert_eq!(out.status.code(), Some(1), "{args:?}: {stdout}{err}");
                continue;
            }
            assert!(out.status.success(), "{args:?}: {stdout}{err}");
            assert!(!stdout.is_empty(), "{args:?}");
        }
    }
    // A config named with --config that does not exist is the command's error still.
    let out = cpuplan(&h.scratch("none.json"), &["claims"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_config_with_a_trailing_comma_logs_where_its_log_says_once_per_container() {
    let h = FakeHost::new();
    h.write();
    let log = h.scratch("operator.log");
    let text = format!(
        "{{\n  \"log\": \"{}\",\n  \"on_error\": \"allow\",\n}}\n",
        log.display()
    );
    std::fs::write(h.hook_path(), text).unwrap();
    let run = |stage: &str, status: &str| {
        let state = json!({"ociVersion": "1.0.2", "id": h.id, "status": status,
            "bundle": h.bundle(), "pid": PID});
        cpuplan_hook::hook::run_hook(Some(stage), state.to_string().as_bytes(), &h.hook_path())
    };
    let r = run("createRuntime", "created").unwrap().unwrap();
    assert_eq!(r.cause, Some("read"), "{r:?}");
    run("poststop", "stopped").unwrap();
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
}

#[test]
fn a_claim_planted_in_a_claims_dir_below_tmp_is_never_read_and_nothing_is_claimed() {
    // The operator's slip: claims_dir below /tmp. A local user's claim of the container's GPU,
    // naming a live process (this test's), is there first.
    let planted = tempfile::tempdir().unwrap();
    let claims = planted.path().join("claims");
    let squatter = cpuplan::Holder::of_pid(Path::new("/"), "squatter", "/b/x", std::process::id())
        .unwrap()
        .unwrap();
    let wait = std::time::Duration::from_secs(1);
    cpuplan::claim_gpus(&claims, Path::new("/"), &squatter, &["0000:3b:00.0".into()], wait)
        .unwrap();
    let listed = || cpuplan::list_claims(&claims, Path::new("/")).unwrap();
    let before = listed();
    let mut h = FakeHost::new();
    h.gpu(0);
    h.hook["claims_dir"] = json!(claims);
    // allow: the container starts, its plan says why it is off, and nothing is claimed.
    let r = h.allow(Some(PID));
    let problem = r.problem.unwrap();
    assert!(
        problem.contains(&format!(
            "key \"claims_dir\": \"{}\" is refused: /tmp (owner uid 0, mode 1777)",
            claims.display()
        )),
        "{problem}"
    );
    assert!(h.plan_file("plan.env").is_some());
    assert_eq!(listed(), before, "the planted claim is as it was");
    // deny: the container is refused, in one line naming the key.
    let e = h.deny(Some(PID));
    assert!(e.contains(r#"key "claims_dir""#) && !e.contains('\n'), "{e}");
    assert_eq!(listed(), before);
}
