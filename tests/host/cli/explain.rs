//! `cpuplan explain`: a bundle's plan as the hook would make it, and a running container's.

use super::{bad, ok_json, ok_text, repo};

#[test]
fn explain_prints_the_example_plan() {
    let text = ok_text(&[
        "explain",
        "--bundle",
        repo("examples/bundle").to_str().unwrap(),
        "--root",
        repo("examples/host").to_str().unwrap(),
    ]);
    assert!(
        text.contains("mask 0-55,112-167 (112 CPUs), usable 16, setting auto"),
        "{text}"
    );
    assert!(
        text.contains("     c0 01oooooooooooooooooooooooooooooooooooooooooooooooooooooR"),
        "{text}"
    );
    assert!(
        text.contains("note: no pid: GPU claims were not checked"),
        "{text}"
    );
    // The plain legend, and the environment the container gets.
    assert!(
        text.contains("  R                    the API server's core"),
        "{text}"
    );
    assert!(
        text.contains("  .                    a core outside the mask"),
        "{text}"
    );
    let env = text
        .split_once("environment: the container gets")
        .expect("the environment block")
        .1;
    assert!(env.contains("\n  OMP_NUM_THREADS="), "{env}");
    assert!(env.contains("\n  CPUPLAN_USABLE=16\n"), "{env}");
    assert!(env.contains("\n  CPUPLAN_MASK=0-55,112-167\n"), "{env}");
    let t = tempfile::tempdir().unwrap();
    let cfg = t.path().join("hook.json");
    std::fs::write(&cfg, "{}").unwrap();
    let v = ok_json(&[
        "--config",
        cfg.to_str().unwrap(),
        "explain",
        "--json",
        "--bundle",
        repo("examples/bundle").to_str().unwrap(),
        "--root",
        repo("examples/host").to_str().unwrap(),
    ]);
    assert_eq!(v["inputs"]["cpuset"], "0-55,112-167");
    assert_eq!(
        v["inputs"]["gpus"],
        serde_json::json!(["0000:18:00.0", "0000:2a:00.0"])
    );
    assert_eq!(v["left"], 10);
}

#[test]
fn explain_pid_takes_one_running_pid_and_says_in_one_line_what_it_cannot_read() {
    let b = repo("examples/bundle");
    bad(
        &["explain", "--pid", "1", "--bundle", b.to_str().unwrap()],
        "--bundle and --pid: give one of them",
    );
    bad(&["explain", "--pid", "x"], "--pid \"x\" is not a pid");
    bad(&["explain", "--pid", "0"], "is not a pid");
    bad(&["explain"], "--bundle DIR or --pid PID is required");
    // A pid that does not run (past the kernel's pid_max): a bad argument, exit 2 and one
    // line naming it, as docs/hook.md says of bad arguments.
    bad(
        &["explain", "--pid", "4194304"],
        "explain --pid: pid 4194304: ",
    );
    // This command's own process is no container: refused, its files never read as a plan.
    let me = std::process::id().to_string();
    bad(&["explain", "--pid", &me], "own mount namespace");
}

#[test]
fn a_misspelt_cpuplan_annotation_is_one_line_naming_the_known_ones_and_changes_nothing() {
    use common::fakehost::{FakeHost, PID};
    use common::hookbin;
    let known = "(it knows cpuplan.step-thread-core, cpuplan.pool-split, cpuplan.rank-placement, cpuplan.plan)";
    // explain: one note; the plan is the one without it.
    let t = tempfile::tempdir().unwrap();
    let cfg = t.path().join("hook.json");
    std::fs::write(&cfg, "{}").unwrap();
    let bundle = t.path().join("bundle");
    std::fs::create_dir_all(bundle.join("rootfs")).unwrap();
    let mut spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(repo("examples/bundle/config.json")).unwrap())
            .unwrap();
    let explain = |spec: &serde_json::Value, json: bool| {
        std::fs::write(bundle.join("config.json"), spec.to_string()).unwrap();
        let mut args = vec![
            "--config",
            cfg.to_str().unwrap(),
            "explain",
            "--no-inventory",
            "--bundle",
            bundle.to_str().unwrap(),
            "--root",
        ];
        let host = repo("examples/host");
        args.push(host.to_str().unwrap());
        match json {
            true => {
                args.push("--json");
                ok_json(&args).to_string()
            }
            false => ok_text(&args),
        }
    };
    let before = explain(&spec, true);
    spec["annotations"] = serde_json::json!({
        "cpuplan.step-thread-cores": "off",
        "cpuplan.pool-split": "per-process",
    });
    assert_eq!(explain(&spec, true), before, "the plan changed");
    let text = explain(&spec, false);
    let notes: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("cpuplan.step-thread-cores"))
        .collect();
    assert_eq!(
        notes,
        [format!(
            "note: annotation cpuplan.step-thread-cores is not one cpuplan knows, ignored {known}"
        )],
        "{text}"
    );
    // The hook: one line in its log for the container, the setting the config's.
    let mut fx = FakeHost::new();
    fx.spec["annotations"] = serde_json::json!({"cpuplan.step-thread-cores": "off"});
    fx.write();
    let out = hookbin::run_fed(
        &mut hookbin::create_runtime(&hookbin::hook_bin(), &fx.hook_path()),
        fx.state(Some(PID)).as_bytes(),
    );
    let (code, _, err) = hookbin::outcome(out);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("cpuplan.step-thread-cores"))
        .collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("container ctr: annotation cpuplan.step-thread-cores is not one")
            && lines[0].contains(known),
        "{err}"
    );
    let plan: serde_json::Value =
        serde_json::from_str(&fx.plan_file("plan.json").expect("the plan written")).unwrap();
    assert_eq!(plan["setting"], "2", "the hook config's setting: {plan}");
}
