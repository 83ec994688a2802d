//! End to end with real podman (Debian's 4.3, runc): the repo's hooks.d files at createRuntime,
//! at precreate, and both, checked from inside the container and against `explain --json` on
//! the bundle podman gave runc.

use std::path::{Path, PathBuf};

use common::podman::{claims_json, explain_json, pid_free, Podman};
use common::runc::{fixtures, hook_bin, line_value};
use serde_json::{json, Value};

/// The setting the tests' hook config uses.
const SETTING: &str = "auto";

/// What the container prints: its CPUs, the plan files if any, its environment.
const PROBE: &str = r#"echo "cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)"
if test -e /run/cpuplan/plan.env; then echo '--- planenv'; cat /run/cpuplan/plan.env; echo '--- planjson'; cat /run/cpuplan/plan.json; echo; else echo 'no plan files'; fi
echo '--- env'; env | sort"#;

/// A hook config with the e2e fake GPU host, the claims in `claims` and the log under `dir`.
fn hook_config(dir: &Path, claims: &Path) -> PathBuf {
    let p = dir.join("hook.json");
    let cfg = json!({
        "step_thread_core": SETTING,
        "topology_root": fixtures().join("e2e-host"),
        "claims_dir": claims,
        "log": dir.join("hook.log"),
    });
    std::fs::write(&p, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
    p
}

/// An "installed binary" at `<dir>/libexec/cpuplan/cpuplan-hook`: the built hook with the
/// test's `--config`, so the hooks.d files run with their own args unchanged.
fn installed(dir: &Path, config: &Path) -> PathBuf {
    let p = dir.join("libexec/cpuplan/cpuplan-hook");
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(
        &p,
        format!(
            "#!/bin/sh\nexec '{}' --config '{}' \"$@\"\n",
            hook_bin().display(),
            config.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    p
}

/// The repo's `hooks/oci/NAME` with only `hook.path` changed to `binary`.
fn repo_hook(name: &str, binary: &Path) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("hooks/oci")
        .join(name);
    let mut v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(
        v["hook"]["path"], "/usr/libexec/cpuplan/cpuplan-hook",
        "{name} registers the Debian package's binary"
    );
    v["hook"]["path"] = json!(binary);
    v
}

fn section<'a>(out: &'a str, name: &str) -> &'a str {
    let Some(i) = out.find(&format!("--- {name}\n")) else {
        panic!("no section {name} in:\n{out}");
    };
    let rest = &out[i + name.len() + 5..];
    &rest[..rest.find("\n--- ").map(|i| i + 1).unwrap_or(rest.len())]
}

/// A podman, its hook config and the "installed" hook, registering the repo's `files`.
fn setup(tag: &str, files: &[&str]) -> (Podman, PathBuf) {
    let p = Podman::new(tag);
    let cfg = hook_config(p.dir.path(), &p.operator.path().join("claims"));
    let bin = installed(p.dir.path(), &cfg);
    for f in files {
        p.register(f, &repo_hook(f, &bin));
    }
    (p, cfg)
}

/// One CPU of quota and GPU 0: its device node (195:0, made by the test) and the variable
/// NVIDIA's toolkit sets beside it.
fn gpu_one_cpu() -> Vec<String> {
    let node = common::podman::gpu_node(0);
    [
        "--cpus",
        "1",
        "--env",
        "NVIDIA_VISIBLE_DEVICES=0",
        "--device",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("{}:/dev/nvidia0", node.display())])
    .collect()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn the_create_runtime_hooks_d_file_plans_the_container() {
    let (p, cfg) = setup("crt", &["cpuplan.json"]);
    let opts = gpu_one_cpu();
    let init = p.init("crt", &strs(&opts), PROBE);
    assert_eq!(init.rc, 0, "podman create/init: {}", init.err);
    let explained = explain_json(&cfg, &p.bundle("crt"));
    let id = p.cmd(&["inspect", "--format", "{{.Id}}", "crt"]);
    let id = id.out.trim();
    // createRuntime (auto) claimed the container's GPU for its pid.
    let claims = claims_json(&cfg);
    assert_eq!(claims.as_array().map(Vec::len), Some(1), "{claims}");
    assert_eq!(claims[0]["address"], "0000:3b:00.0", "{claims}");
    assert_eq!(claims[0]["holder"]["container"], id, "{claims}");
    assert_eq!(claims[0]["live"], true, "{claims}");
    let run = p.start("crt");
    assert_eq!(run.rc, 0, "podman start: {}\n{}", run.err, run.out);
    let out = &run.out;
    // The GPU is local to CPU 1 and the quota is 1 CPU: the numa rule narrows the cpuset to 1.
    assert!(out.contains("cpus=1\n"), "{out}");
    let env = section(out, "planenv");
    assert_eq!(line_value(env, "CPUPLAN_MASK"), Some("'1'"), "{env}");
    assert_eq!(line_value(env, "CPUPLAN_USABLE"), Some("'1'"), "{env}");
    assert_eq!(line_value(env, "CPUPLAN_DEVICES"), Some("'0000:3b:00.0'"));
    assert_eq!(
        line_value(env, "CPUPLAN_SETTING"),
        Some(format!("'{SETTING}'").as_str())
    );
    assert_eq!(line_value(env, "OMP_NUM_THREADS"), Some("'1'"));
    let plan: Value = serde_json::from_str(section(out, "planjson")).expect("plan.json parses");
    assert_eq!(plan["container"], id, "plan.json names podman's id");
    assert_eq!(plan["inputs"]["gpus"], json!(["0000:3b:00.0"]));
    assert_eq!(plan["inputs"]["quota"], 1.0);
    assert_eq!(pid_free(&plan), pid_free(&explained), "hook vs explain");
    assert_eq!(explained["mask"], "1");
    // Without the precreate hook the environment is the image's and the user's only.
    let env = section(out, "env");
    assert!(!env.contains("OMP_NUM_THREADS="), "{env}");
    // Removing the container runs the poststop stage of the same hooks.d file.
    let rm = p.cmd(&["rm", "crt"]);
    assert_eq!(rm.rc, 0, "podman rm: {}", rm.err);
    let log = std::fs::read_to_string(p.dir.path().join("hook.log")).unwrap();
    assert!(
        log.contains(&format!("container {id}: stopped, released 1 GPU claim")),
        "poststop: {log}"
    );
    assert_eq!(claims_json(&cfg), json!([]), "claims left after poststop");
}

#[test]
fn precreate_sets_the_plan_in_the_environment_and_the_user_and_image_win() {
    let (p, cfg) = setup("pre", &["cpuplan-precreate.json"]);
    let image = "localhost/cpuplan-e2e-env:latest";
    p.import(image, &["ENV MKL_NUM_THREADS=5"]);
    let owned = gpu_one_cpu();
    let mut opts = strs(&owned);
    opts.extend(["--env", "OMP_NUM_THREADS=7"]);
    let init = p.init_image("pre", image, &opts, PROBE);
    assert_eq!(init.rc, 0, "podman create/init: {}", init.err);
    let oci = p.oci_config("pre");
    let explained = explain_json(&cfg, &p.bundle("pre"));
    let run = p.start("pre");
    assert_eq!(run.rc, 0, "podman start: {}\n{}", run.err, run.out);
    let out = &run.out;
    assert!(
        out.contains("cpus=1\n"),
        "precreate narrowed the cpuset: {out}"
    );
    assert!(
        out.contains("no plan files"),
        "precreate writes no files: {out}"
    );
    let env = section(out, "env");
    // Set without sourcing anything; the user's --env and the image's ENV win.
    assert_eq!(line_value(env, "OMP_NUM_THREADS"), Some("7"), "{env}");
    assert_eq!(line_value(env, "MKL_NUM_THREADS"), Some("5"), "{env}");
    assert_eq!(line_value(env, "OPENBLAS_NUM_THREADS"), Some("1"), "{env}");
    assert_eq!(line_value(env, "RAYON_NUM_THREADS"), Some("1"), "{env}");
    assert_eq!(line_value(env, "GOMAXPROCS"), Some("1"), "{env}");
    assert_eq!(line_value(env, "CPUPLAN_MASK"), Some("1"), "{env}");
    assert_eq!(line_value(env, "CPUPLAN_DEVICES"), Some("0000:3b:00.0"));
    assert_eq!(line_value(env, "CPUPLAN_SETTING"), Some(SETTING));
    // The config runc got: cpus narrowed, each variable once, the plan in the annotation.
    assert_eq!(oci["linux"]["resources"]["cpu"]["cpus"], "1");
    let vars: Vec<&str> = oci["process"]["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for key in ["OMP_NUM_THREADS=", "MKL_NUM_THREADS=", "CPUPLAN_MASK="] {
        assert_eq!(
            vars.iter().filter(|v| v.starts_with(key)).count(),
            1,
            "{key} once in {vars:?}"
        );
    }
    let annotation = oci["annotations"]["cpuplan.plan"]
        .as_str()
        .expect("the cpuplan.plan annotation");
    let plan: Value = serde_json::from_str(annotation).expect("the annotation is JSON");
    assert_eq!(
        pid_free(&plan),
        pid_free(&explained),
        "precreate vs explain"
    );
    assert_eq!(plan["mask"], "1");
    assert_eq!(plan["usable"], 1);
}

#[test]
fn precreate_and_create_runtime_together_agree() {
    let (p, cfg) = setup("both", &["cpuplan-precreate.json", "cpuplan.json"]);
    let opts = gpu_one_cpu();
    let init = p.init("both", &strs(&opts), PROBE);
    assert_eq!(init.rc, 0, "podman create/init: {}", init.err);
    let oci = p.oci_config("both");
    let explained = explain_json(&cfg, &p.bundle("both"));
    let run = p.start("both");
    assert_eq!(run.rc, 0, "podman start: {}\n{}", run.err, run.out);
    let out = &run.out;
    assert!(out.contains("cpus=1\n"), "{out}");
    let plan_env = section(out, "planenv");
    let env = section(out, "env");
    let mut compared = 0;
    for line in plan_env.lines().filter(|l| !l.starts_with('#')) {
        let (k, v) = line.split_once('=').expect("KEY='value'");
        if k == "CPUPLAN_WHY" {
            // precreate narrowed the cpuset, so createRuntime's why says it was already narrow.
            continue;
        }
        if k == cpuplan::planenv::GENERATION {
            // The plan file's generation (it changes when the NRI plugin re-plans); the
            // environment, fixed at start, never carries it.
            assert_eq!(line_value(env, k), None, "{env}");
            continue;
        }
        let v = v.trim_matches('\'');
        assert_eq!(line_value(env, k), Some(v), "{k}: env vs plan.env\n{env}");
        compared += 1;
    }
    assert!(compared >= 19, "plan.env has every variable: {plan_env}");
    let plan: Value = serde_json::from_str(section(out, "planjson")).unwrap();
    let annotation: Value =
        serde_json::from_str(oci["annotations"]["cpuplan.plan"].as_str().unwrap()).unwrap();
    assert_eq!(
        pid_free(&plan),
        pid_free(&annotation),
        "createRuntime vs precreate"
    );
    assert_eq!(
        pid_free(&plan),
        pid_free(&explained),
        "createRuntime vs explain"
    );
}

/// Where planning fails, precreate injects the off plan's variables, which the createRuntime
/// hook writes into plan.env too: the container's environment and its plan.env agree.
#[test]
fn a_precreate_that_cannot_plan_injects_the_off_plan_plan_env_holds() {
    let (p, _cfg) = setup("pass", &["cpuplan-precreate.json", "cpuplan.json"]);
    let owned = gpu_one_cpu();
    let mut opts = strs(&owned);
    opts.extend(["--annotation", "cpuplan.step-thread-core=fast"]);
    let init = p.init("pass", &opts, PROBE);
    assert_eq!(init.rc, 0, "on_error allow starts it: {}", init.err);
    let oci = p.oci_config("pass");
    let run = p.start("pass");
    assert_eq!(run.rc, 0, "podman start: {}\n{}", run.err, run.out);
    let out = &run.out;
    assert!(out.contains("cpus=0-1\n"), "cpuset untouched: {out}");
    assert!(oci["linux"]["resources"]["cpu"].get("cpus").is_none());
    let env = section(out, "env");
    let plan_env = section(out, "planenv");
    assert_eq!(line_value(env, "CPUPLAN_SETTING"), Some("off"), "{env}");
    assert_eq!(line_value(env, "OMP_NUM_THREADS"), Some("1"), "{env}");
    let mut compared = 0;
    for line in plan_env.lines().filter(|l| !l.starts_with('#')) {
        let (k, v) = line.split_once('=').expect("KEY='value'");
        if k == cpuplan::planenv::GENERATION {
            assert_eq!(
                line_value(env, k),
                None,
                "the env never carries the generation: {env}"
            );
            continue;
        }
        let v = v.trim_matches('\'');
        assert_eq!(line_value(env, k), Some(v), "{k}: env vs plan.env\n{env}");
        compared += 1;
    }
    assert!(compared >= 19, "plan.env has every variable: {plan_env}");
    let annotation: Value =
        serde_json::from_str(oci["annotations"]["cpuplan.plan"].as_str().unwrap()).unwrap();
    assert_eq!(annotation["setting"], "off");
    assert!(
        annotation["why"].as_str().unwrap().contains("\"fast\""),
        "{annotation}"
    );
    let log = std::fs::read_to_string(p.dir.path().join("hook.log")).unwrap();
    assert!(log.contains("\"fast\""), "{log}");
}

/// A `--cgroup-parent` whose cpuset is CPU 0, and a GPU local to CPU 1: precreate must not
/// narrow the container to CPU 1 (outside what its parent allows, runc would fail to start it);
/// the container starts on CPU 0.
#[test]
fn precreate_never_narrows_outside_the_parent_cgroups_cpuset() {
    let (p, _cfg) = setup("parent", &["cpuplan-precreate.json", "cpuplan.json"]);
    let parent = Path::new("/sys/fs/cgroup/cpuset").join(p.cgroup_parent.trim_start_matches('/'));
    assert!(
        Path::new("/sys/fs/cgroup/cpuset/cpuset.cpus").exists(),
        "this test needs the v1 cpuset hierarchy (this VM's hybrid layout)"
    );
    std::fs::create_dir_all(&parent).unwrap();
    std::fs::write(parent.join("cpuset.mems"), "0").unwrap();
    std::fs::write(parent.join("cpuset.cpus"), "0").unwrap();
    let opts = gpu_one_cpu();
    let init = p.init("parent", &strs(&opts), PROBE);
    assert_eq!(init.rc, 0, "podman create/init: {}", init.err);
    let oci = p.oci_config("parent");
    assert!(
        oci["linux"]["resources"]["cpu"].get("cpus").is_none(),
        "precreate narrowed outside the parent: {}",
        oci["linux"]["resources"]["cpu"]
    );
    let run = p.start("parent");
    assert_eq!(run.rc, 0, "podman start: {}\n{}", run.err, run.out);
    assert!(run.out.contains("cpus=0\n"), "{}", run.out);
    let plan_env = section(&run.out, "planenv");
    assert_eq!(
        line_value(plan_env, "CPUPLAN_MASK"),
        Some("'0'"),
        "{plan_env}"
    );
    let annotation: Value =
        serde_json::from_str(oci["annotations"]["cpuplan.plan"].as_str().unwrap()).unwrap();
    assert_eq!(
        annotation["mask"], "0",
        "precreate planned over the parent's CPUs"
    );
}

/// A topology root of a 224-CPU host (the example host) on this small machine: precreate plans
/// over the CPUs that are really online here, so it never asks runc for CPUs the host lacks.
#[test]
fn precreate_never_asks_for_cpus_the_host_lacks() {
    let (p, cfg) = setup("bigtopo", &["cpuplan-precreate.json"]);
    let mut c: Value = serde_json::from_slice(&std::fs::read(&cfg).unwrap()).unwrap();
    c["topology_root"] = json!(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/host"));
    std::fs::write(&cfg, serde_json::to_vec(&c).unwrap()).unwrap();
    let opts = gpu_one_cpu();
    let init = p.init("bigtopo", &strs(&opts), PROBE);
    assert_eq!(init.rc, 0, "podman create/init: {}", init.err);
    let run = p.start("bigtopo");
    assert_eq!(run.rc, 0, "podman start: {}\n{}", run.err, run.out);
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let online = cpuplan::parse_cpu_list(&online).unwrap();
    let oci = p.oci_config("bigtopo");
    if let Some(cpus) = oci["linux"]["resources"]["cpu"]["cpus"].as_str() {
        let cpus = cpuplan::parse_cpu_list(cpus).unwrap();
        assert!(
            cpus.is_subset(&online),
            "{cpus} outside the host's {online}"
        );
    }
    let annotation: Value =
        serde_json::from_str(oci["annotations"]["cpuplan.plan"].as_str().unwrap()).unwrap();
    let mask = cpuplan::parse_cpu_list(annotation["mask"].as_str().unwrap()).unwrap();
    assert!(
        mask.is_subset(&online),
        "planned over {mask}, the host has {online}"
    );
}

/// With `podman --rootfs DIR` (no tmpfs on /run) the createRuntime stage
/// writes the plan into the host directory `DIR/run/cpuplan`; its poststop stage removes it, so
/// the next container on `DIR` never reads the previous one's plan as its own.
#[test]
fn a_host_directory_rootfs_keeps_no_plan_after_the_container() {
    let (p, _cfg) = setup("hostroot", &["cpuplan.json"]);
    let dir = p.dir.path().join("host-rootfs");
    let cp = std::process::Command::new("cp")
        .arg("-a")
        .arg(p.dir.path().join("rootfs"))
        .arg(&dir)
        .status()
        .unwrap();
    assert!(cp.success());
    let plan_env = dir.join("run/cpuplan/plan.env");
    let run = |name: &str| {
        let c = p.cmd(&[
            "create",
            "--name",
            name,
            "--network=none",
            "--cgroup-parent",
            &p.cgroup_parent,
            "--cpus",
            "1",
            "--rootfs",
            dir.to_str().unwrap(),
            "/bin/sh",
            "-c",
            "if test -e /run/cpuplan/plan.json; then cat /run/cpuplan/plan.json; else echo 'no plan files'; fi",
        ]);
        assert_eq!(c.rc, 0, "podman create: {}", c.err);
        let id = c.out.trim().to_string();
        let r = p.start(name);
        assert_eq!(r.rc, 0, "podman start: {}", r.err);
        let rm = p.cmd(&["rm", name]);
        assert_eq!(rm.rc, 0, "podman rm: {}", rm.err);
        (id, r.out)
    };
    let (id, out) = run("first");
    let plan: Value = serde_json::from_str(out.trim()).expect("the first container's plan.json");
    assert_eq!(plan["container"], id.as_str(), "its own plan");
    assert!(
        !plan_env.exists() && !dir.join("run/cpuplan/plan.json").exists(),
        "the plan outlived the container in {}",
        dir.display()
    );
    let log = std::fs::read_to_string(p.dir.path().join("hook.log")).unwrap();
    assert!(
        log.contains(&format!("container {id}: removed its plan files from ")),
        "{log}"
    );
    // The next container on that directory, the hook no longer registered: no plan at all,
    // not the first one's.
    std::fs::remove_file(p.hooks_dir.join("cpuplan.json")).unwrap();
    let (_, out) = run("second");
    assert_eq!(out.trim(), "no plan files", "{out}");
}
