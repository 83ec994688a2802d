//! The hook on a CRI node ([`crate::cri::CriNode`]): its config, its registration by
//! `cpuplan install --containerd`, its log and claims, and the probe a container runs to
//! show its plan. Included with `#[path = "common/cri_hook.rs"] mod cri_hook;` beside `cri.rs`.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};

use crate::cri::{gpu_host, section, Containerd, CriNode, NodeOptions};
use crate::statics::static_cpuplan;

/// What a container prints of its plan: its CPUs, `plan.env` and `plan.json` in sections.
pub const PROBE: &str = r#"echo "cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)"
echo '--- planenv'; cat /run/cpuplan/plan.env; echo '--- planjson'; cat /run/cpuplan/plan.json; echo '--- end'"#;

/// The `plan.json` section of a [`PROBE`]'s output.
pub fn plan_json(out: &str) -> Value {
    serde_json::from_str(section(out, "planjson")).unwrap_or_else(|e| panic!("{e}:\n{out}"))
}

/// The hook config the tests' nodes use: a fake GPU host as topology, claims and log under the node.
pub fn hook_config(node: &CriNode, extra: Value) -> PathBuf {
    let mut cfg = json!({
        "step_thread_core": "auto",
        "topology_root": gpu_host(node.root()),
        "claims_dir": node.claims_dir(),
        "log": node.path("var/log/cpuplan-hook.log"),
    });
    for (k, v) in extra.as_object().unwrap() {
        cfg[k] = v.clone();
    }
    let p = node.path("etc/cpuplan/hook.json");
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
    p
}

/// `cpuplan install --containerd --root-prefix T ARGS`: its output; it must succeed. On a
/// containerd 2.x node, with `--ctr-root` a root holding that node's `ctr` (a 2.x node's own
/// `/usr/bin/ctr` is 2.x's; the system's here is 1.7's).
pub fn install(node: &CriNode, args: &[&str]) -> String {
    let mut cmd = Command::new(static_cpuplan());
    cmd.args(["install", "--containerd", "--root-prefix"])
        .arg(node.root())
        .args(args);
    if node.containerd() == Containerd::V2 && !args.contains(&"--ctr-root") {
        let host = node.path("ctr-root");
        node.ctr_root(&host);
        cmd.arg("--ctr-root").arg(host);
    }
    let out = cmd.output().unwrap();
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "install: {se}\n{so}");
    so.into_owned()
}

/// A started node whose runc runtime runs the hook, registered by install.
pub fn hooked(opts: NodeOptions, config: Value) -> CriNode {
    let node = CriNode::with(opts);
    hook_config(&node, config);
    install(&node, &[]);
    node.start();
    node
}

/// The hook's log on `node`.
pub fn hook_log(node: &CriNode) -> String {
    std::fs::read_to_string(node.path("var/log/cpuplan-hook.log")).unwrap_or_default()
}

/// `cpuplan claims --json` with the node's hook config.
pub fn claims(node: &CriNode) -> Value {
    crate::podman::claims_json(&node.path("etc/cpuplan/hook.json"))
}
