//! A Kubernetes node in CI: containerd 1.7's CRI plugin driven as kubelet drives it
//! (RunPodSandbox, CreateContainer, StartContainer, Stop/Remove), the hook registered by
//! `cpuplan install --containerd` into the private node's root.
//!
//! The machine has 2 CPUs, so `step_thread_core auto` never pins a worker here (it keeps a
//! core for the API server and one for the pools); the GPU tests check the claims, the cpuset
//! rule and the plan's reasons instead.

use common::cri;
use common::cri_hook;
use common::helm;

use std::process::Command;
use std::time::{Duration, Instant};

use common::hookbin::{cpuplan_json, cpuplan_ok};
use common::runc::line_value;
use common::statics::static_cpuplan;
use cri::{annotations, cri as api, quota, section, Containerd, CriNode, NodeOptions};
use cri_hook::{claims, hook_config, hook_log, hooked, install, plan_json, PROBE};
use serde_json::{json, Value};

fn quota_container_sees_its_plan(node: &CriNode) {
    let pod = node.run_pod(node.pod_config("quota"), "");
    let c = quota(node.container_config("srv", PROBE), 50000, 100000);
    let ran = node.run_container(&pod, c);
    assert_eq!(ran.exit_code, 0, "{}", ran.log);
    let env = section(&ran.log, "planenv");
    assert_eq!(line_value(env, "CPUPLAN_USABLE"), Some("'1'"), "{env}");
    assert_eq!(line_value(env, "OMP_NUM_THREADS"), Some("'1'"), "{env}");
    let plan = plan_json(&ran.log);
    assert_eq!(plan["container"], ran.id.as_str());
    assert_eq!(plan["inputs"]["config_quota"], 0.5);
    node.remove_container(&ran.id);
    node.remove_pod(&pod);
    let log = hook_log(node);
    assert!(log.contains(&format!("container {}: pid", ran.id)), "{log}");
    assert!(
        log.contains(&format!(
            "container {}: stopped, released 0 GPU claim",
            ran.id
        )),
        "poststop ran when the container was removed: {log}"
    );
}

fn a_quota_container_sees_its_plan_through_cri(c: Containerd) {
    let node = hooked(NodeOptions::on(c), json!({}));
    // NRI is on, its socket under the node (the NRI tests' plugins connect there).
    assert!(node.nri_socket().exists(), "{}", node.log_tail());
    quota_container_sees_its_plan(&node);
}

fn kubelet_s_pod_cgroup_quota_and_a_guaranteed_cpuset(c: Containerd) {
    let node = hooked(NodeOptions::on(c), json!({}));
    // Burstable: the pod's cgroup holds the quota (kubelet sets it); the container has none.
    let mut cfg = node.pod_config("burstable");
    let uid = cfg.metadata.as_ref().unwrap().uid.clone();
    let parent = node.pod_cgroup(Some("burstable"), &uid, Some((50000, 100000)));
    cfg.linux.as_mut().unwrap().cgroup_parent = parent.clone();
    let pod = node.run_pod(cfg, "");
    let ran = node.run_container(&pod, node.container_config("app", PROBE));
    assert_eq!(ran.exit_code, 0, "{}", ran.log);
    let spec = node.oci_spec(&ran.id);
    assert_eq!(
        spec["linux"]["cgroupsPath"],
        format!("{parent}/{}", ran.id),
        "the container's cgroup is below the pod's"
    );
    assert!(spec["linux"]["resources"]["cpu"]["quota"].is_null());
    let env = section(&ran.log, "planenv");
    assert_eq!(line_value(env, "CPUPLAN_USABLE"), Some("'1'"), "{env}");
    assert_eq!(line_value(env, "OMP_NUM_THREADS"), Some("'1'"), "{env}");
    let plan = plan_json(&ran.log);
    assert_eq!(plan["inputs"]["config_quota"], Value::Null);
    assert_eq!(
        plan["inputs"]["cgroup_quota"], 0.5,
        "planned from the pod's quota"
    );
    node.remove_container(&ran.id);
    node.remove_pod(&pod);

    // Guaranteed: the pod's cgroup sits under /kubepods; the container has an exclusive cpuset.
    let mut cfg = node.pod_config("guaranteed");
    let uid = cfg.metadata.as_ref().unwrap().uid.clone();
    let parent = node.pod_cgroup(None, &uid, Some((100000, 100000)));
    assert_eq!(parent, format!("/kubepods/pod{uid}"));
    cfg.linux.as_mut().unwrap().cgroup_parent = parent;
    let pod = node.run_pod(cfg, "");
    let mut c = quota(node.container_config("app", PROBE), 100000, 100000);
    c.linux
        .as_mut()
        .unwrap()
        .resources
        .as_mut()
        .unwrap()
        .cpuset_cpus = "1".into();
    let ran = node.run_container(&pod, c);
    assert_eq!(ran.exit_code, 0, "{}", ran.log);
    assert!(ran.log.contains("cpus=1\n"), "{}", ran.log);
    let env = section(&ran.log, "planenv");
    assert_eq!(line_value(env, "CPUPLAN_MASK"), Some("'1'"), "{env}");
    assert_eq!(line_value(env, "CPUPLAN_USABLE"), Some("'1'"), "{env}");
    assert_eq!(plan_json(&ran.log)["inputs"]["config_cpus"], "1");
    node.remove_container(&ran.id);
    node.remove_pod(&pod);
}

fn the_pod_annotation_reaches_the_hook_only_where_pod_annotations_lists_it(c: Containerd) {
    // "bare" runs the same base spec without pod_annotations: containerd drops the annotation.
    let mut opts = NodeOptions::on(c);
    opts.runtimes.push((
        "bare".into(),
        "        base_runtime_spec = \"@ROOT@/etc/containerd/cpuplan-base-spec.json\"".into(),
    ));
    let node = CriNode::with(opts);
    hook_config(&node, json!({}));
    install(&node, &[]);
    node.start();
    for (handler, setting, from) in [
        ("", "'off'", "annotation cpuplan.step-thread-core"),
        ("bare", "'auto'", "hook config"),
    ] {
        let mut cfg = node.pod_config("annotated");
        cfg.annotations = annotations(&[("cpuplan.step-thread-core", "off")]);
        let pod = node.run_pod(cfg, handler);
        let ran = node.run_container(&pod, node.container_config("app", PROBE));
        assert_eq!(ran.exit_code, 0, "{}", ran.log);
        let env = section(&ran.log, "planenv");
        assert_eq!(
            line_value(env, "CPUPLAN_SETTING"),
            Some(setting),
            "{handler}: {env}"
        );
        assert_eq!(
            plan_json(&ran.log)["inputs"]["setting_from"],
            from,
            "{handler}"
        );
        let spec = node.oci_spec(&ran.id);
        assert!(
            spec["hooks"]["createRuntime"].is_array(),
            "{handler}: the hook is registered"
        );
        node.remove_container(&ran.id);
        node.remove_pod(&pod);
    }
}

fn gpus_through_cri_devices_narrow_the_cpuset_and_claims_hold_until_removal(c: Containerd) {
    let node = hooked(NodeOptions::on(c), json!({}));
    let sleeper = format!("{PROBE}; exec sleep 3600");
    // Pod A holds GPU 0 (local CPUs 0-1) while it runs.
    let pod_a = node.run_pod(node.pod_config("gpu-a"), "");
    let ca = node.with_gpu(node.container_config("a", &sleeper), 0);
    let (a, log) = node.start_until(&pod_a, &ca, "--- end");
    let env = section(&log, "planenv");
    assert_eq!(
        line_value(env, "CPUPLAN_DEVICES"),
        Some("'0000:3b:00.0'"),
        "{env}"
    );
    let why = line_value(env, "CPUPLAN_WHY").unwrap();
    assert!(
        why.contains("nothing pinned") && !why.contains("held by"),
        "{why}"
    );
    let held = claims(&node);
    assert_eq!(held.as_array().map(Vec::len), Some(1), "{held}");
    assert_eq!(held[0]["address"], "0000:3b:00.0");
    assert_eq!(held[0]["holder"]["container"], a.as_str());
    assert_eq!(held[0]["live"], true);

    // Pod B on the same GPU: planned without it while A lives.
    let pod_b = node.run_pod(node.pod_config("gpu-b"), "");
    let ran = node.run_container(&pod_b, node.with_gpu(node.container_config("b1", PROBE), 0));
    assert_eq!(ran.exit_code, 0, "{}", ran.log);
    let why = line_value(section(&ran.log, "planenv"), "CPUPLAN_WHY")
        .unwrap()
        .to_string();
    assert!(
        why.contains("pins nothing") && why.contains("held by another container"),
        "{why}"
    );
    assert!(!why.contains(a.as_str()), "A's id shown to B: {why}");
    assert!(
        !section(&ran.log, "planjson").contains(a.as_str()),
        "A's id in B's plan.json: {}",
        ran.log
    );
    assert!(
        hook_log(&node).contains(&format!("is held by live container {a} (pid ")),
        "the host log names the holder: {}",
        hook_log(&node)
    );
    assert_eq!(claims(&node)[0]["holder"]["container"], a.as_str());
    node.remove_container(&ran.id);

    // A removed: its poststop released the claim, and B's next container takes it.
    node.remove_container(&a);
    node.remove_pod(&pod_a);
    assert_eq!(claims(&node), json!([]), "removal releases the claim");
    let cb = node.with_gpu(node.container_config("b2", &sleeper), 0);
    let (b2, log) = node.start_until(&pod_b, &cb, "--- end");
    assert!(!line_value(section(&log, "planenv"), "CPUPLAN_WHY")
        .unwrap()
        .contains("held by"));
    assert_eq!(claims(&node)[0]["holder"]["container"], b2.as_str());
    node.remove_container(&b2);

    // GPU 1 (local CPU 1) with one CPU of quota: the cpuset is narrowed to its local CPU.
    let ran = node.run_container(
        &pod_b,
        quota(
            node.with_gpu(node.container_config("c", PROBE), 1),
            100000,
            100000,
        ),
    );
    assert_eq!(ran.exit_code, 0, "{}", ran.log);
    assert!(ran.log.contains("cpus=1\n"), "narrowed: {}", ran.log);
    let env = section(&ran.log, "planenv");
    assert_eq!(line_value(env, "CPUPLAN_MASK"), Some("'1'"), "{env}");
    assert_eq!(line_value(env, "CPUPLAN_DEVICES"), Some("'0000:86:00.0'"));
    let plan = plan_json(&ran.log);
    assert_eq!(plan["inputs"]["cpuset"], "1");
    assert_eq!(plan["inputs"]["mask"], "0-1");
    node.remove_container(&ran.id);
    node.remove_pod(&pod_b);
    assert_eq!(claims(&node), json!([]));
}

fn a_claim_survives_a_containerd_restart_and_poststop_still_releases_it(c: Containerd) {
    let node = hooked(NodeOptions::on(c), json!({}));
    let pod = node.run_pod(node.pod_config("restart"), "");
    let c = node.with_gpu(
        node.container_config("srv", &format!("{PROBE}; exec sleep 3600")),
        0,
    );
    let (id, _) = node.start_until(&pod, &c, "--- end");
    let before = node.daemon_pid();
    node.restart();
    assert_ne!(node.daemon_pid(), before, "a new containerd");
    assert_eq!(
        node.container_status(&id).state,
        api::ContainerState::ContainerRunning as i32,
        "the container runs on across the restart"
    );
    let held = claims(&node);
    assert_eq!(held[0]["holder"]["container"], id.as_str(), "{held}");
    assert_eq!(held[0]["live"], true);
    node.stop_container(&id, 2);
    assert_eq!(
        node.container_status(&id).state,
        api::ContainerState::ContainerExited as i32
    );
    // containerd deletes the exited task (runc delete runs poststop) as it handles the exit.
    let deadline = Instant::now() + Duration::from_secs(20);
    while claims(&node) != json!([]) {
        assert!(
            Instant::now() < deadline,
            "poststop did not release the claim after the restart: {}\n{}",
            claims(&node),
            hook_log(&node)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        hook_log(&node).contains(&format!("container {id}: stopped, released 1 GPU claim")),
        "{}",
        hook_log(&node)
    );
    node.remove_container(&id);
    node.remove_pod(&pod);
}

fn the_pause_sandbox_never_runs_the_hook(c: Containerd) {
    // on_error deny and a setting the hook rejects: a hook run on the sandbox would fail it.
    let node = hooked(NodeOptions::on(c), json!({"on_error": "deny"}));
    let mut cfg = node.pod_config("sandbox");
    cfg.annotations = annotations(&[("cpuplan.step-thread-core", "fast")]);
    let pod = node.run_pod(cfg, "");
    let sandbox = node.oci_spec(&pod.id);
    assert_eq!(
        sandbox["annotations"]["cpuplan.step-thread-core"], "fast",
        "the sandbox's spec carries the pod annotation"
    );
    assert!(
        sandbox
            .get("hooks")
            .is_none_or(|h| h.as_object().is_none_or(|o| o.is_empty())),
        "containerd 1.7 gives the sandbox no base_runtime_spec hooks: {}",
        sandbox["hooks"]
    );
    // The app container runs the hook, which refuses the setting.
    let id = node.create_container(&pod, node.container_config("app", "echo ran"));
    assert!(node.oci_spec(&id)["hooks"]["createRuntime"].is_array());
    let e = node
        .try_start_container(&id)
        .expect_err("deny refuses the container");
    assert!(e.message().contains("fast"), "{}", e.message());
    let log = hook_log(&node);
    assert!(
        !log.contains(&pod.id),
        "the hook never saw the sandbox: {log}"
    );
    assert!(log.contains(&format!("container {id}")), "{log}");
    assert_eq!(claims(&node), json!([]));
    node.remove_container(&id);
    node.remove_pod(&pod);
}

/// The spec `id` got with its ids, uids and hooks taken out.
fn normalized(node: &CriNode, id: &str, words: &[&str]) -> Value {
    let mut s = node.oci_spec(id);
    s.as_object_mut().unwrap().remove("hooks");
    // The sandbox's pid in the namespace paths.
    for ns in s["linux"]["namespaces"].as_array_mut().unwrap() {
        if ns.get("path").is_some() {
            ns["path"] = json!(format!("/proc/<pid>/ns/{}", ns["type"].as_str().unwrap()));
        }
    }
    let mut text = s.to_string();
    for (i, w) in words.iter().enumerate() {
        text = text.replace(w, &format!("<{i}>"));
    }
    serde_json::from_str(&text).unwrap()
}

fn install_derives_the_base_spec_and_uninstall_removes_exactly_what_it_wrote(c: Containerd) {
    let mut opts = NodeOptions::on(c);
    opts.runtimes.push(("plain".into(), String::new()));
    let node = CriNode::with(opts);
    let cfg = hook_config(&node, json!({}));
    let etc = node.path("etc/containerd");
    let before = cri::files(&etc);
    let out = install(&node, &["--containerd-runtimes", "runc"]);
    assert!(out.contains("restart containerd"), "{out}");
    assert!(
        out.contains(&format!("edited {}", node.config_path().display())),
        "{out}"
    );
    // The base spec is the runtime's default spec (`ctr oci spec` less the default rlimits,
    // which CRI drops without a base spec) plus the hooks.
    let spec: Value =
        serde_json::from_slice(&std::fs::read(etc.join("cpuplan-base-spec.json")).unwrap())
            .unwrap();
    let mut bare = spec.clone();
    bare.as_object_mut().unwrap().remove("hooks");
    let mut default = node.ctr_default_spec();
    assert!(default["process"]["rlimits"].is_array(), "{default}");
    default["process"]
        .as_object_mut()
        .unwrap()
        .remove("rlimits");
    assert_eq!(bare, default, "the spec apart from hooks");
    let binary = node.path("usr/local/libexec/cpuplan/cpuplan-hook");
    for stage in ["createRuntime", "poststop"] {
        assert_eq!(spec["hooks"][stage][0]["path"], json!(binary));
        assert_eq!(
            spec["hooks"][stage][0]["args"],
            json!(["cpuplan-hook", "--config", cfg, "hook", stage])
        );
    }
    // A second install changes nothing.
    let once = cri::files(&etc);
    install(&node, &["--containerd-runtimes", "runc"]);
    assert!(once == cri::files(&etc), "a second install changed files");

    node.start();
    // containerd loaded the drop-in: CRI's own view of its config.
    let status = node.call("Status", |mut c| async move {
        c.status(api::StatusRequest { verbose: true }).await
    });
    let config: Value = serde_json::from_str(&status.info["config"]).unwrap();
    let runc = &config["containerd"]["runtimes"]["runc"];
    assert_eq!(
        runc["baseRuntimeSpec"],
        json!(etc.join("cpuplan-base-spec.json"))
    );
    assert_eq!(runc["PodAnnotations"], json!(["cpuplan.*"]), "{runc}");
    assert_eq!(
        config["containerd"]["runtimes"]["plain"]["baseRuntimeSpec"],
        ""
    );
    assert_eq!(
        config["restrictOOMScoreAdj"], true,
        "the CRI section was carried over"
    );
    // A container of the hooked runtime gets the spec a plain one gets, plus the hooks.
    let mut specs = Vec::new();
    let mut words = Vec::new();
    for handler in ["runc", "plain"] {
        let pod = node.run_pod(node.pod_config("same"), handler);
        let ran = node.run_container(&pod, node.container_config("app", "true"));
        assert_eq!(ran.exit_code, 0, "{}", ran.log);
        let uid = pod.config.metadata.as_ref().unwrap().uid.clone();
        words.extend([ran.id.clone(), pod.id.clone(), uid]);
        specs.push((ran.id.clone(), pod));
    }
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    let hooked = normalized(&node, &specs[0].0, &w[..3]);
    let plain = normalized(&node, &specs[1].0, &w[3..]);
    assert_eq!(hooked, plain, "the base spec changes nothing but the hooks");
    assert!(node.oci_spec(&specs[0].0)["hooks"]["poststop"].is_array());
    assert!(node.oci_spec(&specs[1].0).get("hooks").is_none());
    for (id, pod) in &specs {
        node.remove_container(id);
        node.remove_pod(pod);
    }

    let out = Command::new(static_cpuplan())
        .args(["uninstall", "--containerd", "--root-prefix"])
        .arg(node.root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        before == cri::files(&etc),
        "uninstall left etc/containerd as it found it"
    );
    assert!(!binary.exists());
}

fn the_daemonset_s_install_registers_the_hook_on_a_node(c: Containerd) {
    // The hook route's DaemonSet as the chart renders it with ci/hook-containerd-values.yaml.
    let docs = helm::render_route("hook-containerd");
    let ds = helm::one(&docs, "DaemonSet");
    let init = ds["spec"]["template"]["spec"]["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "install")
        .expect("the install init container")
        .clone();
    let mut words = helm::argv(&init);
    assert_eq!(words[0], helm::CLI_BIN, "{words:?}");
    let node = CriNode::on(c);
    // What an operator's ConfigMap would hold; install keeps an existing config.
    hook_config(&node, json!({}));
    // The node's root as the init container sees it at /host: here, a root holding just this
    // machine's ctr and the libraries it loads (hard links), which install runs chrooted; the
    // node's paths through the root prefix.
    let host = node.path("host-root");
    words[0] = static_cpuplan().display().to_string();
    let at = words.iter().position(|w| w == "--ctr-root").unwrap() + 1;
    words[at] = host.display().to_string();
    words.extend(["--root-prefix".into(), node.root().display().to_string()]);
    let script = words.join(" ");
    let run = || Command::new(&words[0]).args(&words[1..]).output().unwrap();
    std::fs::create_dir_all(&host).unwrap();
    let empty = run();
    assert!(
        !empty.status.success() && String::from_utf8_lossy(&empty.stderr).contains("no ctr"),
        "ctr is looked for under --ctr-root only: {}",
        String::from_utf8_lossy(&empty.stderr)
    );
    node.ctr_root(&host);
    let out = run();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    node.start();
    quota_container_sees_its_plan(&node);
}

/// `cpuplan explain --pid PID --json` with the node's hook config.
fn explain_pid(node: &CriNode, pid: &Value) -> Value {
    let pid = pid.to_string();
    cpuplan_json(
        &node.path("etc/cpuplan/hook.json"),
        &["explain", "--json", "--pid", &pid],
    )
}

/// The text `explain --pid PID` prints.
fn explain_pid_text(node: &CriNode, pid: &Value) -> String {
    let pid = pid.to_string();
    cpuplan_ok(
        &node.path("etc/cpuplan/hook.json"),
        &["explain", "--pid", &pid],
    )
}

fn kubelet_s_update_makes_the_hook_s_plan_stale_and_claims_and_explain_say_so(c: Containerd) {
    let node = hooked(NodeOptions::on(c), json!({}));
    let pod = node.run_pod(node.pod_config("stale"), "");
    // GPU 1 (local CPU 1) with one CPU of quota: the hook narrows the cpuset to CPU 1.
    let cfg = quota(
        node.with_gpu(node.container_config("srv", "exec sleep 3600"), 1),
        100000,
        100000,
    );
    let id = node.create_container(&pod, cfg);
    node.start_container(&id);
    let held = claims(&node);
    assert_eq!(held[0]["holder"]["container"], id.as_str(), "{held}");
    let pid = held[0]["holder"]["pid"].clone();

    // The control: nothing changed since createRuntime, so the plan is current.
    assert_eq!(held[0]["plan"]["stale"], false, "{held}");
    assert_eq!(held[0]["plan"]["drifts"], json!([]), "{held}");
    let e = explain_pid(&node, &pid);
    assert_eq!(e["stale"], false, "{e}");
    assert_eq!(e["now"]["cpuset"], "1", "{e}");
    assert_eq!(e["plan"]["container"], id.as_str(), "{e}");
    assert!(explain_pid_text(&node, &pid).contains("plan: current"));

    // kubelet's CPU manager (static policy) sets the shared pool: the hook never sees it.
    node.update_container_resources(
        &id,
        api::LinuxContainerResources {
            cpuset_cpus: "0-1".into(),
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("update: {e}\n{}", node.log_tail()));
    let e = explain_pid(&node, &pid);
    assert_eq!(e["stale"], true, "{e}");
    assert_eq!(
        e["drifts"],
        json!([{"what": "cpuset", "now": "0-1", "plan": "1"}]),
        "{e}"
    );
    let text = explain_pid_text(&node, &pid);
    assert!(text.contains("plan: stale: cpuset 0-1 (plan 1)"), "{text}");
    let held = claims(&node);
    assert_eq!(held[0]["plan"]["stale"], true, "{held}");
    assert_eq!(held[0]["plan"]["drifts"][0]["now"], "0-1", "{held}");
    let text = claims_text(&node);
    assert!(
        text.contains(&format!("container {id}"))
            && text.contains("plan stale: cpuset 0-1 (plan 1)"),
        "{text}"
    );

    // An in-place resize to 2 CPUs: the quota drift is said too.
    node.update_container_resources(
        &id,
        api::LinuxContainerResources {
            cpu_quota: 200000,
            cpu_period: 100000,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("update: {e}\n{}", node.log_tail()));
    let e = explain_pid(&node, &pid);
    let drifts = e["drifts"].as_array().unwrap();
    assert!(
        drifts.contains(&json!({"what": "quota", "now": 2.0, "plan": 1.0})),
        "{e}"
    );
    node.remove_container(&id);
    node.remove_pod(&pod);
    assert_eq!(claims(&node), json!([]));
}

/// `cpuplan claims` (text) with the node's hook config.
fn claims_text(node: &CriNode) -> String {
    cpuplan_ok(&node.path("etc/cpuplan/hook.json"), &["claims"])
}

crate::on_both!(
    kubelet_s_update_makes_the_hook_s_plan_stale_and_claims_and_explain_say_so,
    a_quota_container_sees_its_plan_through_cri,
    kubelet_s_pod_cgroup_quota_and_a_guaranteed_cpuset,
    the_pod_annotation_reaches_the_hook_only_where_pod_annotations_lists_it,
    gpus_through_cri_devices_narrow_the_cpuset_and_claims_hold_until_removal,
    a_claim_survives_a_containerd_restart_and_poststop_still_releases_it,
    the_pause_sandbox_never_runs_the_hook,
    install_derives_the_base_spec_and_uninstall_removes_exactly_what_it_wrote,
    the_daemonset_s_install_registers_the_hook_on_a_node,
);

fn cri_keys_in_version_2_names_reach_the_cri_runtime(c: Containerd) {
    // The GPU path tests' keys (crates/test-support/src/gpu_paths.rs): the CRI plugin's table on 1.7, the
    // CRI runtime's on 2.x.
    let node = CriNode::with(NodeOptions {
        cri_keys: "    enable_cdi = true\n    cdi_spec_dirs = [\"@ROOT@/etc/cdi\"]\n".into(),
        ..NodeOptions::on(c)
    });
    node.start();
    let status = node.call("Status", |mut c| async move {
        c.status(api::StatusRequest { verbose: true }).await
    });
    let config: Value = serde_json::from_str(&status.info["config"]).unwrap();
    assert_eq!(config["enableCDI"], true, "{config}");
    assert_eq!(
        config["cdiSpecDirs"],
        json!([node.path("etc/cdi")]),
        "{config}"
    );
    assert_eq!(config["restrictOOMScoreAdj"], true, "{config}");
}

crate::on_both!(cri_keys_in_version_2_names_reach_the_cri_runtime);
