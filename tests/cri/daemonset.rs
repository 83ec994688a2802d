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
//! `/run/cpuplan/claims`, the config `/etc/cpuplan/hook.json`, the log on stderr only (read from
//! each plugin container's CRI log, as kubelet keeps it).

use common::cri;
use common::helm;

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::runc::line_value;
use common::statics::{target_dir, workspace_root};
use cri::{cri as api, gpu_host, quota, section, CriNode, NodeOptions, Pod};
use serde_json::{json, Value};

mod archive;
mod removal;
mod rollout;

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
            .env_remove("IMAGE_SOURCE")
            .env_remove("IMAGE_NAME")
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
    if spec["hostPID"] == true {
        sc.namespace_options.as_mut().unwrap().pid = api::NamespaceMode::Node as i32;
    }
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
    assert_eq!(cs.len(), 1, "the plugin or keep-alive container");
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
    let p = cfg["claims_dir"].as_str().unwrap().to_string();
    cfg["claims_dir"] = json!(on_node(node, &p));
    assert_eq!(
        cfg["log"], "stderr",
        "the chart's plugin logs to stderr only"
    );
    cfg.to_string()
}

/// The plugins' log: what every plugin container of the node wrote to stderr, from the CRI
/// logs kubelet would keep (`<pod log dir>/plugin.log`, CRI's timestamp and stream stripped),
/// the pods in the order they ran.
fn plugin_log(node: &CriNode) -> String {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(node.path("var/log/pods"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    dirs.sort();
    let mut out = String::new();
    for d in dirs {
        let text = std::fs::read_to_string(d.join("plugin.log")).unwrap_or_default();
        for line in text.lines() {
            let mut f = line.splitn(4, ' ');
            let (_ts, _stream, tag, msg) = (f.next(), f.next(), f.next(), f.next());
            out.push_str(msg.unwrap_or(""));
            if tag != Some("P") {
                out.push('\n');
            }
        }
    }
    out
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
