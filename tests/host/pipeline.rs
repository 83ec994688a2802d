//! One pipeline, four front ends: the same fixture containers (GPU and CPU-only, every setting,
//! quota, period and cpuset cases, planning errors) through the hook's createRuntime, `explain
//! --json`, `precreate` and the NRI plugin's CreateContainer (in process, the plugin's
//! [`PlanHandler`] given NRI's container message) give the same plan.
//!
//! What only one front end can know is named and left out of the comparison: `container` (the
//! runtime's id, which explain and precreate do not have). The hook reads the container's
//! cgroups through its pid, explain, precreate and the plugin through the `linux.cgroupsPath` it
//! will have (the fake host's `/ctr`, with an 8-CPU quota): the four see the same inputs.
//! precreate's annotation holds the plan without the `container` and `inputs` the files add. The
//! plugin plans on a fresh fake host of the same case (its claims would otherwise meet the
//! hook's, held by a live container).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use common::fakehost::run_hook;
use common::hookbin::{cpuplan_bin, hook_bin};
use common::pipeline_cases::{case, cases, host, Case};
use cpuplan::planenv::PlanEnv;
use cpuplan_hook::config::HookConfig;
use cpuplan_hook::nri::PlanHandler;
use nri_plugin::api::{
    Container, LinuxContainer, LinuxCpu, LinuxDevice, LinuxResources, OptionalInt64,
    OptionalUInt64, PodSandbox,
};
use nri_plugin::Plugin;
use serde_json::{json, Value};

/// `cpuplan`: the operator's command (explain here).
fn bin() -> Command {
    Command::new(cpuplan_bin())
}

/// `cpuplan-hook`: the runtime's stages (precreate here).
fn stages() -> Command {
    Command::new(hook_bin())
}

fn explain(cfg: &Path, bundle: &Path) -> Value {
    let bundle = bundle.to_str().unwrap();
    common::hookbin::cpuplan_json(cfg, &["explain", "--json", "--bundle", bundle])
}

fn precreate(cfg: &Path, bundle: &Path) -> Value {
    let mut child = stages()
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

/// The NRI plugin's CreateContainer for case `c` on its own fake host (with the case's hook
/// config): the container message as the runtime sends it, answered in process by the plugin's
/// handler; the plan.json it wrote on the host (none where it met a planning problem: under
/// `allow` its answer is then the empty adjustment), and the adjustment's env and cpus.
fn nri(c: &Case) -> (Option<Value>, Vec<String>, Option<String>) {
    let mut h = host(c);
    h.hook["nri_dir"] = json!(h.dir.path().join("nri"));
    let (_, cfg) = h.written();
    // The plugin's claims are held by its own process: the fake /proc must show it.
    let me = std::process::id();
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let proc_dir = h.file(&format!("proc/{me}"));
    std::fs::create_dir_all(&proc_dir).unwrap();
    std::fs::write(proc_dir.join("stat"), stat).unwrap();
    let config = HookConfig::load(&cfg).unwrap();
    let handler = PlanHandler::new(config, "10-cpuplan", true);
    let mut annotations = std::collections::BTreeMap::new();
    if let Some(a) = c.annotation {
        annotations.insert("cpuplan.step-thread-core".to_string(), a.to_string());
    }
    if let Some(a) = c.split {
        annotations.insert("cpuplan.pool-split".to_string(), a.to_string());
    }
    let env = h.spec["process"]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let container = Container {
        id: "ctr".into(),
        name: "srv".into(),
        env,
        annotations,
        linux: Some(LinuxContainer {
            cgroups_path: "/ctr".into(),
            devices: c
                .devices
                .iter()
                .map(|&m| LinuxDevice {
                    path: format!("/dev/nvidia{m}"),
                    r#type: "c".into(),
                    major: 195,
                    minor: m,
                    ..LinuxDevice::default()
                })
                .collect(),
            resources: Some(LinuxResources {
                cpu: Some(LinuxCpu {
                    quota: c.quota.map(|(q, _)| OptionalInt64 { value: q }),
                    period: c.quota.map(|(_, p)| OptionalUInt64 { value: p }),
                    cpus: c.cpus.unwrap_or_default().into(),
                    ..LinuxCpu::default()
                }),
                ..LinuxResources::default()
            }),
            ..LinuxContainer::default()
        }),
        ..Container::default()
    };
    let pod = PodSandbox {
        id: "pod".into(),
        namespace: "default".into(),
        ..PodSandbox::default()
    };
    let answer = handler
        .create_container(&pod, &container)
        .unwrap_or_else(|e| panic!("{}: NRI: {e:?}", c.name));
    let adjust = answer.adjust.unwrap_or_default();
    let plan = std::fs::read_to_string(h.dir.path().join("nri/ctr/plan.json")).ok();
    let cpus = adjust
        .linux
        .and_then(|l| l.resources)
        .and_then(|r| r.cpu)
        .map(|cpu| cpu.cpus)
        .filter(|s| !s.is_empty());
    let env = adjust
        .env
        .iter()
        .map(|kv| format!("{}={}", kv.key, kv.value))
        .collect();
    (plan.map(|p| serde_json::from_str(&p).unwrap()), env, cpus)
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
    m.remove("generation");
    m.remove("inputs");
    doc
}

#[test]
fn the_hook_explain_precreate_and_nri_make_the_same_plan() {
    let all = cases();
    assert!(all.len() >= 20);
    let (mut pinned, mut problems, mut narrowed, mut nri_planned, mut split) = (0, 0, 0, 0, 0);
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
        // The NRI plugin's CreateContainer: the same plan.json, env and cpuset; at a planning
        // problem (under allow) the empty adjustment and no plan files, as docs/nri.md says.
        let (planned, nri_env, nri_cpus) = nri(c);
        if report.problem.is_some() {
            assert_eq!(planned, None, "{}: no plan files from NRI", c.name);
            assert!(
                nri_env.is_empty() && nri_cpus.is_none(),
                "{}: {nri_env:?} {nri_cpus:?}",
                c.name
            );
        } else {
            // Placing worker processes is the plugin's alone: its plan.json lists each worker's
            // placement CPUs (one entry per worker) where it places any; the rest is the hook's.
            let mut planned = planned.expect("the plugin's plan.json");
            if let Some(placement) = planned.as_object_mut().unwrap().remove("worker_placement") {
                assert_eq!(
                    placement.as_array().map(Vec::len),
                    written["workers"].as_array().map(Vec::len),
                    "{}: one placement per worker: {placement}",
                    c.name
                );
            }
            assert_eq!(
                shared(written.clone()),
                shared(planned),
                "{}: hook vs NRI",
                c.name
            );
            nri_planned += 1;
        }
        for (k, v) in plan_env
            .vars()
            .into_iter()
            .filter(|_| report.problem.is_none())
        {
            if !c.env.iter().any(|kv| kv.starts_with(&format!("{k}="))) {
                let want = format!("{k}={v}");
                assert!(nri_env.contains(&want), "{}: {want} in {nri_env:?}", c.name);
            }
        }
        assert_eq!(
            nri_cpus.as_deref(),
            written["inputs"]["cpuset"]
                .as_str()
                .filter(|_| report.problem.is_none()),
            "{}: the NRI adjustment's cpus",
            c.name
        );
        if written["inputs"]["cpuset"].is_string() {
            narrowed += 1;
            assert_eq!(h.cpuset(), written["inputs"]["cpuset"], "{}", c.name);
        }
        pinned += usize::from(written["pinned"] != "");
        problems += usize::from(report.problem.is_some());
        split += usize::from(check_shares(c, &written, &plan_env));
        assert_eq!(
            report.problem.is_some(),
            c.name.starts_with("error:"),
            "{}: {:?}",
            c.name,
            report.problem
        );
        if let Some(v) = c.split.filter(|_| c.name.starts_with("error:")) {
            let p = report.problem.as_deref().unwrap_or_default();
            let want = format!("annotation cpuplan.pool-split: pool_split \"{v}\" is not");
            assert!(p.contains(&want), "{}: {p}", c.name);
        }
    }
    assert!(
        pinned >= 8
            && problems >= 5
            && narrowed >= 5
            && nri_planned == all.len() - problems
            && split >= 4,
        "{pinned} {problems} {narrowed} {nri_planned} {split}"
    );
}

/// Checks `plan.json`'s `processes` and `plan.env`'s thread variables (which precreate's and
/// the NRI plugin's environments are compared against) for case `c`: with two GPU workers or
/// more and the pools split, each process's share, summing within `left` (or one each where
/// there are more processes than CPUs left); else all of `left`. Whether the pools were split.
fn check_shares(c: &Case, written: &Value, env: &PlanEnv) -> bool {
    let p = &written["processes"];
    let n = written["workers"].as_array().unwrap().len();
    let left = written["left"].as_u64().unwrap() as usize;
    let valid = |s: &&str| *s == "off" || *s == "per-process";
    let chosen = match c.split.filter(valid) {
        Some(s) => s,
        None => c.config["pool_split"].as_str().unwrap_or("per-process"),
    };
    let splits = chosen == "per-process" && n >= 2;
    let expected = chosen;
    assert_eq!(written["pool_split"], expected, "{}", c.name);
    assert_eq!(env.split.to_string(), expected, "{}", c.name);
    let worker = p["worker"].as_u64().unwrap() as usize;
    let api = p["api_server"].as_u64().unwrap() as usize;
    assert_eq!(env.worker_threads, worker, "{}", c.name);
    assert_eq!(env.pools.preprocess_threads, api, "{}", c.name);
    let omp = env
        .vars()
        .into_iter()
        .find(|(k, _)| *k == "OMP_NUM_THREADS")
        .unwrap()
        .1;
    assert_eq!(omp, worker.to_string(), "{}", c.name);
    assert_eq!(p["other"], p["worker"], "{}", c.name);
    if splits {
        assert_eq!(p["workers"], n, "{}", c.name);
        assert_eq!(p["sum"], api + n * worker, "{}", c.name);
        if n < left {
            assert!(api + n * worker <= left, "{}: {p}", c.name);
            assert!(worker < left, "{}: {p}", c.name);
        } else {
            assert_eq!((api, worker), (1, 1), "{}: {p}", c.name);
        }
    } else {
        assert_eq!(worker, left, "{}: {p}", c.name);
    }
    splits
}

#[test]
fn a_quota_no_runtime_applies_is_refused_alike_by_all_four() {
    let c = Case {
        quota: Some((-5, 100_000)),
        devices: &[0],
        config: json!({"on_error": "deny"}),
        ..case("quota -5 under deny")
    };
    let field = "linux.resources.cpu.quota: -5 is neither positive";
    let h = host(&c);
    let (state, cfg) = h.written();
    let e = run_hook(Some("createRuntime"), state.as_bytes(), &cfg).unwrap_err();
    assert!(e.to_string().contains(field), "hook: {e}");
    assert_eq!(h.plan_file("plan.json"), None, "hook: nothing written");
    for args in [&["explain", "--json", "--bundle"][..], &["precreate"][..]] {
        let mut cmd = if args[0] == "explain" {
            bin()
        } else {
            stages()
        };
        cmd.arg("--config").arg(&cfg).args(args);
        if args[0] == "explain" {
            cmd.arg(h.bundle());
        }
        let out = cmd
            .current_dir(h.bundle())
            .stdin(std::fs::File::open(h.bundle().join("config.json")).unwrap())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(field),
            "{args:?}: {err}"
        );
    }
    let mut h = host(&c);
    h.hook["nri_dir"] = json!(h.dir.path().join("nri"));
    let (_, cfg) = h.written();
    let handler = PlanHandler::new(HookConfig::load(&cfg).unwrap(), "10-cpuplan", true);
    let container = Container {
        id: "ctr".into(),
        linux: Some(LinuxContainer {
            resources: Some(LinuxResources {
                cpu: Some(LinuxCpu {
                    quota: Some(OptionalInt64 { value: -5 }),
                    ..LinuxCpu::default()
                }),
                ..LinuxResources::default()
            }),
            ..LinuxContainer::default()
        }),
        ..Container::default()
    };
    let e = handler
        .create_container(&PodSandbox::default(), &container)
        .unwrap_err();
    assert!(e.to_string().contains(field), "NRI: {e}");
    assert!(
        !h.dir.path().join("nri/ctr").exists(),
        "NRI: nothing written"
    );
}
