//! A container's own plan reaches the operator's terminal escaped: `status`, `explain --pid`
//! and `claims` over a planted container (a fake `/proc` whose pid's root holds the plan) and an
//! NRI plan directory, their strings and ids carrying terminal controls.

use common::fakehost::FakeRoot;
use serde_json::Value;

use super::{ok_json, repo, run};

/// Clear screen and cursor home, a window title ended by BEL, OSC 52 (set the clipboard), an
/// 8-bit CSI (C1), DEL, cursor up, and a line of its own that looks like the verdict.
const HOSTILE: &str = "x\u{1b}[2J\u{1b}[H\u{1b}]0;owned\u{7}\u{1b}]52;c;ZWNobyBvd25lZA==\u{7}\u{9b}31m\u{7f}\u{1b}[5A\r\nplan: current";

/// `bytes` as text, after checking it holds no control character but the line ends.
fn without_controls(what: &str, bytes: &[u8]) -> String {
    let text = String::from_utf8(bytes.to_vec()).unwrap_or_else(|e| panic!("{what}: {e}"));
    let bad: Vec<char> = text
        .chars()
        .filter(|c| c.is_control() && *c != '\n')
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: control characters {bad:?} in:\n{text}"
    );
    text
}

#[test]
fn a_container_s_plan_strings_reach_the_terminal_escaped() {
    let t = tempfile::tempdir().unwrap();
    let croot = t.path().join("croot");
    let fake = FakeRoot::new(&t.path().join("host"), 4321, "/ctr", &croot);
    let o = common::operator_dir::tempdir();
    let (claims, nri) = (o.path().join("claims"), o.path().join("nri"));
    let host = repo("examples/host");
    let cfg = t.path().join("hook.json");
    std::fs::write(
        &cfg,
        serde_json::json!({
            "root": fake.root, "topology_root": host, "claims_dir": claims, "nri_dir": nri,
        })
        .to_string(),
    )
    .unwrap();
    // The plan explain makes for the example bundle, its strings made hostile: the container
    // writes its own plan directory.
    let empty = t.path().join("empty.json");
    std::fs::write(&empty, "{}").unwrap();
    let mut plan = ok_json(&[
        "--config",
        empty.to_str().unwrap(),
        "explain",
        "--json",
        "--no-inventory",
        "--bundle",
        repo("examples/bundle").to_str().unwrap(),
        "--root",
        host.to_str().unwrap(),
    ]);
    for field in ["/why", "/workers/0/why", "/result/why", "/container"] {
        *plan.pointer_mut(field).unwrap() = HOSTILE.into();
    }
    plan["devices"][0] = HOSTILE.into();
    plan["workers"][0]["device"] = HOSTILE.into();
    std::fs::create_dir_all(croot.join("run/cpuplan")).unwrap();
    std::fs::write(croot.join("run/cpuplan/plan.json"), plan.to_string()).unwrap();
    // The hook's claim for it, under a hostile id; and an NRI plan directory of a hostile name.
    let holder = cpuplan::Holder::of_pid(&fake.root, HOSTILE, "/bundle", 4321)
        .unwrap()
        .expect("the planted pid runs");
    let wait = std::time::Duration::from_secs(1);
    cpuplan::claim_gpus(&claims, &fake.root, &holder, &["0000:18:00.0".into()], wait).unwrap();
    let nri_id = "c\u{1b}]52;c;b3duZWQ=\u{7}";
    std::fs::create_dir_all(nri.join(nri_id)).unwrap();
    std::fs::write(nri.join(nri_id).join("plan.json"), plan.to_string()).unwrap();

    let c = cfg.to_str().unwrap();
    for args in [
        vec!["status"],
        vec!["status", "--json"],
        vec!["explain", "--pid", "4321"],
        vec!["explain", "--pid", "4321", "--json"],
        vec!["claims"],
        vec!["claims", "--json"],
    ] {
        let what = format!("{args:?}");
        let mut all = vec!["--config", c];
        all.extend(&args);
        let out = run(&all);
        let stderr = without_controls(&what, &out.stderr);
        assert!(out.status.success(), "{what}: {stderr}");
        let text = without_controls(&what, &out.stdout);
        if args.contains(&"--json") {
            // The JSON means what the plan says: every control escaped, none lost.
            let v: Value = serde_json::from_str(&text).unwrap();
            assert!(v.to_string().contains(r"\u001b]52;c;"), "{what}: {v}");
            assert!(
                text.contains(r"\u009b31m") && text.contains(r"\u007f"),
                "{what}: {text}"
            );
            if args[0] == "explain" {
                assert_eq!(v["plan"]["why"], HOSTILE, "{what}");
            }
        } else {
            // Printed, escaped: on its own line nothing of the tenant's.
            assert!(text.contains(r"\u{1b}]52;c;"), "{what}: {text}");
            assert!(
                !text.lines().any(|l| l == "plan: current"),
                "{what}: {text}"
            );
        }
    }
    // What was drawn is the planted container, with its hostile strings where they belong.
    let status = run(&["--config", c, "status"]);
    let text = String::from_utf8(status.stdout).unwrap();
    assert!(text.contains("2 planned container(s)"), "{text}");
    assert!(
        text.contains(r"  worker 0 GPU x\u{1b}[2J\u{1b}[H\u{1b}]0;owned\u{7}"),
        "{text}"
    );
    assert!(
        text.contains(r"\u{9b}31m\u{7f}\u{1b}[5A\r\nplan: current"),
        "{text}"
    );
    let explain = run(&["--config", c, "explain", "--pid", "4321"]);
    let text = String::from_utf8(explain.stdout).unwrap();
    assert!(
        text.contains("running: pid 4321, container x\\u{1b}[2J"),
        "{text}"
    );
    assert!(text.contains("why: x\\u{1b}[2J"), "{text}");
}
