//! The NRI DaemonSet run as kubelet runs it: the image `scripts/image.sh` builds is imported
//! into the CRI node of `crates/test-support/src/cri/` (`ctr images import`, no registry), and the pod
//! template of the DaemonSet the chart `deploy/helm/cpuplan` renders with
//! `ci/containerd-1.7-values.yaml` (Helm v4 through helm-python-sdk) is turned into CRI calls: RunPodSandbox with the host network and host PID
//! namespace (privileged), each init container run to its end, then the plugin container, with
//! the manifest's image, command, args, privilege and volume mounts. The plugin that plans the
//! pods is the image's static binary, not the test's.
//!
//! The node is relocated under its root `T` (no kubelet here, and the host's own paths stay
//! untouched), so the test does what kubelet does with two changes it names: a hostPath `P`
//! is `T/P` on the host (`O/run/cpuplan` for `/run/cpuplan`) (mounted at the manifest's own `P` in the container), and the
//! ConfigMap's hook.json, written where the volume's files go, sets `nri_dir` to
//! `O/run/cpuplan/nri` (the path the plugin hands the runtime must be the host's, so `O/run/cpuplan`
//! is also mounted at its own path; `O` is the node's directory of the operator's, as the claims
//! directory there must be root's all the way up, which no directory under `/tmp` is) and `topology_root` to the node's fake GPU host (mounted at
//! its own path; a real node's GPUs are in the /sys the privileged container sees).
//! Everything else is the manifest's: the socket `/var/run/nri/nri.sock`, the claims in
//! `/run/cpuplan/claims`, the log `/var/log/cpuplan-hook.log`, the config `/etc/cpuplan/hook.json`.

use common::cri;
use common::helm;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::runc::line_value;
use common::statics::{target_dir, workspace_root};
use cri::{cri as api, gpu_host, quota, section, CriNode, NodeOptions, Pod};
use serde_json::{json, Value};

/// What the workload containers print: their environment, CPUs and plan files.
const PROBE: &str = r#"echo '--- env'; env | sort
echo "--- cpus"; sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status
echo '--- planenv'; cat /dev/cpuplan/plan.env; echo '--- planjson'; cat /dev/cpuplan/plan.json; echo '--- end'"#;

/// The image archive, built once per test binary by `scripts/image.sh --debug`.
fn image() -> &'static PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let out = target_dir().join("image-test");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let built = std::process::Command::new("bash")
            .arg(workspace_root().join("scripts/image.sh"))
            .arg("--debug")
            .arg(&out)
            .current_dir(workspace_root())
            .env("CARGO_TARGET_DIR", target_dir())
            .env("CARGO", cargo)
            .output()
            .expect("run scripts/image.sh");
        assert!(
            built.status.success(),
            "scripts/image.sh failed: {}",
            String::from_utf8_lossy(&built.stderr)
        );
        let path = PathBuf::from(String::from_utf8_lossy(&built.stdout).trim());
        assert!(path.is_file() && path.starts_with(&out), "{path:?}");
        path
    })
}

/// `p` (a node path) under the node root: `/var/run` is `/run`, as on every node; the node's
/// `/run/cpuplan` (the claims directory's parent) is [`run_cpuplan`].
fn on_node(node: &CriNode, p: &str) -> PathBuf {
    let p = p
        .strip_prefix("/var/run/")
        .map_or(p.to_string(), |r| format!("/run/{r}"));
    match p.strip_prefix("/run/cpuplan") {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => {
            run_cpuplan(node).join(rest.trim_start_matches('/'))
        }
        _ => node.path(p.trim_start_matches('/')),
    }
}

/// The node's `/run/cpuplan`: in the node's directory of the operator's, as the claims
/// directory below it must be (none under `/tmp` is).
fn run_cpuplan(node: &CriNode) -> PathBuf {
    node.operator.path().join("run/cpuplan")
}

/// The node with the image imported and containerd 1.7's NRI off, as it ships.
fn node() -> CriNode {
    let node = CriNode::with(NodeOptions {
        nri_disabled: true,
        ..NodeOptions::default()
    });
    node.start();
    let r = node.ctr(&[
        "images",
        "import",
        "--snapshotter",
        "native",
        image().to_str().unwrap(),
    ]);
    assert_eq!(r.rc, 0, "ctr images import: {}{}", r.out, r.err);
    let listed = node.ctr(&["images", "ls", "-q"]);
    assert!(
        listed.out.lines().any(|l| l == helm::image_reference()),
        "{}",
        listed.out
    );
    node
}

/// The rendered route: its DaemonSet and the data of the ConfigMap its config volume names.
struct Rendered {
    ds: Value,
    config_maps: Vec<Value>,
}

fn rendered() -> Rendered {
    let docs = helm::render_route("containerd-1.7");
    Rendered {
        ds: helm::one(&docs, "DaemonSet").clone(),
        config_maps: docs
            .iter()
            .filter(|d| d["kind"] == "ConfigMap")
            .cloned()
            .collect(),
    }
}

/// The host-side config the test reads the claims with: the ConfigMap's, as the node sees it.
fn host_config(node: &CriNode) -> PathBuf {
    node.path("etc/cpuplan-test/hook.json")
}

/// A plugin pod of the DaemonSet, running.
struct PluginPod {
    pod: Pod,
    container: String,
}

/// The DaemonSet's pod `n` run as kubelet runs it: the sandbox, the init containers to their
/// end, then the containers.
fn run_daemonset_pod(node: &CriNode, r: &Rendered, n: usize) -> PluginPod {
    let ds = &r.ds;
    let template = &ds["spec"]["template"];
    let spec = &template["spec"];
    assert_eq!(
        spec["hostNetwork"], true,
        "no CNI here: the pod runs on the host network"
    );
    assert_eq!(spec["hostPID"], true);
    let name = ds["metadata"]["name"].as_str().unwrap();
    let mut pc = node.pod_config(&format!("{name}-{n}"));
    let meta = pc.metadata.as_mut().unwrap();
    meta.namespace = ds["metadata"]["namespace"].as_str().unwrap().into();
    pc.labels = template["metadata"]["labels"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect();
    let sc = pc
        .linux
        .as_mut()
        .unwrap()
        .security_context
        .as_mut()
        .unwrap();
    sc.namespace_options.as_mut().unwrap().pid = api::NamespaceMode::Node as i32;
    sc.privileged = true;
    let pod = node.run_pod(pc, "");

    // The volumes, as kubelet lays them out.
    let mut volumes: Vec<(String, PathBuf)> = Vec::new();
    for v in spec["volumes"].as_array().unwrap() {
        let vname = v["name"].as_str().unwrap().to_string();
        if let Some(path) = v["hostPath"]["path"].as_str() {
            let host = on_node(node, path);
            match v["hostPath"]["type"].as_str() {
                Some("DirectoryOrCreate") => std::fs::create_dir_all(&host).unwrap(),
                Some("FileOrCreate") => {
                    std::fs::create_dir_all(host.parent().unwrap()).unwrap();
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&host)
                        .unwrap();
                }
                other => panic!("hostPath type {other:?} of {vname}"),
            }
            volumes.push((vname, host));
        } else if let Some(cm) = v["configMap"]["name"].as_str() {
            let data = r
                .config_maps
                .iter()
                .find(|d| d["metadata"]["name"] == cm)
                .unwrap_or_else(|| panic!("no ConfigMap {cm}"))["data"]
                .clone();
            let dir = node.path(&format!("var/lib/kubelet/pods/{n}/configmap/{vname}"));
            std::fs::create_dir_all(&dir).unwrap();
            for (file, text) in data.as_object().unwrap() {
                let mut text = text.as_str().unwrap().to_string();
                if file == "hook.json" {
                    text = node_config(node, &text);
                    std::fs::create_dir_all(host_config(node).parent().unwrap()).unwrap();
                    std::fs::write(host_config(node), host_side(node, &text)).unwrap();
                }
                std::fs::write(dir.join(file), text).unwrap();
            }
            volumes.push((vname, dir));
        } else {
            panic!("a volume kind the test does not lay out: {v}");
        }
    }
    let container = |c: &Value| -> api::ContainerConfig {
        let cname = c["name"].as_str().unwrap();
        let mut mounts: Vec<api::Mount> = c["volumeMounts"]
            .as_array()
            .map(|a| a.to_vec())
            .unwrap_or_default()
            .iter()
            .map(|m| {
                let host = &volumes
                    .iter()
                    .find(|(n, _)| m["name"] == n.as_str())
                    .unwrap_or_else(|| panic!("no volume {}", m["name"]))
                    .1;
                api::Mount {
                    container_path: m["mountPath"].as_str().unwrap().into(),
                    host_path: host.display().to_string(),
                    readonly: m["readOnly"] == true,
                    ..Default::default()
                }
            })
            .collect();
        // The relocation's two mounts (see the module's doc).
        for own in [run_cpuplan(node), gpu_host(node.root())] {
            std::fs::create_dir_all(&own).unwrap();
            mounts.push(api::Mount {
                container_path: own.display().to_string(),
                host_path: own.display().to_string(),
                readonly: own != run_cpuplan(node),
                ..Default::default()
            });
        }
        api::ContainerConfig {
            metadata: Some(api::ContainerMetadata {
                name: cname.into(),
                attempt: 0,
            }),
            image: Some(api::ImageSpec {
                image: c["image"].as_str().unwrap().into(),
                ..Default::default()
            }),
            command: helm::argv(c),
            mounts,
            log_path: format!("{cname}.log"),
            linux: Some(api::LinuxContainerConfig {
                security_context: Some(api::LinuxContainerSecurityContext {
                    privileged: c["securityContext"]["privileged"] == true,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    };
    for c in spec["initContainers"].as_array().into_iter().flatten() {
        let ran = node.run_container(&pod, container(c));
        assert_eq!(
            ran.exit_code, 0,
            "init container {}: {}",
            c["name"], ran.log
        );
    }
    let cs = spec["containers"].as_array().unwrap();
    assert_eq!(cs.len(), 1, "the plugin container");
    let id = node.create_container(&pod, container(&cs[0]));
    node.start_container(&id);
    PluginPod { pod, container: id }
}

/// The ConfigMap's hook.json with the node's `nri_dir` and GPU host (see the module's doc).
fn node_config(node: &CriNode, text: &str) -> String {
    let mut cfg: Value = serde_json::from_str(text).expect("the ConfigMap's hook.json");
    cfg["nri_dir"] = json!(run_cpuplan(node).join("nri"));
    cfg["topology_root"] = json!(gpu_host(node.root()));
    serde_json::to_string_pretty(&cfg).unwrap()
}

/// The config as the host sees the paths of the plugin's container.
fn host_side(node: &CriNode, text: &str) -> String {
    let mut cfg: Value = serde_json::from_str(text).unwrap();
    for key in ["claims_dir", "log"] {
        let p = cfg[key].as_str().unwrap().to_string();
        cfg[key] = json!(on_node(node, &p));
    }
    cfg.to_string()
}

/// The plugin's log on the node (the manifest's hostPath).
fn plugin_log(node: &CriNode) -> String {
    std::fs::read_to_string(on_node(node, "/var/log/cpuplan-hook.log")).unwrap_or_default()
}

fn context(node: &CriNode) -> String {
    format!(
        "--- plugin log:\n{}\n--- containerd log:\n{}",
        plugin_log(node),
        node.log_tail()
    )
}

fn wait_until(what: &str, node: &CriNode, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}\n{}",
            context(node)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn synchronized(node: &CriNode) -> usize {
    plugin_log(node)
        .lines()
        .filter(|l| l.contains("nri: synchronized with"))
        .count()
}

fn claims(node: &CriNode) -> Value {
    common::podman::claims_json(&host_config(node))
}

/// The NRI DaemonSet for containerd 1.7 brought up on a node: its init container turns NRI on,
/// containerd is restarted (the operator's step), and the plugin connects.
fn up(node: &CriNode, r: &Rendered) -> PluginPod {
    let before = std::fs::read_to_string(node.config_path()).unwrap();
    let p = run_daemonset_pod(node, r, 0);
    let after = std::fs::read_to_string(node.config_path()).unwrap();
    assert_ne!(before, after, "install --nri imported its drop-in");
    assert!(node.path("etc/containerd/conf.d/cpuplan-nri.toml").exists());
    node.restart();
    wait_until("the plugin from the image to synchronize", node, || {
        synchronized(node) >= 1
    });
    p
}

/// A quota pod's plan: its own environment and plan files, from the plugin.
fn quota_pod(node: &CriNode, name: &str) -> (Pod, cri::Ran) {
    let pod = node.run_pod(node.pod_config(name), "");
    let ran = node.run_container(
        &pod,
        quota(node.container_config("app", PROBE), 100000, 100000),
    );
    assert_eq!(ran.exit_code, 0, "{}\n{}", ran.log, context(node));
    let env: Vec<&str> = section(&ran.log, "env").lines().collect();
    assert!(
        env.contains(&"OMP_NUM_THREADS=1"),
        "{env:?}\n{}",
        context(node)
    );
    let planenv = section(&ran.log, "planenv");
    assert_eq!(
        line_value(planenv, "CPUPLAN_USABLE"),
        Some("'1'"),
        "{planenv}"
    );
    let plan: Value = serde_json::from_str(section(&ran.log, "planjson")).unwrap();
    assert_eq!(plan["container"], ran.id.as_str());
    (pod, ran)
}

#[test]
fn the_nri_daemonset_runs_from_the_image_and_plans_a_quota_pod_and_a_gpu_pod() {
    let node = node();
    let r = rendered();
    let plugin = up(&node, &r);
    // The plugin is the image's binary, not the test's.
    let spec = node.oci_spec(&plugin.container);
    assert_eq!(
        spec["process"]["args"][0], "/opt/cpuplan/cpuplan-nri",
        "{}",
        spec["process"]
    );
    let (pod, ran) = quota_pod(&node, "quota");
    node.remove_container(&ran.id);
    node.remove_pod(&pod);

    // A GPU pod: its GPU (local CPUs 0-1) claimed by the plugin while it runs.
    let gpu = node.run_pod(node.pod_config("gpu"), "");
    let c = node.with_gpu(
        node.container_config("gpu", &format!("{PROBE}; exec sleep 3600")),
        0,
    );
    let (id, log) = node.start_until(&gpu, &c, "--- end");
    let env = section(&log, "planenv");
    assert_eq!(
        line_value(env, "CPUPLAN_DEVICES"),
        Some("'0000:3b:00.0'"),
        "{env}\n{}",
        context(&node)
    );
    let held = claims(&node);
    assert_eq!(held.as_array().map(Vec::len), Some(1), "{held}");
    assert_eq!(held[0]["address"], "0000:3b:00.0");
    assert_eq!(held[0]["holder"]["container"], id.as_str());
    assert_eq!(held[0]["live"], true);
    node.remove_container(&id);
    wait_until("the GPU claim's release", &node, || {
        claims(&node) == json!([])
    });
    node.remove_pod(&gpu);
}

/// The pid of the process that wrote the first line of `log` holding `what`
/// (`… cpuplan-hook[PID]: …`).
fn pid_of(log: &str, what: &str) -> Option<u32> {
    let line = log.lines().find(|l| l.contains(what))?;
    let (_, rest) = line.split_once("cpuplan-hook[")?;
    rest.split_once(']')?.0.parse().ok()
}

/// How many lines of `log` contain `what`.
fn lines_with(log: &str, what: &str) -> usize {
    log.lines().filter(|l| l.contains(what)).count()
}

/// A rollout as the DaemonSet's strategy makes it (maxSurge 1, maxUnavailable 0): a second
/// plugin pod starts while the first runs, then the first stops. The second waits for the
/// first to exit before it connects (one plugin per `nri_dir`), so a pod created during the
/// overlap is planned once, by the first, and starts (two registered instances both adjusting
/// it made containerd refuse it: "plugins \"10-cpuplan\" and \"10-cpuplan\" both tried to set
/// annotation cpuplan.plan"). A GPU pod planned before and one planned during the overlap keep
/// their claims, taken over by the new plugin at its Synchronize (a second GPU pod on the same
/// GPU gets none), pods planned after get their plans from the new plugin, the new plugin pod
/// is not planned by the old plugin, and the claims are released at the end.
#[test]
fn a_rollout_keeps_plans_and_claims() {
    let node = node();
    let r = rendered();
    let old = up(&node, &r);
    let old_pid = pid_of(&plugin_log(&node), "nri: registered as").unwrap();
    let gpu = node.run_pod(node.pod_config("gpu"), "");
    let c = node.with_gpu(
        node.container_config("gpu", &format!("{PROBE}; exec sleep 3600")),
        0,
    );
    let (holder, _) = node.start_until(&gpu, &c, "--- end");
    assert_eq!(claims(&node)[0]["holder"]["container"], holder.as_str());

    // The new pod starts while the old one runs, and waits for it.
    let new = run_daemonset_pod(&node, &r, 1);
    let waiting = "waiting for it to exit before connecting";
    wait_until("the new plugin to wait for the old one", &node, || {
        plugin_log(&node).contains(waiting)
    });
    let new_pid = pid_of(&plugin_log(&node), waiting).unwrap();
    assert_ne!(new_pid, old_pid);
    assert!(
        plugin_log(&node).contains(&format!("another cpuplan plugin (pid {old_pid}) serves")),
        "{}",
        context(&node)
    );
    let spec = node.oci_spec(&new.container);
    assert!(
        spec["annotations"].get("cpuplan.plan").is_none(),
        "the old plugin planned the new plugin's own pod: {}",
        spec["annotations"]
    );
    let plan_mount = spec["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["destination"] == "/run/cpuplan")
        .expect("the DaemonSet's /run/cpuplan");
    assert_eq!(
        plan_mount["source"],
        on_node(&node, "/run/cpuplan").display().to_string(),
        "the new plugin's hostPath /run/cpuplan is its own, not a plan mount over it"
    );

    // During the overlap: a GPU pod (the other GPU) with a volume under the plan directory, so
    // planned env-only, which no second instance would have left alone.
    let during = node.run_pod(node.pod_config("during"), "");
    let vol = node.path("during-volume");
    std::fs::create_dir_all(&vol).unwrap();
    let mut dc = node.with_gpu(
        quota(
            node.container_config("app", &format!("{PROBE}; exec sleep 3600")),
            100000,
            100000,
        ),
        1,
    );
    dc.mounts.push(api::Mount {
        container_path: "/dev/cpuplan/data".into(),
        host_path: vol.display().to_string(),
        ..Default::default()
    });
    let (overlapped, log) = node.start_until(&during, &dc, "--- end");
    let env: Vec<&str> = section(&log, "env").lines().collect();
    assert!(
        env.contains(&"OMP_NUM_THREADS=1") && env.contains(&"CPUPLAN_DEVICES=0000:86:00.0"),
        "{env:?}\n{}",
        context(&node)
    );
    let plog = plugin_log(&node);
    assert_eq!(
        lines_with(&plog, "nri: create during/app"),
        1,
        "planned once: {plog}"
    );
    assert_eq!(
        pid_of(&plog, "nri: create during/app"),
        Some(old_pid),
        "{plog}"
    );
    assert!(
        !node.log().contains("both tried to set"),
        "{}",
        context(&node)
    );
    assert_eq!(synchronized(&node), 1, "the new one has not connected");

    // The old one stops; the new one connects and takes the claims over.
    node.stop_container(&old.container, 10);
    node.remove_container(&old.container);
    node.remove_pod(&old.pod);
    wait_until("the new plugin to synchronize", &node, || {
        synchronized(&node) >= 2
    });
    let exited = format!("the plugin before this one (pid {old_pid}) has exited: connecting");
    assert_eq!(pid_of(&plugin_log(&node), &exited), Some(new_pid));

    // Planned before and during: each still holds its GPU, now under the new plugin, live.
    let held = claims(&node);
    let ctx = || format!("{held}\n{}", context(&node));
    assert_eq!(held.as_array().map(Vec::len), Some(2), "{}", ctx());
    for (claim, (address, container)) in held
        .as_array()
        .unwrap()
        .iter()
        .zip([("0000:3b:00.0", &holder), ("0000:86:00.0", &overlapped)])
    {
        assert_eq!(claim["address"], address, "{}", ctx());
        assert_eq!(
            claim["holder"]["container"],
            container.as_str(),
            "{}",
            ctx()
        );
        assert_eq!(claim["holder"]["pid"], new_pid, "taken over: {}", ctx());
        assert_eq!(claim["live"], true, "{}", ctx());
    }
    let other = node.run_pod(node.pod_config("gpu-other"), "");
    let ran = node.run_container(&other, node.with_gpu(node.container_config("b", PROBE), 0));
    assert_eq!(ran.exit_code, 0, "{}", ran.log);
    let why = line_value(section(&ran.log, "planenv"), "CPUPLAN_WHY").unwrap_or_default();
    assert!(
        why.contains("pins nothing") && why.contains("held by"),
        "{why}\n{}",
        context(&node)
    );
    node.remove_container(&ran.id);
    node.remove_pod(&other);
    // Planned after: by the new plugin.
    let (pod, ran) = quota_pod(&node, "after");
    assert_eq!(
        pid_of(&plugin_log(&node), "nri: create after/app"),
        Some(new_pid)
    );
    node.remove_container(&ran.id);
    node.remove_pod(&pod);
    // The holders' removal releases their claims, through the new plugin.
    node.remove_container(&holder);
    node.remove_container(&overlapped);
    wait_until("the GPU claims' release", &node, || {
        claims(&node) == json!([])
    });
    node.remove_pod(&gpu);
    node.remove_pod(&during);
    node.remove_container(&new.container);
    node.remove_pod(&new.pod);
}

/// The archive itself: `podman load` and `skopeo` read it (no registry), and it holds only the
/// two static binaries, the labels and the entrypoint the manifests run.
#[test]
fn the_image_loads_with_podman_and_skopeo_and_holds_only_the_static_binaries() {
    common::runc::require("image", &[("podman", "podman"), ("skopeo", "skopeo")]);
    let archive = image();
    let t = tempfile::tempdir().unwrap();
    let podman = |args: &[&str]| {
        let out = std::process::Command::new("podman")
            .arg("--root")
            .arg(t.path().join("root"))
            .arg("--runroot")
            .arg(t.path().join("run"))
            .args(["--storage-driver", "vfs"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "podman {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let loaded = podman(&["load", "-i", archive.to_str().unwrap()]);
    assert!(loaded.contains(&helm::image_reference()), "{loaded}");
    let inspect: Value =
        serde_json::from_str(&podman(&["image", "inspect", &helm::image_reference()])).unwrap();
    let config = &inspect[0]["Config"];
    assert_eq!(config["Entrypoint"], json!(["/opt/cpuplan/cpuplan-nri"]));
    let labels = &config["Labels"];
    assert_eq!(
        labels["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0");
    assert!(
        labels["org.opencontainers.image.source"].is_string(),
        "{labels}"
    );
    let _ = std::fs::remove_dir_all(t.path().join("root")); // vfs layers, root-owned
    let out = std::process::Command::new("skopeo")
        .args(["inspect", "--raw"])
        .arg(format!("oci-archive:{}", archive.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let manifest: Value = serde_json::from_slice(&out.stdout).unwrap();
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "{manifest}");

    // The layer: the two binaries, static, and the directories above them.
    let outer = std::fs::File::open(archive).unwrap();
    let digest = layers[0]["digest"]
        .as_str()
        .unwrap()
        .trim_start_matches("sha256:");
    let mut blob = None;
    for e in tar::Archive::new(outer).entries().unwrap() {
        let mut e = e.unwrap();
        if e.path().unwrap() == Path::new("blobs/sha256").join(digest) {
            let mut b = Vec::new();
            std::io::Read::read_to_end(&mut e, &mut b).unwrap();
            blob = Some(b);
        }
    }
    let gz = t.path().join("layer.tar.gz");
    std::fs::write(&gz, blob.expect("the layer blob")).unwrap();
    let layer = t.path().join("layer");
    std::fs::create_dir_all(&layer).unwrap();
    let st = std::process::Command::new("tar")
        .arg("-xzf")
        .arg(&gz)
        .arg("-C")
        .arg(&layer)
        .status()
        .unwrap();
    assert!(st.success(), "the layer is a gzip tar");
    let mut files = Vec::new();
    for e in walk(&layer) {
        files.push(e.strip_prefix(&layer).unwrap().display().to_string());
    }
    files.sort();
    assert_eq!(
        files,
        [
            "opt/cpuplan/cpuplan",
            "opt/cpuplan/cpuplan-exec",
            "opt/cpuplan/cpuplan-hook",
            "opt/cpuplan/cpuplan-nri"
        ]
    );
    for f in &files {
        assert_eq!(
            cpuplan_hook::elf::interpreter(&layer.join(f)).unwrap(),
            None,
            "{f} is static"
        );
    }
}

fn walk(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).unwrap().flatten() {
        if e.file_type().unwrap().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}
