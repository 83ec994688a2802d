//! The values Helm refuses before anything reaches a node: the plugin's config key by key (the
//! schema knows exactly the keys and values the plugin loads), two pools of one name, and the
//! removal of what the hook routes installed.

use std::path::Path;

use common::helm;
use cpuplan_hook::config::HookConfig;
use serde_json::{json, Value};

use super::{argv, containers, named, one, pod_spec, render, render_route, CLI_BIN, ROUTES};

/// The schema's `definitions.config`.
fn config_schema() -> Value {
    let text = std::fs::read_to_string(helm::chart_dir().join("values.schema.json")).unwrap();
    let schema: Value = serde_json::from_str(&text).unwrap();
    schema["definitions"]["config"].clone()
}

/// The keys the plugin's config loader knows, as its refusal of an unknown key lists them.
fn plugin_keys() -> Vec<String> {
    let e = HookConfig::parse(Path::new("k.json"), br#"{"zz_no_such_key": 1}"#)
        .expect_err("an unknown key is refused")
        .to_string();
    let (_, list) = e
        .split_once("expected one of ")
        .unwrap_or_else(|| panic!("the refusal lists the keys: {e}"));
    let mut keys: Vec<String> = list
        .split(", ")
        .map(|k| k.trim().trim_matches('`').to_string())
        .collect();
    keys.sort();
    keys
}

/// Helm refuses `values` at render and at lint, naming `says`.
fn refused(values: &Value, says: &str) {
    let e = helm::try_render(values).expect_err(&values.to_string());
    assert!(e.contains(says), "{values}: render says {e}");
    let report = helm::lint(values);
    let errors = report["errors"].as_array().unwrap();
    assert!(
        errors.iter().any(|m| m.as_str().unwrap().contains(says)),
        "{values}: lint passes it: {report}"
    );
}

/// The schema's config is the plugin's: the same keys (none missing, none extra, so a misspelt
/// key is refused), and every value the schema lists for a key loads in the plugin.
#[test]
fn the_schema_knows_exactly_the_plugin_s_config_keys() {
    let schema = config_schema();
    assert_eq!(schema["additionalProperties"], false, "{schema}");
    let mut keys: Vec<String> = schema["properties"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    keys.sort();
    assert_eq!(keys, plugin_keys());
    let docs = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/configuration.md"),
    )
    .unwrap();
    for k in &keys {
        assert!(
            docs.contains(&format!("| `{k}` |")),
            "docs/configuration.md has no row for {k}"
        );
    }
    for (key, rule) in schema["properties"].as_object().unwrap() {
        let values: Vec<Value> = match (&rule["enum"], &rule["const"]) {
            (Value::Array(a), _) => a.clone(),
            (_, c) if !c.is_null() => vec![c.clone()],
            _ => continue,
        };
        for v in values.into_iter().filter(|v| !v.is_null()) {
            let text = json!({ key: v }).to_string();
            HookConfig::parse(Path::new("k.json"), text.as_bytes())
                .unwrap_or_else(|e| panic!("the schema allows {text}, the plugin refuses it: {e}"));
        }
    }
}

/// A misspelt key or a value the plugin would refuse fails `helm install` and `helm lint` in one
/// line naming the value's path, for the release's config and a pool's; each of them is also
/// one the plugin refuses (so the schema is no stricter than the plugin where it refuses).
#[test]
fn a_misspelt_key_or_a_bad_value_fails_the_render_and_the_lint() {
    for (config, says) in [
        (
            json!({"step_thread_cor": "auto"}),
            "'step_thread_cor' not allowed",
        ),
        (
            json!({"step_thread_core": "sometimes"}),
            "/config/step_thread_core",
        ),
        (json!({"pool_split": "per-gpu"}), "/config/pool_split"),
        (json!({"rank_placement": "on"}), "/config/rank_placement"),
        (json!({"on_error": "ignore"}), "/config/on_error"),
        (json!({"cpuset": true}), "/config/cpuset"),
        (json!({"log_level": "trace"}), "/config/log_level"),
        (json!({"claim_wait_ms": 9000}), "/config/claim_wait_ms"),
        (json!({"claim_wait_ms": "2000"}), "/config/claim_wait_ms"),
        (json!({"gpu_sources": ["gpu"]}), "/config/gpu_sources/0"),
        (json!({"claims_dir": "run/claims"}), "/config/claims_dir"),
    ] {
        refused(&json!({ "config": config }), says);
        let text = config.to_string();
        assert!(
            HookConfig::parse(Path::new("k.json"), text.as_bytes()).is_err(),
            "the plugin loads {text}, which the schema refuses"
        );
        let pool = json!({"pools": [{"name": "a", "config": config}]});
        refused(&pool, &says.replace("/config", "/pools/0/config"));
    }
    // The chart's own rules: the plugin logs to stderr (kubelet rotates it), and metrics.enabled
    // opens the listener on the node's address.
    refused(
        &json!({"config": {"log": "/var/log/cpuplan-hook.log"}}),
        "/config/log",
    );
    refused(
        &json!({"config": {"metrics": {"address": "0.0.0.0:9464"}}}),
        "/config/metrics",
    );
    // What the schema accepts renders into a config the plugin loads.
    let good = json!({"step_thread_core": 3, "pool_split": "off", "rank_placement": "off", "gpu_sources": ["devices", "env"],
        "claim_wait_ms": 500, "log_level": "debug", "metrics": "off"});
    let docs = render(&json!({ "config": good }));
    let cm = one(&docs, "ConfigMap");
    let text = cm["data"]["hook.json"].as_str().unwrap();
    let cfg = HookConfig::parse(Path::new("hook.json"), text.as_bytes())
        .unwrap_or_else(|e| panic!("{text}: {e}"));
    assert_eq!(cfg.claim_wait_ms, 500);
}

/// Two pools of one name would be two DaemonSets of one name: the render fails saying so.
/// (Helm's lint runs templates in a mode where `fail` only logs, and no JSON schema can say
/// "unique by name": the render, which `helm install` and `helm template` run, is the check.)
#[test]
fn two_pools_of_one_name_fail_the_render() {
    let values = json!({"pools": [
        {"name": "h100", "nodeSelector": {"a": "1"}},
        {"name": "l40s", "nodeSelector": {"a": "2"}},
        {"name": "h100", "nodeSelector": {"a": "3"}},
    ]});
    let e = helm::try_render(&values).expect_err("duplicate pool names render");
    assert!(
        e.contains(r#"pools: the name "h100" is given twice"#),
        "{e}"
    );
    assert_eq!(e.matches("given twice").count(), 1, "one message: {e}");
    let distinct = json!({"pools": [{"name": "h100"}, {"name": "l40s"}]});
    assert_eq!(super::daemonsets(&render(&distinct)).len(), 2);
}

/// removeFromNodes: each route that leaves files on the node runs `uninstall` with exactly the
/// install's options and mounts, in an init container, and then only holds the pod; no plugin,
/// no config, no monitors. The plain NRI route, which leaves nothing behind, refuses it.
#[test]
fn remove_from_nodes_runs_uninstall_with_the_install_s_options_and_mounts() {
    for route in ROUTES {
        let mut values = helm::values_file(route);
        values["removeFromNodes"] = json!(true);
        values["metrics"] = json!({"enabled": true, "podMonitor": {"enabled": true},
            "prometheusRule": {"enabled": true}, "dashboard": {"enabled": true}});
        if *route == "nri" {
            let e = helm::try_render(&values).expect_err("nothing to remove on the nri route");
            assert!(
                e.contains("removeFromNodes: the nri route without nri.enableInContainerd"),
                "{e}"
            );
            continue;
        }
        let report = helm::lint(&values);
        assert_eq!(report["errors"], json!([]), "{route}: {report}");
        let installing = render_route(route);
        let install_ds = one(&installing, "DaemonSet");
        let removing = render(&values);
        let kinds: Vec<&str> = removing
            .iter()
            .map(|d| d["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            ["DaemonSet", "ServiceAccount"],
            "{route}: nothing but the removal"
        );
        let ds = one(&removing, "DaemonSet");
        assert_eq!(
            ds["spec"]["selector"], install_ds["spec"]["selector"],
            "{route}: an upgrade of the same DaemonSet"
        );
        let inits = containers(ds, "initContainers");
        let installs = containers(install_ds, "initContainers");
        assert_eq!(inits.len(), 1, "{route}");
        assert_eq!(installs.len(), 1, "{route}");
        let (remove, install) = (inits[0], installs[0]);
        let mut expected = argv(install);
        assert_eq!(expected[..2], [CLI_BIN, "install"], "{route}");
        expected[1] = "uninstall".into();
        assert_eq!(argv(remove), expected, "{route}");
        assert_eq!(remove["volumeMounts"], install["volumeMounts"], "{route}");
        assert_eq!(remove["securityContext"]["privileged"], true);
        let keep: Vec<&Value> = containers(ds, "containers");
        assert_eq!(keep.len(), 1, "{route}");
        assert_eq!(keep[0]["name"], "keep-alive", "{route}");
        assert_eq!(keep[0].get("volumeMounts"), None, "{route}");
        assert_eq!(pod_spec(ds).get("hostPID"), None, "{route}: no host PID");
        let volumes: Vec<&str> = pod_spec(ds)["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .collect();
        for gone in ["nri", "plans", "config"] {
            assert!(!volumes.contains(&gone), "{route}: {gone}");
        }
    }
    // Without it, the same routes install.
    let ds = one(&render_route("hook-crio"), "DaemonSet").clone();
    assert_eq!(argv(named(&ds, "initContainers", "install"))[1], "install");
}
