//! `cpuplan-nri` on a Kubernetes-style node: the private containerd 1.7 of
//! `crates/test-support/src/cri/` (CRI and NRI on, no OCI hook registered anywhere) driven through CRI as
//! kubelet drives it, with the plugin started by the test (external mode, connecting to the
//! node's NRI socket) or by containerd from its plugin directory (pre-launched mode).
//!
//! The machine has 2 CPUs, so `step_thread_core auto` never pins a worker here (it needs two
//! cores per GPU on the node and one CPU left unpinned): the GPU tests check what can be
//! observed instead: the claims (`cpuplan claims`), the "held by" reasons, the cpuset
//! narrowed to the GPU's local CPUs, and the environment.

use common::cri;
use common::helm;
use common::nriplugin;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::hookbin::{cpuplan_ok, nri_bin};
use common::procs::processes_running;
use common::runc::line_value;
use cri::{annotations, cri as api, quota, section, Containerd, CriNode, NodeOptions, Pod};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use nriplugin::{
    assert_nri_quiet, claims, config_text, context, nri_dir, plan_json, plans_left, plugin_config,
    wait_until, Plugin, PLUGIN, PROBE, SCOPE, WAIT,
};
use serde_json::{json, Value};

/// The plugin as the chart's DaemonSet runs it, on `node` with `config`: its command line with
/// the node's socket, the config given.
fn plugin_as_daemonset(node: &CriNode, config: &Path) -> Plugin {
    let words = daemonset_argv(&daemonset());
    let mut argv = vec!["--config".to_string(), config.display().to_string()];
    let socket = node.nri_socket().display().to_string();
    let mut rest = words[1..].to_vec();
    let at = rest.iter().position(|w| w == "--socket").unwrap() + 1;
    rest[at] = socket;
    argv.extend(rest);
    let p = Plugin::start(node, argv);
    p.wait_for(node, "nri: synchronized with", 1);
    p
}

fn a_quota_pod_gets_its_env_and_a_read_only_plan_from_the_plugin(c: Containerd) {
    let node = CriNode::on(c);
    let cfg = plugin_config(&node, json!({}));
    node.start();
    let plugin = plugin_as_daemonset(&node, &cfg);
    // The pod annotation reaches the plugin although containerd's pod_annotations is unset.
    let mut pc = node.pod_config("quota");
    pc.annotations = annotations(&[("cpuplan.step-thread-core", "off")]);
    let pod = node.run_pod(pc, "");
    let mut c = quota(node.container_config("app", PROBE), 100000, 100000);
    c.envs.push(api::KeyValue {
        key: "MKL_NUM_THREADS".into(),
        value: "7".into(),
    });
    let ran = node.run_container(&pod, c);
    let ctx = || context(&node, &plugin.log());
    assert_eq!(ran.exit_code, 0, "{}\n{}", ran.log, ctx());

    // The container's own environment, not only plan.env.
    let env: Vec<&str> = section(&ran.log, "env").lines().collect();
    assert!(env.contains(&"OMP_NUM_THREADS=1"), "{env:?}\n{}", ctx());
    assert!(
        env.contains(&"CPUPLAN_PLAN=/dev/cpuplan/plan.json"),
        "{env:?}"
    );
    assert_eq!(
        env.iter()
            .filter(|l| l.starts_with("MKL_NUM_THREADS="))
            .collect::<Vec<_>>(),
        [&"MKL_NUM_THREADS=7"],
        "a variable the container sets is never added"
    );
    // The plan directory: mounted read-only, the plan inside.
    let mounts: Vec<&str> = section(&ran.log, "mounts").lines().collect();
    assert_eq!(mounts.len(), 1, "{mounts:?}");
    let options = mounts[0].split(' ').nth(3).unwrap();
    assert!(options.split(',').any(|o| o == "ro"), "{}", mounts[0]);
    assert!(
        section(&ran.log, "write").contains("refused"),
        "{}",
        ran.log
    );
    let planenv = section(&ran.log, "planenv");
    assert_eq!(
        line_value(planenv, "CPUPLAN_USABLE"),
        Some("'1'"),
        "{planenv}"
    );
    assert_eq!(line_value(planenv, "OMP_NUM_THREADS"), Some("'1'"));
    assert_eq!(line_value(planenv, "CPUPLAN_SETTING"), Some("'off'"));
    let plan = plan_json(&ran.log);
    assert_eq!(plan["container"], ran.id.as_str());
    assert_eq!(plan["inputs"]["config_quota"], 1.0);
    assert_eq!(
        plan["inputs"]["setting_from"], "annotation cpuplan.step-thread-core",
        "{plan}"
    );

    // No OCI hook anywhere: the spec has none, and the pod annotation is not in it either.
    let spec = node.oci_spec(&ran.id);
    assert!(
        spec.get("hooks")
            .is_none_or(|h| h.as_object().is_none_or(|o| o.is_empty())),
        "{}",
        spec["hooks"]
    );
    assert!(spec["annotations"]["cpuplan.step-thread-core"].is_null());
    let annotated: Value =
        serde_json::from_str(spec["annotations"]["cpuplan.plan"].as_str().unwrap()).unwrap();
    assert_eq!(annotated["usable"], 1, "{annotated}");
    let host_dir = nri_dir(&node).join(&ran.id);
    let mount = spec["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["destination"] == "/dev/cpuplan")
        .expect("the plan directory's mount");
    assert_eq!(mount["source"], host_dir.display().to_string());
    assert!(
        plugin.count(&format!(
            "nri: create quota/app ({}): adjusted in",
            &ran.id[..12]
        )) == 1,
        "{}",
        ctx()
    );

    // The container's exit (StopContainer) takes its plan away.
    wait_until("the plan directory to go", ctx, || !host_dir.exists());
    assert!(!nri_dir(&node)
        .join(format!("{}.claims.json", ran.id))
        .exists());
    node.remove_container(&ran.id);
    node.remove_pod(&pod);
    assert_nri_quiet(&node);
}

fn gpus_narrow_the_cpuset_and_the_plugin_s_claims_hold_until_removal(c: Containerd) {
    let node = CriNode::on(c);
    let cfg = plugin_config(&node, json!({}));
    node.start();
    let plugin = Plugin::external(&node, &cfg);
    let ctx = || context(&node, &plugin.log());
    let sleeper = format!("{PROBE}; exec sleep 3600");
    // Pod A holds GPU 0 (local CPUs 0-1) while it exists.
    let pod_a = node.run_pod(node.pod_config("gpu-a"), "");
    let ca = node.with_gpu(node.container_config("a", &sleeper), 0);
    let (a, log) = node.start_until(&pod_a, &ca, "--- end");
    let env = section(&log, "planenv");
    assert_eq!(
        line_value(env, "CPUPLAN_DEVICES"),
        Some("'0000:3b:00.0'"),
        "{env}\n{}",
        ctx()
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
    assert_eq!(held[0]["holder"]["scope"], SCOPE);
    assert_eq!(
        held[0]["holder"]["pid"],
        plugin.pid(),
        "the plugin holds it"
    );
    assert_eq!(held[0]["live"], true);

    // Pod B on the same GPU: planned without it while A exists.
    let pod_b = node.run_pod(node.pod_config("gpu-b"), "");
    let ran = node.run_container(&pod_b, node.with_gpu(node.container_config("b1", PROBE), 0));
    assert_eq!(ran.exit_code, 0, "{}", ran.log);
    let why = line_value(section(&ran.log, "planenv"), "CPUPLAN_WHY").unwrap();
    assert!(
        why.contains("pins nothing") && why.contains("held by another container"),
        "{why}"
    );
    assert!(!why.contains(a.as_str()), "A's id shown to B: {why}");
    assert_eq!(
        claims(&node)[0]["holder"]["container"],
        a.as_str(),
        "{}",
        ctx()
    );
    node.remove_container(&ran.id);

    // A removed: its claim released, its plan directory and record gone.
    node.remove_container(&a);
    wait_until("A's claim to be released", ctx, || {
        claims(&node) == json!([])
    });
    assert!(!nri_dir(&node).join(&a).exists());
    assert!(!nri_dir(&node).join(format!("{a}.claims.json")).exists());
    node.remove_pod(&pod_a);

    // GPU 1 (local CPU 1) with one CPU of quota: the cpuset is narrowed to its local CPU.
    let c = quota(
        node.with_gpu(node.container_config("c", PROBE), 1),
        100000,
        100000,
    );
    let ran = node.run_container(&pod_b, c);
    assert_eq!(ran.exit_code, 0, "{}", ran.log);
    assert_eq!(
        section(&ran.log, "cpus").trim(),
        "1",
        "narrowed: {}",
        ran.log
    );
    assert_eq!(
        node.oci_spec(&ran.id)["linux"]["resources"]["cpu"]["cpus"],
        "1"
    );
    let env = section(&ran.log, "planenv");
    assert_eq!(line_value(env, "CPUPLAN_MASK"), Some("'1'"), "{env}");
    assert_eq!(line_value(env, "CPUPLAN_DEVICES"), Some("'0000:86:00.0'"));
    let plan = plan_json(&ran.log);
    assert_eq!(plan["inputs"]["cpuset"], "1");
    assert_eq!(plan["inputs"]["mask"], "0-1");
    // It claimed GPU 1 while it ran; its exit (StopContainer) released it.
    wait_until("its exit to release its claim", ctx, || {
        plugin.count(&format!(
            "container {}: gone, its plan and claims released",
            ran.id
        )) == 1
    });
    assert_eq!(claims(&node), json!([]));
    node.remove_container(&ran.id);
    node.remove_pod(&pod_b);
    assert_eq!(plans_left(&node), Vec::<String>::new(), "no plan left");
    assert_nri_quiet(&node);
}

/// Kills, when dropped, every process still running the executable at its path.
struct Reaper(PathBuf);

impl Drop for Reaper {
    fn drop(&mut self) {
        for pid in processes_running(&self.0) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

fn a_prelaunched_plugin_plans_with_the_config_the_runtime_gives_it(c: Containerd) {
    let node = CriNode::on(c);
    // The binary itself in containerd's plugin directory, its config in NRI's conf.d.
    let binary = node.path("opt/nri/plugins").join(PLUGIN);
    std::fs::copy(nri_bin(), &binary).unwrap();
    std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
    let _reaper = Reaper(binary.clone());
    let log = node.path("var/log/cpuplan-nri.log");
    std::fs::write(
        node.path("etc/nri/conf.d").join(format!("{PLUGIN}.conf")),
        config_text(&node, json!({})),
    )
    .unwrap();
    // `claims` reads the same config on the host.
    std::fs::create_dir_all(node.path("etc/cpuplan")).unwrap();
    std::fs::write(
        node.path("etc/cpuplan/hook.json"),
        config_text(&node, json!({})),
    )
    .unwrap();
    node.start();
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    let ctx = || context(&node, &read());
    // containerd 1.7 (NRI 0.6) configures a plugin it launches at start but never synchronizes
    // it; 2.1 (NRI 0.8) synchronizes it too.
    wait_until("the launched plugin to be configured", ctx, || {
        read().contains("nri: 10-cpuplan configured by containerd")
    });
    if node.containerd() == Containerd::V2 {
        wait_until("the launched plugin to be synchronized", ctx, || {
            read().contains("nri: synchronized with")
        });
    }
    assert!(
        read().contains("nri: planning with <the runtime's NRI plugin config>"),
        "{}",
        ctx()
    );
    assert!(
        node.log()
            .contains(&format!(r#"plugin \"pre-connected:{PLUGIN}["#)),
        "{}",
        ctx()
    );
    let pids = processes_running(&binary);
    assert_eq!(pids.len(), 1, "one plugin process: {pids:?}");

    let pod = node.run_pod(node.pod_config("launched"), "");
    let c = quota(
        node.with_gpu(
            node.container_config("app", &format!("{PROBE}; exec sleep 3600")),
            0,
        ),
        100000,
        100000,
    );
    let (id, out) = node.start_until(&pod, &c, "--- end");
    let env: Vec<&str> = section(&out, "env").lines().collect();
    assert!(env.contains(&"OMP_NUM_THREADS=1"), "{env:?}\n{}", ctx());
    if node.containerd() == Containerd::V17 {
        assert!(
            !read().contains("nri: synchronized with"),
            "1.7 synchronizes a launched plugin now: docs/nri.md's caveat is stale\n{}",
            ctx()
        );
    }
    assert!(section(&out, "write").contains("refused"), "{out}");
    let held = claims(&node);
    assert_eq!(held[0]["holder"]["container"], id.as_str(), "{held}");
    assert_eq!(
        held[0]["holder"]["pid"], pids[0],
        "the launched plugin holds it"
    );
    assert_eq!(held[0]["live"], true);
    node.remove_container(&id);
    wait_until("the claim to be released", ctx, || {
        claims(&node) == json!([])
    });
    node.remove_pod(&pod);
    assert_nri_quiet(&node);
    // The launched plugin ends with its runtime.
    node.stop_daemon();
    wait_until(
        "the plugin to exit with containerd",
        || format!("{:?} still run", processes_running(&binary)),
        || processes_running(&binary).is_empty(),
    );
}

fn after_a_containerd_restart_the_plugin_keeps_live_claims_and_drops_stale_ones(c: Containerd) {
    let node = CriNode::on(c);
    let cfg = plugin_config(&node, json!({}));
    node.start();
    let plugin = Plugin::external(&node, &cfg);
    let ctx = || context(&node, &plugin.log());
    let pod = node.run_pod(node.pod_config("restart"), "");
    let c = node.with_gpu(
        node.container_config("srv", &format!("{PROBE}; exec sleep 3600")),
        0,
    );
    let (id, _) = node.start_until(&pod, &c, "--- end");

    // What a container removed while the plugin was away leaves: its plan, its record and its
    // claim, held by this plugin (so alive).
    let gone = "0123456789abcdef-gone";
    let dir = nri_dir(&node);
    std::fs::create_dir_all(dir.join(gone)).unwrap();
    std::fs::write(dir.join(gone).join("plan.env"), "CPUPLAN_USABLE='1'\n").unwrap();
    std::fs::write(
        dir.join(format!("{gone}.claims.json")),
        r#"{"claims":["0000:86:00.0"]}"#,
    )
    .unwrap();
    let holder = cpuplan::Holder::of_pid(Path::new("/"), gone, SCOPE, plugin.pid())
        .unwrap()
        .unwrap();
    let claimed = cpuplan::claim_gpus(
        &node.claims_dir(),
        Path::new("/"),
        &holder,
        &["0000:86:00.0".to_string()],
        Duration::from_secs(2),
    )
    .unwrap();
    assert_eq!(claimed, cpuplan::ClaimOutcome::Claimed);
    assert_eq!(claims(&node).as_array().map(Vec::len), Some(2));

    node.restart();
    plugin.wait_for(&node, "nri: synchronized with", 2);
    let log = plugin.log();
    assert_eq!(
        plugin.count("nri: the runtime closed the connection"),
        1,
        "{log}"
    );
    assert!(
        log.contains("synchronized with 1 pods and 1 containers: kept the plans of 1, dropped 1"),
        "{}",
        ctx()
    );
    let held = claims(&node);
    assert_eq!(held.as_array().map(Vec::len), Some(1), "{held}");
    assert_eq!(held[0]["holder"]["container"], id.as_str());
    assert_eq!(held[0]["holder"]["pid"], plugin.pid());
    assert_eq!(held[0]["live"], true);
    assert!(!dir.join(gone).exists() && !dir.join(format!("{gone}.claims.json")).exists());
    assert!(
        dir.join(&id).join("plan.env").is_file(),
        "the live plan stays"
    );
    assert_eq!(
        node.container_status(&id).state,
        api::ContainerState::ContainerRunning as i32
    );
    // The reconnected plugin still follows events.
    node.remove_container(&id);
    wait_until("the claim to be released", ctx, || {
        claims(&node) == json!([])
    });
    node.remove_pod(&pod);
    assert_nri_quiet(&node);
}

/// Runs a container printing its environment in a new pod; its log, which must show it started.
fn run_plain(node: &CriNode, name: &str) -> (Pod, String) {
    let pod = node.run_pod(node.pod_config(name), "");
    let ran = node.run_container(&pod, node.container_config("app", PROBE));
    assert_eq!(ran.exit_code, 0, "{}", ran.log);
    node.remove_container(&ran.id);
    (pod, ran.log)
}

fn pods_start_when_the_plugin_is_killed_or_stalled(c: Containerd) {
    // A short request timeout (default 2 s) keeps the stalled case short.
    let node = CriNode::with(NodeOptions {
        nri_keys: "    plugin_request_timeout = \"500ms\"".into(),
        ..NodeOptions::on(c)
    });
    let cfg = plugin_config(&node, json!({}));
    node.start();
    let first = Plugin::external(&node, &cfg);
    let (pod, log) = run_plain(&node, "planned");
    assert!(
        section(&log, "env").contains("OMP_NUM_THREADS="),
        "{log}\n{}",
        context(&node, &first.log())
    );
    node.remove_pod(&pod);

    // Killed: containerd drops it, and pods start unplanned.
    first.signal(Signal::SIGKILL);
    wait_until(
        "containerd to drop the killed plugin",
        || node.log_tail(),
        || {
            node.log()
                .contains(&format!(r#"connection to plugin \"{PLUGIN}\" closed"#))
        },
    );
    let (pod, log) = run_plain(&node, "after-kill");
    assert!(!section(&log, "env").contains("OMP_NUM_THREADS="), "{log}");
    assert!(section(&log, "mounts").trim().is_empty(), "{log}");
    node.remove_pod(&pod);
    drop(first);

    // Stalled past the request timeout: CreateContainer goes on without it.
    let second = Plugin::external(&node, &cfg);
    let ctx = || context(&node, &second.log());
    second.signal(Signal::SIGSTOP);
    let pod = node.run_pod(node.pod_config("stalled"), "");
    let config = node.container_config("app", PROBE);
    let started = Instant::now();
    let id = node.create_container(&pod, config.clone());
    let took = started.elapsed();
    second.signal(Signal::SIGCONT);
    node.start_container(&id);
    assert_eq!(node.wait_exit(&id, WAIT), 0);
    let log = node.wait_log(&pod, &config, "--- end");
    assert!(!section(&log, "env").contains("OMP_NUM_THREADS="), "{log}");
    assert!(
        took >= Duration::from_millis(500) && took < WAIT,
        "CreateContainer waited for the plugin up to the timeout: {took:?}"
    );
    node.remove_container(&id);
    assert!(
        node.log()
            .contains("failed to handle CreateContainer request"),
        "{}",
        ctx()
    );
    // What the other tests' assert_nri_quiet looks for: here, where the plugin stalled.
    assert!(
        !nriplugin::nri_trouble(&node.log()).is_empty(),
        "the stalled plugin's failure is NRI trouble: {}",
        ctx()
    );
    // Woken, it finds its connection closed, reconnects and synchronizes.
    second.wait_for(&node, "nri: synchronized with", 2);
    assert_eq!(
        second.count("nri: registered as 10-cpuplan"),
        2,
        "{}",
        ctx()
    );
    let (pod2, log) = run_plain(&node, "reconnected");
    assert!(section(&log, "env").contains("OMP_NUM_THREADS="), "{log}");
    node.remove_pod(&pod);
    node.remove_pod(&pod2);
    wait_until("the plugin's plans to go", ctx, || {
        plans_left(&node).is_empty()
    });
}

fn install_nri_turns_nri_on_and_uninstall_nri_removes_exactly_it(c: Containerd) {
    // The node's config has NRI's section with disable = true, as containerd 1.7 ships it.
    let node = CriNode::with(NodeOptions {
        nri_disabled: true,
        ..NodeOptions::on(c)
    });
    let cfg = plugin_config(&node, json!({}));
    let etc = node.path("etc/containerd");
    let before = cri::files(&etc);
    let n = cpuplan_hook::install::nri::Nri {
        config: node.config_path(),
    };
    let said = cpuplan_hook::install::nri::install(&n).unwrap();
    assert!(
        said.iter().any(|l| l.contains("restart containerd")),
        "{said:?}"
    );
    let drop_in = std::fs::read_to_string(n.drop_in()).unwrap();
    let socket = format!("socket_path = \"{}\"", node.nri_socket().display());
    match c {
        // 1.7 replaces the section with the drop-in's: it carries the node's own.
        Containerd::V17 => assert!(
            drop_in.contains(&socket),
            "the node's own NRI section: {drop_in}"
        ),
        // 2.x merges key by key: the drop-in says only `disable = false` (and the socket
        // stays the node's, as the plugin connecting there below shows).
        Containerd::V2 => assert!(
            drop_in.contains("version = 3")
                && drop_in.contains("disable = false")
                && !drop_in.contains("socket_path"),
            "a version 3 drop-in of NRI's switch alone: {drop_in}"
        ),
    }
    node.start();
    assert!(
        node.log().contains("created NRI interface"),
        "{}",
        node.log_tail()
    );
    let plugin = Plugin::external(&node, &cfg);
    let pod = node.run_pod(node.pod_config("nri-on"), "");
    let ran = node.run_container(
        &pod,
        quota(node.container_config("app", PROBE), 100000, 100000),
    );
    assert!(
        section(&ran.log, "env").contains("OMP_NUM_THREADS=1"),
        "{}\n{}",
        ran.log,
        context(&node, &plugin.log())
    );
    node.remove_container(&ran.id);
    node.remove_pod(&pod);
    assert_nri_quiet(&node);
    drop(plugin);

    // The command line's uninstall, under the same root prefix.
    let root = node.root().to_str().unwrap().to_string();
    let text = cpuplan_ok(&cfg, &["uninstall", "--nri", "--root-prefix", &root]);
    assert!(
        text.contains(&format!("removed {}", n.drop_in().display())),
        "{text}"
    );
    assert!(before == cri::files(&etc), "etc/containerd as it was");
    node.restart();
    assert!(
        !node
            .log()
            .rsplit("starting containerd")
            .next()
            .unwrap()
            .contains("created NRI interface"),
        "NRI is off again:\n{}",
        node.log_tail()
    );
}

/// The NRI plugin's DaemonSet as the chart renders it with its defaults (tests/packaging/kubernetes.rs
/// checks it; tests/cri/daemonset.rs runs it from the image).
fn daemonset() -> Value {
    helm::one(&helm::render(&json!({})), "DaemonSet").clone()
}

/// The plugin container of `ds`.
fn plugin_container(ds: &Value) -> &Value {
    let cs = ds["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    assert_eq!(cs.len(), 1, "one container: the plugin");
    &cs[0]
}

/// The plugin container's command line (command and args).
fn daemonset_argv(ds: &Value) -> Vec<String> {
    let c = plugin_container(ds);
    ["command", "args"]
        .iter()
        .flat_map(|k| c[*k].as_array().cloned().unwrap_or_default())
        .map(|w| w.as_str().unwrap().to_string())
        .collect()
}

crate::on_both!(
    a_quota_pod_gets_its_env_and_a_read_only_plan_from_the_plugin,
    gpus_narrow_the_cpuset_and_the_plugin_s_claims_hold_until_removal,
    a_prelaunched_plugin_plans_with_the_config_the_runtime_gives_it,
    after_a_containerd_restart_the_plugin_keeps_live_claims_and_drops_stale_ones,
    pods_start_when_the_plugin_is_killed_or_stalled,
    install_nri_turns_nri_on_and_uninstall_nri_removes_exactly_it,
);
