//! The Helm chart `deploy/helm/cpuplan` as Helm renders it (helm-python-sdk, Helm v4's library,
//! which scripts/test.sh installs): every documented values file renders and lints; one
//! DaemonSet per route (one per pool), the image set once, the plugin run with its own flags and
//! defaults, every path install or the plugin writes on a hostPath mounted at its own path and no
//! wider, GPU nodes only unless the operator says otherwise, the values checked by the schema.
//! (`tests/cri/daemonset.rs` runs the rendered NRI DaemonSet from the built image on a CRI node.)

use common::helm;

use std::path::{Path, PathBuf};

use cpuplan_hook::config::{HookConfig, DEFAULT_CONFIG};
use cpuplan_hook::install::containerd::{self, Containerd};
use cpuplan_hook::install::nri::Nri;
use cpuplan_hook::install::{Layout, Options, DEFAULT_HOOKS_DIR, DEFAULT_PREFIX, HOOK_FILE};
use helm::{argv, image_reference, one, render, render_route, CLI_BIN, NRI_BIN, ROUTES};
use serde::Deserialize;
use serde_json::{json, Value};

/// The binaries the image holds, in the Containerfile's order.
const IMAGE_BINS: [&str; 4] = [
    NRI_BIN,
    CLI_BIN,
    "/opt/cpuplan/cpuplan-hook",
    "/opt/cpuplan/cpuplan-exec",
];
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
/// its default path from the ConfigMap (the default config), and every path the plugin writes
/// on a hostPath mounted at its own path.
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
            defaults.log.clone().unwrap(),
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
        let shipped: Value =
            serde_json::from_str(cpuplan_hook::install::DEFAULT_CONFIG_TEXT).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(text).unwrap(),
            shipped,
            "{o}: the chart's config is hooks/hook.json"
        );
        let cfg = HookConfig::parse(Path::new("hook.json"), text.as_bytes()).unwrap();
        assert_eq!(cfg, defaults);
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
    // A log that is not a file (stderr): no log volume.
    let docs = render(&json!({"config": {"log": "stderr"}}));
    let ds = one(&docs, "DaemonSet");
    let names: Vec<&Value> = pod_spec(ds)["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| &v["name"])
        .collect();
    assert!(!names.contains(&&json!("log")), "{names:?}");
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

/// Metrics on: the port, the config's listener on it, a ServiceMonitor over a Service that
/// selects the plugin pods, a PodMonitor over the pods.
#[test]
fn metrics_serve_the_probes_and_the_monitors_find_the_pods() {
    let docs = render(&helm::values_file("metrics"));
    let ds = one(&docs, "DaemonSet");
    let c = named(ds, "containers", "plugin");
    let port = c["ports"][0]["containerPort"]
        .as_i64()
        .expect("a metrics port");
    assert_eq!(c["ports"][0]["name"], "metrics");
    let cm = one(&docs, "ConfigMap");
    let config: Value = serde_json::from_str(cm["data"]["hook.json"].as_str().unwrap()).unwrap();
    assert_eq!(
        config["metrics"],
        json!({"address": format!("0.0.0.0:{port}")}),
        "{config}"
    );
    let pod_labels = &ds["spec"]["template"]["metadata"]["labels"];
    let matches = |sel: &Value, labels: &Value| {
        sel.as_object()
            .unwrap()
            .iter()
            .all(|(k, v)| &labels[k] == v)
    };
    let svc = one(&docs, "Service");
    assert!(matches(&svc["spec"]["selector"], pod_labels), "{svc}");
    assert_eq!(svc["spec"]["ports"][0]["port"].as_i64(), Some(port));
    let sm = one(&docs, "ServiceMonitor");
    assert!(matches(
        &sm["spec"]["selector"]["matchLabels"],
        &svc["metadata"]["labels"]
    ));
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics");
    let pm = one(&docs, "PodMonitor");
    assert!(matches(&pm["spec"]["selector"]["matchLabels"], pod_labels));
    assert_eq!(pm["spec"]["podMetricsEndpoints"][0]["port"], "metrics");
    // Metrics on the hook route: nothing (the hook route has no daemon).
    let hook = render(
        &json!({"route": "hook", "metrics": {"enabled": true, "podMonitor": {"enabled": true}}}),
    );
    assert!(!hook
        .iter()
        .any(|d| d["kind"] == "PodMonitor" || d["kind"] == "Service"));
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

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes")
}

/// The plain YAML files of `deploy/kubernetes/examples/`, with their file names.
fn examples() -> Vec<(String, Value)> {
    let mut docs = Vec::new();
    for e in std::fs::read_dir(dir().join("examples")).unwrap().flatten() {
        let p = e.path();
        let text = std::fs::read_to_string(&p).unwrap();
        for d in serde_yaml_ng::Deserializer::from_str(&text) {
            let v = Value::deserialize(d)
                .unwrap_or_else(|e| panic!("{}: not valid YAML: {e}", p.display()));
            docs.push((p.file_name().unwrap().to_string_lossy().into_owned(), v));
        }
    }
    docs
}

/// One instruction of a Containerfile: its keyword (upper case) and the rest of its line.
fn instructions(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            assert!(!l.ends_with('\\'), "no continued lines here: {l}");
            let (k, rest) = l.split_once(' ').unwrap_or((l, ""));
            (k.to_ascii_uppercase(), rest.trim().to_string())
        })
        .collect()
}

/// Whether `.containerignore`'s `patterns` (plain paths and `**/NAME`, the only forms the file
/// uses) exclude the context path `rel`.
fn ignored(patterns: &[String], rel: &str) -> bool {
    patterns.iter().any(|p| match p.strip_prefix("**/") {
        Some(name) => rel.split('/').any(|c| c == name),
        None => rel == p || rel.starts_with(&format!("{p}/")),
    })
}

/// No engine or registry here: the image cannot be built in the tests. What can be checked is
/// checked: the instructions parse, the build stage builds with scripts/build-static.sh from a
/// context that holds what that build needs, the final stage copies the static binaries from
/// where the script leaves them to where the DaemonSets run them, and .dockerignore is
/// .containerignore.
#[test]
fn the_containerfile_builds_the_static_binaries_in_a_build_stage() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(dir().join("Containerfile")).unwrap();
    let ins = instructions(&text);
    for (k, _) in &ins {
        assert!(
            ["FROM", "WORKDIR", "COPY", "RUN", "LABEL", "ENTRYPOINT"].contains(&k.as_str()),
            "unexpected instruction {k}"
        );
    }
    let froms: Vec<&String> = ins
        .iter()
        .filter(|(k, _)| k == "FROM")
        .map(|(_, r)| r)
        .collect();
    assert_eq!(froms.len(), 2, "a build stage and a final stage: {froms:?}");
    let (image, stage) = froms[0].split_once(" AS ").expect("FROM IMAGE AS build");
    assert!(image.starts_with("docker.io/library/rust:"), "{image}");
    assert_eq!(stage, "build");
    assert_eq!(
        froms[1], "scratch",
        "the final stage holds the static binaries only"
    );
    let final_at = ins.iter().rposition(|(k, _)| k == "FROM").unwrap();
    let (build, last) = ins.split_at(final_at);

    // The build stage: the whole context in WORKDIR, then the static build.
    let workdir = build
        .iter()
        .find(|(k, _)| k == "WORKDIR")
        .map(|(_, r)| r.clone())
        .expect("a WORKDIR");
    assert!(build.contains(&("COPY".into(), ". .".into())), "{build:?}");
    // The musl target's standard library, then the static build.
    let runs: Vec<&str> = build
        .iter()
        .filter(|(k, _)| k == "RUN")
        .map(|(_, r)| r.as_str())
        .collect();
    assert_eq!(
        runs,
        [
            "rustup target add x86_64-unknown-linux-musl",
            "scripts/build-static.sh"
        ],
        "{build:?}"
    );
    let patterns: Vec<String> = std::fs::read_to_string(root.join(".containerignore"))
        .unwrap()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect();
    for p in &patterns {
        assert!(
            !p.contains(['*', '?', '[', '!'])
                || (p.starts_with("**/") && !p[3..].contains(['*', '?', '[', '!', '/'])),
            "a pattern form the test does not read: {p}"
        );
    }
    assert_eq!(
        std::fs::read_link(root.join(".dockerignore")).unwrap(),
        Path::new(".containerignore")
    );
    for out in [
        "target",
        "target/debug/cpuplan-hook",
        "crates/cpuplan/target",
        ".git",
        "tests/fixtures/e2e-host",
    ] {
        assert!(ignored(&patterns, out), "{out} is sent to the engine");
    }
    // What the static build reads: the workspace, the alias, the script, the included files.
    for needed in [
        "Cargo.toml",
        "Cargo.lock",
        ".cargo/config.toml",
        "scripts/build-static.sh",
        "src/bin/cpuplan-hook.rs",
        "src/bin/cpuplan-nri.rs",
        "src/bin/cpuplan.rs",
        "hooks/hook.json",
        "README.md",
        "crates/cpuplan/Cargo.toml",
        "crates/shim/Cargo.toml",
        "crates/shim/src/bin/cpuplan-exec.rs",
        "crates/shim-capi/Cargo.toml",
        "crates/python/Cargo.toml",
        "examples/oversubscription/main.rs",
        "examples/oversubscription/handoff.rs",
    ] {
        assert!(root.join(needed).exists(), "{needed} is gone");
        assert!(
            !ignored(&patterns, needed),
            "{needed} is left out of the context"
        );
    }
    let script = std::fs::read_to_string(root.join("scripts/build-static.sh")).unwrap();
    assert!(script.contains("triple=x86_64-unknown-linux-musl\n"));
    assert!(script.contains("out=${CARGO_TARGET_DIR:-target}/$triple/$profile"));

    // The final stage: the release binaries, from the build stage, to /opt/cpuplan.
    let copies: Vec<&String> = last
        .iter()
        .filter(|(k, _)| k == "COPY")
        .map(|(_, r)| r)
        .collect();
    let mut dests = Vec::new();
    for c in &copies {
        let words: Vec<&str> = c.split_whitespace().collect();
        assert_eq!(words.len(), 3, "COPY --from=build SRC DEST: {c}");
        assert_eq!(words[0], "--from=build");
        let bin = Path::new(words[2]).file_name().unwrap().to_str().unwrap();
        assert_eq!(
            words[1],
            format!("{workdir}/target/x86_64-unknown-linux-musl/release/{bin}"),
            "where scripts/build-static.sh leaves it"
        );
        assert!(
            IMAGE_BINS.iter().any(|b| b.ends_with(&format!("/{bin}"))),
            "{bin}"
        );
        dests.push(words[2]);
    }
    assert_eq!(dests, IMAGE_BINS);
    let entry = last
        .iter()
        .find(|(k, _)| k == "ENTRYPOINT")
        .map(|(_, r)| r.clone())
        .expect("an ENTRYPOINT");
    let entry: Vec<String> = serde_json::from_str(&entry).expect("ENTRYPOINT in JSON form");
    // The entrypoint is the plugin the NRI DaemonSets run; the labels carry the version.
    assert_eq!(entry, [NRI_BIN]);
    let labels = last
        .iter()
        .find(|(k, _)| k == "LABEL")
        .expect("a LABEL")
        .1
        .clone();
    assert!(
        labels.contains(&format!(
            "org.opencontainers.image.version=\"{}\"",
            env!("CARGO_PKG_VERSION")
        )),
        "{labels}"
    );
}

#[test]
fn the_pod_requests_gpus_and_sets_a_setting_the_hook_accepts() {
    let (_, pod) = examples()
        .into_iter()
        .find(|(f, v)| f == "gpu-pod.yaml" && v["kind"] == "Pod")
        .expect("gpu-pod.yaml holds a Pod");
    let setting = pod["metadata"]["annotations"]["cpuplan.step-thread-core"]
        .as_str()
        .expect("the cpuplan.step-thread-core annotation, a string");
    let cfg = serde_json::json!({ "step_thread_core": setting }).to_string();
    HookConfig::parse(Path::new("gpu-pod.yaml"), cfg.as_bytes())
        .unwrap_or_else(|e| panic!("the hook rejects {setting:?}: {e}"));
    let limits = &pod["spec"]["containers"][0]["resources"]["limits"];
    assert!(
        limits["nvidia.com/gpu"].as_u64().unwrap_or(0) >= 1,
        "{limits}"
    );
    assert!(limits["cpu"].is_string(), "{limits}");
}
