//! One pipeline, three front ends: the same fixture containers (GPU and CPU-only, every setting,
//! quota and cpuset cases, planning errors) through the hook's createRuntime, `explain --json`
//! and `precreate` give the same plan.
//!
//! What only one front end can know is named and left out of the comparison: `container` (the
//! runtime's id, which explain and precreate do not have). The hook reads the container's
//! cgroups through its pid, explain and precreate through the `linux.cgroupsPath` it will have
//! (the fake host's `/ctr`, with an 8-CPU quota): the three see the same inputs. precreate's
//! annotation holds the plan without the `container` and `inputs` the files add.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use common::pipeline_cases::{cases, host};
use cpuplan::planenv::PlanEnv;
use cpuplan_hook::hook::run_hook;
use serde_json::Value;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cpuplan-hook"))
}

fn explain(cfg: &Path, bundle: &Path) -> Value {
    let out = bin()
        .arg("--config")
        .arg(cfg)
        .args(["explain", "--json", "--bundle"])
        .arg(bundle)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn precreate(cfg: &Path, bundle: &Path) -> Value {
    let mut child = bin()
        .arg("--config")
        .arg(cfg)
        .arg("precreate")
        .current_dir(bundle)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let config = std::fs::read(bundle.join("config.json")).unwrap();
    child.stdin.take().unwrap().write_all(&config).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `doc` without what only one front end knows.
fn shared(mut doc: Value) -> Value {
    doc.as_object_mut().unwrap().remove("container");
    doc
}

/// `doc` without the fields the plan files add to the plan.
fn plan_only(mut doc: Value) -> Value {
    let m = doc.as_object_mut().unwrap();
    m.remove("container");
    m.remove("inputs");
    doc
}

#[test]
fn the_hook_explain_and_precreate_make_the_same_plan() {
    let all = cases();
    assert!(all.len() >= 20);
    let (mut pinned, mut problems, mut narrowed) = (0, 0, 0);
    for c in &all {
        let h = host(c);
        let (state, cfg) = h.state();
        let report = run_hook(Some("createRuntime"), state.as_bytes(), &cfg)
            .unwrap_or_else(|e| panic!("{}: {e}", c.name))
            .unwrap();
        let written: Value = serde_json::from_str(&h.plan_file("plan.json").unwrap()).unwrap();
        assert_eq!(
            written,
            serde_json::to_value(&report.plan).unwrap(),
            "{}",
            c.name
        );
        let explained = explain(&cfg, &h.bundle());
        assert_eq!(
            shared(written.clone()),
            shared(explained),
            "{}: hook vs explain",
            c.name
        );
        let edited = precreate(&cfg, &h.bundle());
        let annotation: Value =
            serde_json::from_str(edited["annotations"]["cpuplan.plan"].as_str().unwrap()).unwrap();
        assert_eq!(
            plan_only(written.clone()),
            annotation,
            "{}: hook vs precreate",
            c.name
        );
        // precreate's environment is plan.env's, but for what the container set itself.
        let plan_env = PlanEnv::decode(&h.plan_file("plan.env").unwrap()).unwrap();
        let env: Vec<&str> = edited["process"]["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        for (k, v) in plan_env.vars() {
            let set = c.env.iter().find(|kv| kv.starts_with(&format!("{k}=")));
            let want = set.map_or_else(|| format!("{k}={v}"), |kv| kv.to_string());
            assert!(
                env.contains(&want.as_str()),
                "{}: {want} in {env:?}",
                c.name
            );
        }
        // precreate narrows to the cpuset the hook wrote, else leaves the container's own.
        let cpus = edited["linux"]["resources"]["cpu"]["cpus"].as_str();
        let want = written["inputs"]["cpuset"].as_str().or(c.cpus);
        assert_eq!(cpus, want, "{}", c.name);
        if written["inputs"]["cpuset"].is_string() {
            narrowed += 1;
            assert_eq!(h.cpuset(), written["inputs"]["cpuset"], "{}", c.name);
        }
        pinned += usize::from(written["pinned"] != "");
        problems += usize::from(report.problem.is_some());
        assert_eq!(
            report.problem.is_some(),
            c.name.starts_with("error:"),
            "{}: {:?}",
            c.name,
            report.problem
        );
    }
    assert!(
        pinned >= 8 && problems >= 4 && narrowed >= 5,
        "{pinned} {problems} {narrowed}"
    );
}
