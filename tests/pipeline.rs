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

use common::fakehost::FakeHost;
use cpuplan::planenv::PlanEnv;
use cpuplan_hook::hook::run_hook;
use serde_json::{json, Value};

/// One fixture container: its name, the spec edits and the hook config edits.
struct Case {
    name: &'static str,
    annotation: Option<&'static str>,
    env: &'static [&'static str],
    devices: &'static [i64],
    quota: Option<(i64, u64)>,
    cpus: Option<&'static str>,
    config: Value,
}

const fn case(name: &'static str) -> Case {
    Case {
        name,
        annotation: None,
        env: &[],
        devices: &[],
        quota: None,
        cpus: None,
        config: Value::Null,
    }
}

fn cases() -> Vec<Case> {
    let quota16 = Some((1_600_000, 100_000));
    vec![
        Case {
            quota: Some((800_000, 100_000)),
            ..case("cpu-only auto")
        },
        Case {
            annotation: Some("off"),
            quota: Some((400_000, 100_000)),
            ..case("cpu-only off")
        },
        Case {
            annotation: Some("5"),
            quota: quota16,
            ..case("cpu-only cpu 5")
        },
        Case {
            annotation: Some("0"),
            cpus: Some("0-7,112-119"),
            ..case("cpu-only cpu 0 in a cpuset")
        },
        Case {
            devices: &[0],
            quota: quota16,
            ..case("gpu 0 auto")
        },
        Case {
            devices: &[1],
            quota: quota16,
            ..case("gpu 1 auto")
        },
        Case {
            devices: &[0, 1],
            quota: quota16,
            ..case("gpus 0,1 auto")
        },
        Case {
            devices: &[4, 7],
            quota: Some((2_400_000, 100_000)),
            ..case("gpus on node 1")
        },
        Case {
            devices: &[0, 4],
            quota: Some((3_200_000, 100_000)),
            ..case("gpus on both nodes")
        },
        Case {
            devices: &[2],
            quota: Some((12_000_000, 100_000)),
            ..case("quota over the gpu's cpus")
        },
        Case {
            devices: &[0],
            annotation: Some("off"),
            quota: quota16,
            ..case("gpu off narrows")
        },
        Case {
            devices: &[0],
            annotation: Some("3"),
            quota: quota16,
            ..case("gpu cpu 3")
        },
        Case {
            devices: &[0],
            annotation: Some("60"),
            quota: quota16,
            ..case("cpu the narrowed cpus lack")
        },
        Case {
            env: &["NVIDIA_VISIBLE_DEVICES=2,3"],
            quota: quota16,
            ..case("gpus from the environment")
        },
        Case {
            env: &["NVIDIA_VISIBLE_DEVICES=all"],
            quota: Some((6_400_000, 100_000)),
            ..case("all gpus")
        },
        Case {
            devices: &[5],
            cpus: Some("56-63,168-175"),
            ..case("gpu in an exclusive cpuset")
        },
        Case {
            devices: &[0],
            cpus: Some("0-3"),
            ..case("gpu with too few cpus")
        },
        Case {
            devices: &[0],
            quota: quota16,
            config: json!({"cpuset": "keep"}),
            ..case("gpu, cpuset keep")
        },
        Case {
            env: &["CPUPLAN_STEP_THREAD_CORE=off", "OMP_NUM_THREADS=3"],
            devices: &[0],
            quota: quota16,
            ..case("setting and a thread variable from the env")
        },
        Case {
            annotation: Some("223"),
            devices: &[0],
            ..case("error: cpu at the top of the mask")
        },
        Case {
            annotation: Some("fast"),
            devices: &[0],
            ..case("error: setting that does not parse")
        },
        Case {
            devices: &[0],
            cpus: Some("300-310"),
            ..case("error: cpus outside the host")
        },
        Case {
            devices: &[9],
            ..case("error: a spec device the host lacks")
        },
        Case {
            env: &["NVIDIA_VISIBLE_DEVICES=9,2"],
            ..case("an env gpu id the host lacks: a note")
        },
        Case {
            quota: Some((50_000, 100_000)),
            annotation: Some("auto"),
            devices: &[3],
            ..case("half a cpu")
        },
    ]
}

/// The fake host with `c` applied: no live quota, so the three front ends see the same inputs.
fn host(c: &Case) -> FakeHost {
    let mut h = FakeHost::new();
    std::fs::write(
        h.file("sys/fs/cgroup/cpu,cpuacct/ctr/cpu.cfs_quota_us"),
        "-1\n",
    )
    .unwrap();
    h.hook["step_thread_core"] = json!("auto");
    if let Value::Object(m) = &c.config {
        for (k, v) in m {
            h.hook[k] = v.clone();
        }
    }
    for kv in c.env {
        h.env(kv);
    }
    if let Some(a) = c.annotation {
        h.spec["annotations"] = json!({"cpuplan.step-thread-core": a});
    }
    let mut cpu = json!({});
    if let Some((q, p)) = c.quota {
        cpu["quota"] = json!(q);
        cpu["period"] = json!(p);
    }
    if let Some(cpus) = c.cpus {
        cpu["cpus"] = json!(cpus);
    }
    h.spec["linux"]["resources"] = json!({ "cpu": cpu });
    let devices: Vec<Value> = c
        .devices
        .iter()
        .map(|m| json!({"path": format!("/dev/nvidia{m}"), "type": "c", "major": 195, "minor": m}))
        .collect();
    h.spec["linux"]["devices"] = json!(devices);
    h
}

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
        let (state, cfg) = h.written();
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
