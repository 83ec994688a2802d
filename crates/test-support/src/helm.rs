//! The chart `deploy/helm/cpuplan` as Helm renders and lints it, with no helm binary and no
//! cluster: PyPI's helm-python-sdk (Helm v4's Go library), which `scripts/test.sh` installs into a
//! venv at `$CARGO_TARGET_DIR/tools/helm`; `$CPUPLAN_HELM_PYTHON` names another Python that has
//! it. A test that uses it says `#[path = "common/helm.rs"] mod helm;`.
#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde::Deserialize;
use serde_json::{json, Value};

/// The release name and namespace the tests render with (the docs' `helm install` line).
pub const RELEASE: &str = "cpuplan";
/// The namespace of the docs' `helm install` line.
pub const NAMESPACE: &str = "cpuplan-system";

/// The routes, each a documented values file `deploy/helm/cpuplan/ci/ROUTE-values.yaml`.
pub const ROUTES: &[&str] = &["nri", "containerd-1.7", "hook-crio", "hook-containerd"];

/// The image's NRI plugin (its entrypoint).
pub const NRI_BIN: &str = "/opt/cpuplan/cpuplan-nri";
/// The image's operator command (`install`).
pub const CLI_BIN: &str = "/opt/cpuplan/cpuplan";

/// `deploy/helm/cpuplan`.
pub fn chart_dir() -> PathBuf {
    crate::statics::workspace_root().join("deploy/helm/cpuplan")
}

/// The Python with helm-python-sdk: `$CPUPLAN_HELM_PYTHON`, else the venv `scripts/test.sh` makes.
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("CPUPLAN_HELM_PYTHON") {
        return PathBuf::from(p);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::statics::workspace_root().join("target"));
    let p = target.join("tools/helm/bin/python");
    assert!(
        p.is_file(),
        "no helm-python-sdk venv at {} (scripts/test.sh --setup-only installs it from PyPI; or set CPUPLAN_HELM_PYTHON)",
        p.display()
    );
    p
}

/// Reads `{"op", "chart", "values", "name", "namespace"}` on stdin, prints the result as JSON:
/// render's {template path: text}, or lint's report; a Helm error is `{"error": "..."}`.
const DRIVER: &str = r#"
import json, sys
import helm_python
req = json.load(sys.stdin)
try:
    if req["op"] == "render":
        out = helm_python.Chart.load(req["chart"]).render(
            req["values"], name=req["name"], namespace=req["namespace"])
    else:
        out = helm_python.lint(req["chart"], req["values"], strict=True,
                               namespace=req["namespace"])
except helm_python.HelmError as e:
    out = {"error": str(e)}
json.dump(out, sys.stdout)
"#;

fn call(op: &str, values: &Value) -> Value {
    let mut child = Command::new(python())
        .args(["-c", DRIVER])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run helm-python-sdk");
    let req = json!({
        "op": op,
        "chart": chart_dir(),
        "values": values,
        "name": RELEASE,
        "namespace": NAMESPACE,
    });
    child
        .stdin
        .take()
        .unwrap()
        .write_all(req.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "helm-python-sdk {op}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the driver prints JSON")
}

/// Every document the chart renders with `values` (NOTES.txt left out), or Helm's error.
pub fn try_render(values: &Value) -> Result<Vec<Value>, String> {
    let out = call("render", values);
    if let Some(e) = out.get("error") {
        return Err(e.as_str().unwrap_or_default().to_string());
    }
    let mut files: Vec<(&String, &Value)> = out.as_object().unwrap().iter().collect();
    files.sort_by(|a, b| a.0.cmp(b.0));
    let mut docs = Vec::new();
    for (path, text) in files {
        if path.ends_with("NOTES.txt") {
            continue;
        }
        for d in serde_yaml_ng::Deserializer::from_str(text.as_str().unwrap()) {
            let v = Value::deserialize(d)
                .unwrap_or_else(|e| panic!("{path}: Helm printed no YAML: {e}"));
            if !v.is_null() {
                docs.push(v);
            }
        }
    }
    Ok(docs)
}

/// Every document the chart renders with `values`.
pub fn render(values: &Value) -> Vec<Value> {
    try_render(values).unwrap_or_else(|e| panic!("helm render {values}: {e}"))
}

/// Helm's lint report (strict: warnings count) for `values`.
pub fn lint(values: &Value) -> Value {
    call("lint", values)
}

/// The values of a documented file `deploy/helm/cpuplan/ci/NAME-values.yaml`.
pub fn values_file(name: &str) -> Value {
    let p = chart_dir().join("ci").join(format!("{name}-values.yaml"));
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Every documented values file's name (`ci/NAME-values.yaml`), sorted.
pub fn documented() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(chart_dir().join("ci"))
        .unwrap()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix("-values.yaml")
                .map(String::from)
        })
        .collect();
    names.sort();
    names
}

/// The documents of route `name` (its documented values file).
pub fn render_route(name: &str) -> Vec<Value> {
    render(&values_file(name))
}

/// The one document of `kind` in `docs`.
pub fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind}: {docs:?}");
    found[0]
}

/// The image reference `scripts/image.sh` names: `localhost/cpuplan:VERSION`.
pub fn image_reference() -> String {
    format!("localhost/cpuplan:{}", crate::statics::package_version())
}

/// A container's whole command line (command, then args).
pub fn argv(c: &Value) -> Vec<String> {
    ["command", "args"]
        .iter()
        .flat_map(|k| c[*k].as_array().cloned().unwrap_or_default())
        .map(|w| w.as_str().expect("a string").to_string())
        .collect()
}
