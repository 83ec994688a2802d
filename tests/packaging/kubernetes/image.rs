//! The image's recipe and the example pod: the Containerfile's stages, its context and labels.

use std::path::{Path, PathBuf};

use cpuplan_hook::config::HookConfig;
use serde::Deserialize;
use serde_json::Value;

use super::{CLI_BIN, NRI_BIN};

/// The binaries the image holds, in the Containerfile's order.
const IMAGE_BINS: [&str; 4] = [
    NRI_BIN,
    CLI_BIN,
    "/opt/cpuplan/cpuplan-hook",
    "/opt/cpuplan/cpuplan-exec",
];
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
