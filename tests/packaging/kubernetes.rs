//! The Helm chart `deploy/helm/cpuplan` as Helm renders it (helm-python-sdk, Helm v4's library,
//! which scripts/test.sh installs): every documented values file renders and lints; one
//! DaemonSet per route (one per pool), the image set once, the plugin run with its own flags and
//! defaults, every path install or the plugin writes on a hostPath mounted at its own path and no
//! wider, GPU nodes only unless the operator says otherwise. `values`: the values and the
//! plugin's config checked by the schema, pools, removal from the nodes; `monitoring`: the
//! metrics listener, the monitors, the alerts and the dashboard; `image`: the Containerfile.
//! (`tests/cri/daemonset.rs` runs the rendered NRI DaemonSet from the built image on a CRI node.)

mod image;
mod monitoring;
mod values;

use common::helm;

use std::path::{Path, PathBuf};

use cpuplan_hook::config::{HookConfig, DEFAULT_CONFIG};
use cpuplan_hook::install::containerd::{self, Containerd};
use cpuplan_hook::install::nri::Nri;
use cpuplan_hook::install::{Layout, Options, DEFAULT_HOOKS_DIR, DEFAULT_PREFIX, HOOK_FILE};
use helm::{argv, image_reference, one, render, render_route, CLI_BIN, NRI_BIN, ROUTES};
use serde_json::{json, Value};

/// The labels GPU nodes carry: Node Feature Discovery's NVIDIA PCI device, GPU Feature Discovery's.
const GPU_LABELS: [&str; 2] = [
    "feature.node.kubernetes.io/pci-10de.present",
    "nvidia.com/gpu.present",
];

fn pod_spec(ds: &Value) -> &Value {
    &ds["spec"]["template"]["spec"]
}

fn containers<'a>(ds: &'a Value, key: &str) -> Vec<&'a Value> {
    pod_spec(ds)[key]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

fn named<'a>(ds: &'a Value, key: &str, name: &str) -> &'a Value {
    containers(ds, key)
        .into_iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no {key} {name}: {}", pod_spec(ds)))
}

fn daemonsets(docs: &[Value]) -> Vec<&Value> {
    docs.iter().filter(|d| d["kind"] == "DaemonSet").collect()
}

/// The volume mount of `c` that holds `p` (the longest mountPath above it) and its volume.
fn mount_of<'a>(ds: &'a Value, c: &'a Value, p: &Path) -> (&'a Value, &'a Value) {
    let m = c["volumeMounts"]
        .as_array()
        .expect("volumeMounts")
        .iter()
        .filter(|m| p.starts_with(m["mountPath"].as_str().unwrap()))
        .max_by_key(|m| m["mountPath"].as_str().unwrap().len())
        .unwrap_or_else(|| panic!("{} is on no volume mount of {}", p.display(), c["name"]));
    let v = pod_spec(ds)["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == m["name"])
        .unwrap_or_else(|| panic!("no volume {}", m["name"]));
    (m, v)
}

/// Checks that every path is under a writable volume mount of `c` backed by a hostPath of the
/// same path (so the paths written inside are the node's).
fn assert_host_paths(ds: &Value, c: &Value, paths: &[PathBuf]) {
    for p in paths {
        let (m, v) = mount_of(ds, c, p);
        assert_ne!(m["readOnly"], true, "{} must be writable", p.display());
        assert_eq!(
            v["hostPath"]["path"],
            m["mountPath"],
            "{}: the hostPath must be mounted at its own path",
            p.display()
        );
    }
}

/// The writable mounts of `c` are exactly those `paths` need: no mount holds none of them.
fn assert_no_wider(ds: &Value, c: &Value, paths: &[PathBuf]) {
    for m in c["volumeMounts"].as_array().unwrap() {
        if m["readOnly"] == true {
            continue;
        }
        let at = Path::new(m["mountPath"].as_str().unwrap());
        assert!(
            paths.iter().any(|p| p.starts_with(at)),
            "{}: a writable mount {} that nothing written needs",
            c["name"],
            at.display()
        );
        let (_, v) = mount_of(ds, c, at);
        assert_ne!(v["hostPath"]["path"], "/", "never the node's /");
    }
}

/// What install writes with its defaults, as the hook DaemonSets run it.
fn installed_paths() -> Vec<PathBuf> {
    let l = Layout {
        prefix: DEFAULT_PREFIX.into(),
        hooks_dir: DEFAULT_HOOKS_DIR.into(),
        config: DEFAULT_CONFIG.into(),
    };
    vec![
        l.binary(),
        l.hooks_dir.join(HOOK_FILE),
        l.config.clone(),
        l.config_record(),
    ]
}

/// What every DaemonSet the chart renders has, whatever the values: the release's namespace, the
/// service account without a token, selectors that match, the image's binaries, no node `/`,
/// no tolerate-everything.
fn assert_daemonset(what: &str, docs: &[Value], ds: &Value) {
    let sa = one(docs, "ServiceAccount");
    assert_eq!(
        sa["automountServiceAccountToken"], false,
        "{what}: no API access"
    );
    assert_eq!(sa["metadata"]["namespace"], helm::NAMESPACE, "{what}");
    assert_eq!(ds["metadata"]["namespace"], helm::NAMESPACE, "{what}");
    assert_eq!(
        pod_spec(ds)["serviceAccountName"],
        sa["metadata"]["name"],
        "{what}"
    );
    let labels = &ds["spec"]["template"]["metadata"]["labels"];
    for (k, v) in ds["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(&labels[k], v, "{what}: the selector matches the pods");
    }
    for c in containers(ds, "initContainers")
        .into_iter()
        .chain(containers(ds, "containers"))
    {
        if c["name"] == "keep-alive" {
            continue;
        }
        assert_eq!(
            c["image"],
            image_reference().as_str(),
            "{what}: {}",
            c["name"]
        );
        assert!(
            [NRI_BIN, CLI_BIN].contains(&argv(c)[0].as_str()),
            "{what}: the image's binaries: {:?}",
            argv(c)
        );
    }
    for v in pod_spec(ds)["volumes"].as_array().unwrap() {
        assert_ne!(v["hostPath"]["path"], "/", "{what}: never the node's /");
    }
    for t in pod_spec(ds)["tolerations"].as_array().into_iter().flatten() {
        assert!(
            t["key"].is_string(),
            "{what}: a toleration of every taint: {t}"
        );
        assert!(
            !t["key"]
                .as_str()
                .unwrap()
                .starts_with("node-role.kubernetes.io/"),
            "{what}: no control plane: {t}"
        );
    }
}

/// Every values file the docs show renders, lints clean (strict) with Helm, and its DaemonSets
/// keep what every DaemonSet keeps.
#[test]
fn every_documented_values_file_renders_and_lints() {
    let docs_text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/kubernetes.md"))
            .unwrap();
    let names = helm::documented();
    for r in ROUTES {
        assert!(names.iter().any(|n| n == r), "no ci/{r}-values.yaml");
    }
    for name in std::iter::once("default".to_string()).chain(names) {
        let values = if name == "default" {
            json!({})
        } else {
            assert!(
                docs_text.contains(&format!("ci/{name}-values.yaml")),
                "docs/kubernetes.md does not show ci/{name}-values.yaml"
            );
            helm::values_file(&name)
        };
        let report = helm::lint(&values);
        assert_eq!(report["errors"], json!([]), "{name}: {report}");
        for m in report["messages"].as_array().unwrap() {
            assert!(
                m["severity"].as_i64().unwrap() < 2,
                "{name}: lint warns: {m}"
            );
        }
        let docs = render(&values);
        let dss = daemonsets(&docs);
        assert!(!dss.is_empty(), "{name}: no DaemonSet");
        for ds in dss {
            assert_daemonset(&name, &docs, ds);
        }
    }
}

#[test]
fn the_schema_refuses_values_the_chart_cannot_render() {
    for (bad, says) in [
        (json!({"route": "plugin"}), "/route"),
        (json!({"hook": {"runtime": "docker"}}), "/hook/runtime"),
        (json!({"nri": {"index": "7"}}), "/nri/index"),
        (json!({"metrics": {"port": "9400"}}), "/metrics/port"),
        (json!({"pools": [{"name": "Big_GPUs"}]}), "/pools/0/name"),
        (
            json!({"config": {"on_error": "ignore"}}),
            "/config/on_error",
        ),
        (json!({"tolerate": []}), "additional properties 'tolerate'"),
    ] {
        let e = helm::try_render(&bad).expect_err(&bad.to_string());
        assert!(e.contains(says), "{bad}: {e}");
    }
}

/// GPU nodes only by default (either discovery label), the GPU taint tolerated and no other;
/// the operator's own selection replaces it.
#[test]
fn the_defaults_select_gpu_nodes_only() {
    let docs = render(&json!({}));
    let ds = one(&docs, "DaemonSet");
    let spec = pod_spec(ds);
    assert_eq!(spec.get("nodeSelector"), None);
    let terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"]
        .as_array()
        .expect("a required node affinity");
    let keys: Vec<&str> = terms
        .iter()
        .map(|t| {
            let e = t["matchExpressions"].as_array().unwrap();
            assert_eq!(e.len(), 1, "{t}");
            assert_eq!(e[0]["operator"], "In");
            assert_eq!(e[0]["values"], json!(["true"]));
            e[0]["key"].as_str().unwrap()
        })
        .collect();
    assert_eq!(keys, GPU_LABELS, "either label (the terms are ORed)");
    assert_eq!(
        spec["tolerations"],
        json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
    );
    assert_eq!(spec["priorityClassName"], "system-node-critical");

    // gpuNodesOnly off: the operator's nodeSelector alone.
    let docs = render(&helm::values_file("all-nodes"));
    let spec = pod_spec(one(&docs, "DaemonSet")).clone();
    assert_eq!(spec.get("affinity"), None);
    assert_eq!(spec["nodeSelector"], json!({"example.com/cpuplan": "true"}));
    // A node affinity of the operator's replaces the GPU one; other affinities stay beside it.
    let mine = json!({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms":
        [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}]}});
    let docs = render(&json!({"affinity": {"nodeAffinity": mine}}));
    assert_eq!(
        pod_spec(one(&docs, "DaemonSet"))["affinity"]["nodeAffinity"],
        mine
    );
}

/// The plugin as both NRI routes run it: `cpuplan-nri --socket <NRI's default>`, the config at
/// its default path from the ConfigMap (the default config, logging to stderr only: kubelet
/// keeps and rotates the container's log), and every path the plugin writes on a hostPath
/// mounted at its own path: no log file on the node.
#[test]
fn the_nri_routes_run_the_plugin_with_its_flags_and_defaults() {
    let defaults = HookConfig::default();
    for o in ["nri", "containerd-1.7"] {
        let docs = render_route(o);
        let ds = one(&docs, "DaemonSet");
        let spec = pod_spec(ds);
        assert_eq!(
            spec["hostPID"], true,
            "{o}: claims under the plugin's pid as the host sees it"
        );
        assert_eq!(spec["hostNetwork"], true, "{o}: no pod network needed");
        let c = named(ds, "containers", "plugin");
        assert_eq!(
            containers(ds, "containers").len(),
            1,
            "{o}: the plugin alone"
        );
        assert_eq!(c["securityContext"]["privileged"], true, "{o}");
        assert_eq!(
            argv(c),
            [
                NRI_BIN,
                "--socket",
                cpuplan_hook::nri::options::DEFAULT_SOCKET
            ],
            "{o}: the plugin's default socket, no --config (the default path)"
        );
        let writable = [
            Path::new(cpuplan_hook::nri::options::DEFAULT_SOCKET)
                .parent()
                .unwrap()
                .to_path_buf(),
            defaults.nri_dir.clone(),
            defaults.claims_dir.clone(),
        ];
        assert_host_paths(ds, c, &writable);
        assert_no_wider(ds, c, &writable);
        // The config: the ConfigMap at /etc/cpuplan, read-only, holding the default config.
        let (m, v) = mount_of(ds, c, Path::new(DEFAULT_CONFIG));
        assert_eq!(m["readOnly"], true, "{o}");
        assert_eq!(m["mountPath"], "/etc/cpuplan");
        let cm_name = v["configMap"]["name"].as_str().expect("a configMap volume");
        let cm = docs
            .iter()
            .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == cm_name)
            .unwrap_or_else(|| panic!("{o}: no ConfigMap {cm_name}"));
        let text = cm["data"]["hook.json"].as_str().expect("hook.json");
        let mut shipped: Value =
            serde_json::from_str(cpuplan_hook::install::DEFAULT_CONFIG_TEXT).unwrap();
        shipped["log"] = json!("stderr");
        assert_eq!(
            serde_json::from_str::<Value>(text).unwrap(),
            shipped,
            "{o}: the chart's config is hooks/hook.json, logging to stderr"
        );
        let cfg = HookConfig::parse(Path::new("hook.json"), text.as_bytes()).unwrap();
        assert_eq!(cfg.log, None, "{o}: stderr only");
        assert_eq!(
            cfg,
            HookConfig {
                log: None,
                ..defaults.clone()
            }
        );
        // A changed config rolls the plugin out: the pod template carries its hash.
        let hash = &ds["spec"]["template"]["metadata"]["annotations"]["cpuplan.io/config-hash"];
        let changed = render(&json!({"config": {"cpuset": "keep"}}));
        let changed_hash = &one(&changed, "DaemonSet")["spec"]["template"]["metadata"]
            ["annotations"]["cpuplan.io/config-hash"];
        assert!(
            hash.is_string() && hash != changed_hash,
            "{hash} {changed_hash}"
        );
        // The rollout: the new pod starts before the old one stops (and waits for it to exit
        // before it connects: tests/cri/daemonset.rs).
        let ru = &ds["spec"]["updateStrategy"]["rollingUpdate"];
        assert_eq!(
            (ru["maxSurge"].as_i64(), ru["maxUnavailable"].as_i64()),
            (Some(1), Some(0))
        );
        // Metrics off by default: no port, and no metrics key in the plugin's config.
        assert_eq!(c.get("ports"), None, "{o}: a port with metrics off");
        // The probes need no port: the plugin's own state file, read by its binary.
        for (probe, which) in [("readinessProbe", "ready"), ("livenessProbe", "live")] {
            assert_eq!(
                c[probe]["exec"]["command"],
                json!(["/opt/cpuplan/cpuplan-nri", "--probe", which]),
                "{o}: {probe}"
            );
        }
    }
    // Whatever the values say of the log, the plugin's is stderr: no log volume, no file.
    let docs = render(&json!({"config": {"log": null}}));
    let ds = one(&docs, "DaemonSet");
    let names: Vec<&Value> = pod_spec(ds)["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| &v["name"])
        .collect();
    assert!(!names.contains(&&json!("log")), "{names:?}");
    let cm = one(&docs, "ConfigMap");
    let config: Value = serde_json::from_str(cm["data"]["hook.json"].as_str().unwrap()).unwrap();
    assert_eq!(config["log"], "stderr", "{config}");
    // Another index: passed as the plugin's flag.
    let docs = render(&json!({"nri": {"index": "90"}}));
    let c = named(one(&docs, "DaemonSet"), "containers", "plugin");
    assert_eq!(
        argv(c)[1..],
        [
            "--socket",
            cpuplan_hook::nri::options::DEFAULT_SOCKET,
            "--index",
            "90"
        ]
    );
}

#[test]
fn the_containerd_1_7_route_turns_nri_on_with_install_nri() {
    let docs = render_route("containerd-1.7");
    let ds = one(&docs, "DaemonSet");
    let inits = containers(ds, "initContainers");
    assert_eq!(inits.len(), 1);
    let c = inits[0];
    assert_eq!(argv(c), [CLI_BIN, "install", "--nri"]);
    let n = Nri::resolve(&Options::default()).unwrap();
    assert_host_paths(ds, c, &[n.config.clone(), n.drop_in()]);
    assert_eq!(
        c["volumeMounts"].as_array().unwrap().len(),
        1,
        "install --nri writes only containerd's drop-in and import"
    );
    assert_eq!(
        containers(one(&render_route("nri"), "DaemonSet"), "initContainers").len(),
        0
    );
}

/// The machine's `ctr` and the files it loads (`ldd`): what `install --containerd` runs
/// chrooted into the node's root.
fn ctr_and_libraries() -> Vec<PathBuf> {
    let ctr = [
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ]
    .iter()
    .map(|d| Path::new(d).join("ctr"))
    .find(|p| p.is_file())
    .expect("ctr (containerd) on this machine");
    let out = std::process::Command::new("ldd")
        .arg(&ctr)
        .output()
        .unwrap();
    let mut files = vec![ctr];
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let path = l
            .split("=>")
            .last()
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap_or("");
        if path.starts_with('/') {
            files.push(PathBuf::from(path));
        }
    }
    files
}

#[test]
fn the_hook_routes_install_on_the_node_s_own_paths_and_no_wider() {
    for o in ["hook-crio", "hook-containerd"] {
        let docs = render_route(o);
        let ds = one(&docs, "DaemonSet");
        let cs = containers(ds, "containers");
        assert_eq!(cs.len(), 1, "{o}: the plugin is out");
        assert_eq!(cs[0]["name"], "keep-alive");
        let keep = cs[0]["image"].as_str().unwrap();
        assert!(keep.starts_with("registry.k8s.io/pause:"), "{o}: {keep}");
        assert_eq!(pod_spec(ds).get("hostPID"), None, "{o}: no host PID");
        let c = named(ds, "initContainers", "install");
        assert_eq!(c["securityContext"]["privileged"], true);
        let words = argv(c);
        for opt in [
            "--prefix",
            "--hooks-dir",
            "--config",
            "--root-prefix",
            "--with-precreate",
        ] {
            assert!(
                !words.iter().any(|w| w == opt),
                "{o}: install runs with its defaults: {words:?}"
            );
        }
        let mut paths = installed_paths();
        if o == "hook-containerd" {
            assert_eq!(
                words,
                [CLI_BIN, "install", "--containerd", "--ctr-root", "/host"]
            );
            // containerd 1.7's own sandbox image: nothing to pull.
            assert_eq!(keep, "registry.k8s.io/pause:3.8");
            let node = Containerd {
                config: containerd::DEFAULT_CONFIG.into(),
                runtimes: Vec::new(),
                ctr_root: "/host".into(),
            };
            paths.extend([node.config.clone(), node.drop_in(), node.base_spec()]);
            // ctr runs chrooted into /host: the node's ctr and what it loads, read-only, each
            // from the node's own path.
            for f in ctr_and_libraries() {
                let inside = Path::new("/host").join(f.strip_prefix("/").unwrap());
                let (m, v) = mount_of(ds, c, &inside);
                assert_eq!(m["readOnly"], true, "{}", inside.display());
                let at = Path::new(m["mountPath"].as_str().unwrap());
                assert_eq!(
                    Path::new("/").join(at.strip_prefix("/host").unwrap()),
                    Path::new(v["hostPath"]["path"].as_str().unwrap()),
                    "{}",
                    inside.display()
                );
            }
        } else {
            assert_eq!(words, [CLI_BIN, "install"]);
        }
        assert_host_paths(ds, c, &paths);
        assert_no_wider(ds, c, &paths);
        let volumes: Vec<&str> = pod_spec(ds)["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .collect();
        for gone in ["nri", "plans", "config", "log"] {
            assert!(
                !volumes.contains(&gone),
                "{o}: the plugin's volume {gone} is left"
            );
        }
        assert!(
            !docs.iter().any(|d| d["kind"] == "ConfigMap"),
            "{o}: the hook reads the node's config"
        );
    }
}

/// Several node pools: one DaemonSet and ConfigMap each, each selecting its own pods and nodes
/// with its config merged over the release's; every config one the plugin loads.
#[test]
fn pools_get_a_daemonset_and_a_config_each() {
    let values = helm::values_file("pools");
    let docs = render(&values);
    let dss = daemonsets(&docs);
    let pools = values["pools"].as_array().unwrap();
    assert_eq!(dss.len(), pools.len());
    let mut selectors = Vec::new();
    for (ds, pool) in dss.iter().zip(pools) {
        let name = pool["name"].as_str().unwrap();
        assert_eq!(ds["metadata"]["name"], format!("{}-{name}", helm::RELEASE));
        assert_eq!(pod_spec(ds)["nodeSelector"], pool["nodeSelector"]);
        selectors.push(ds["spec"]["selector"]["matchLabels"].clone());
        let cm_name = pod_spec(ds)["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find_map(|v| v["configMap"]["name"].as_str())
            .unwrap();
        let cm = docs
            .iter()
            .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == cm_name)
            .unwrap();
        let text = cm["data"]["hook.json"].as_str().unwrap();
        let cfg: Value = serde_json::from_str(text).unwrap();
        for (k, v) in pool["config"].as_object().unwrap() {
            assert_eq!(&cfg[k], v, "{name}: {k}");
        }
        assert_eq!(
            cfg["claims_dir"], "/run/cpuplan/claims",
            "{name}: the rest is the release's"
        );
        HookConfig::parse(Path::new(cm_name), text.as_bytes())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    selectors.dedup();
    assert_eq!(
        selectors.len(),
        pools.len(),
        "each DaemonSet selects its own pods"
    );
}
