//! The Kubernetes manifests of `examples/kubernetes/`: every manifest parses, and the paths the
//! DaemonSets name are those `cpuplan-hook install` writes, each on a hostPath mounted at its
//! own path. (`tests/cri_node.rs` runs the containerd DaemonSet's install against a CRI node.)

/// Fails this binary if the real hook log changed while it ran (tests/common/log_guard.rs).
#[path = "common/log_guard.rs"]
mod log_guard;

use std::path::{Path, PathBuf};

use cpuplan_hook::config::{HookConfig, DEFAULT_CONFIG};
use cpuplan_hook::install::containerd::{self, Containerd};
use cpuplan_hook::install::{Layout, DEFAULT_HOOKS_DIR, DEFAULT_PREFIX, HOOK_FILE};
use serde::Deserialize;
use serde_json::Value;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/kubernetes")
}

/// Every YAML document of every manifest, with its file name.
fn documents() -> Vec<(String, Value)> {
    let mut docs = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(dir())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    names.sort();
    for p in names {
        let text = std::fs::read_to_string(&p).unwrap();
        for d in serde_yaml_ng::Deserializer::from_str(&text) {
            let v = Value::deserialize(d)
                .unwrap_or_else(|e| panic!("{}: not valid YAML: {e}", p.display()));
            docs.push((p.file_name().unwrap().to_string_lossy().into_owned(), v));
        }
    }
    docs
}

fn daemonset(file: &str) -> Value {
    documents()
        .into_iter()
        .find(|(f, v)| f == file && v["kind"] == "DaemonSet")
        .unwrap_or_else(|| panic!("no DaemonSet in {file}"))
        .1
}

/// What install writes with its defaults, as the DaemonSets run it.
fn installed_paths() -> Vec<PathBuf> {
    let l = Layout {
        prefix: DEFAULT_PREFIX.into(),
        hooks_dir: DEFAULT_HOOKS_DIR.into(),
        config: DEFAULT_CONFIG.into(),
    };
    vec![l.binary(), l.hooks_dir.join(HOOK_FILE), l.config]
}

/// The init container's whole command line, as one string.
fn command_line(c: &Value) -> String {
    let mut words: Vec<&str> = Vec::new();
    for key in ["command", "args"] {
        if let Some(a) = c[key].as_array() {
            words.extend(a.iter().filter_map(Value::as_str));
        }
    }
    words.join(" ")
}

/// Checks that every path is under a writable volume mount of `c` backed by a hostPath of the
/// same path (so the paths written inside are the node's).
fn assert_host_paths(ds: &Value, c: &Value, paths: &[PathBuf]) {
    let volumes = ds["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .expect("volumes");
    let mounts = c["volumeMounts"].as_array().expect("volumeMounts");
    for p in paths {
        let m = mounts
            .iter()
            .filter(|m| p.starts_with(m["mountPath"].as_str().unwrap()))
            .max_by_key(|m| m["mountPath"].as_str().unwrap().len())
            .unwrap_or_else(|| panic!("{} is on no volume mount of {}", p.display(), c["name"]));
        assert_ne!(m["readOnly"], true, "{} must be writable", p.display());
        let v = volumes
            .iter()
            .find(|v| v["name"] == m["name"])
            .unwrap_or_else(|| panic!("no volume {}", m["name"]));
        assert_eq!(
            v["hostPath"]["path"],
            m["mountPath"],
            "{}: the hostPath must be mounted at its own path",
            p.display()
        );
    }
}

fn init_install(ds: &Value) -> Value {
    let spec = &ds["spec"]["template"]["spec"];
    assert_eq!(
        ds["spec"]["selector"]["matchLabels"], ds["spec"]["template"]["metadata"]["labels"],
        "the selector matches the pods"
    );
    let c = spec["initContainers"]
        .as_array()
        .expect("initContainers")
        .iter()
        .find(|c| command_line(c).contains("cpuplan-hook install"))
        .expect("an init container that runs cpuplan-hook install")
        .clone();
    assert_eq!(c["securityContext"]["privileged"], true);
    let cmd = command_line(&c);
    for opt in ["--prefix", "--hooks-dir", "--config ", "--root-prefix"] {
        assert!(!cmd.contains(opt), "install runs with its defaults: {cmd}");
    }
    assert!(
        !cmd.contains("--with-precreate"),
        "precreate is podman's: {cmd}"
    );
    c
}

#[test]
fn every_manifest_parses_with_a_kind_and_a_name() {
    let docs = documents();
    assert!(docs.len() >= 3, "{docs:?}");
    for (file, v) in &docs {
        assert!(v["apiVersion"].is_string(), "{file}: apiVersion");
        assert!(v["kind"].is_string(), "{file}: kind");
        assert!(v["metadata"]["name"].is_string(), "{file}: metadata.name");
    }
}

#[test]
fn the_crio_daemonset_installs_on_the_node_s_own_paths() {
    let ds = daemonset("crio-daemonset.yaml");
    let c = init_install(&ds);
    assert_host_paths(&ds, &c, &installed_paths());
}

#[test]
fn the_containerd_daemonset_installs_with_containerd_s_own_default_spec() {
    let ds = daemonset("containerd-daemonset.yaml");
    let c = init_install(&ds);
    let cmd = command_line(&c);
    assert!(
        cmd.starts_with(
            "/bin/sh -c /opt/cpuplan/cpuplan-hook install --containerd --ctr-root /host"
        ),
        "{cmd}"
    );
    // What install --containerd writes with its defaults, each on a writable hostPath.
    let node = Containerd {
        config: containerd::DEFAULT_CONFIG.into(),
        runtimes: Vec::new(),
        ctr_root: "/host".into(),
    };
    let mut paths = installed_paths();
    paths.extend([node.config.clone(), node.drop_in(), node.base_spec()]);
    assert_host_paths(&ds, &c, &paths);
    // ctr runs chrooted into the node's root, mounted read-only at /host.
    let m = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == "/host")
        .expect("the node's root at /host");
    assert_eq!(m["readOnly"], true);
    let v = ds["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == m["name"])
        .unwrap();
    assert_eq!(v["hostPath"]["path"], "/");
    // The image ships the binary where the command runs it (see the Containerfile's test), and
    // no base spec.
    let containerfile = std::fs::read_to_string(dir().join("Containerfile")).unwrap();
    assert!(cmd.starts_with("/bin/sh -c /opt/cpuplan/cpuplan-hook "));
    assert!(containerfile.contains(" /opt/cpuplan/cpuplan-hook\n"));
    assert!(!containerfile.contains("base-spec"));
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
            ["FROM", "WORKDIR", "COPY", "RUN", "ENTRYPOINT"].contains(&k.as_str()),
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
    assert!(
        !froms[1].contains(" AS ") && !froms[1].contains("rust"),
        "{}",
        froms[1]
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
    assert!(
        build.contains(&("RUN".into(), "scripts/build-static.sh".into())),
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
    assert!(script.contains("out=${CARGO_TARGET_DIR:-target}/x86_64-unknown-linux-gnu/$profile"));

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
            format!("{workdir}/target/x86_64-unknown-linux-gnu/release/{bin}"),
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
    // Every DaemonSet runs the binary the image has.
    for file in ["crio-daemonset.yaml", "containerd-daemonset.yaml"] {
        let cmd = command_line(&init_install(&daemonset(file)));
        assert!(
            cmd.contains("/opt/cpuplan/cpuplan-hook install"),
            "{file}: {cmd}"
        );
    }
}

#[test]
fn the_pod_requests_gpus_and_sets_a_setting_the_hook_accepts() {
    let (_, pod) = documents()
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
