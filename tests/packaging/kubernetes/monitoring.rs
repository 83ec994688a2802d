//! Metrics under the chart: the listener on the node's own address (the downward API's
//! status.hostIP) with no container or host port, one monitor at most and each finding the
//! plugin's port by number, the alerts (checked and unit-tested by Prometheus's `promtool`)
//! and the Grafana dashboard, every query of both naming a metric the plugin serves.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use common::helm;
use cpuplan_hook::nri::metrics::{Fallback, Metrics, Outcome, Request};
use serde_json::{json, Value};

use super::{containers, daemonsets, one, pod_spec, render};

/// Every sample name the plugin's `/metrics` serves (each family with one event of each kind).
fn served() -> BTreeSet<String> {
    let m = Metrics::new();
    m.outcome(Request::Create, Outcome::Pinned);
    m.problem("spec");
    m.fallback(Fallback::ClaimHeld);
    m.took(Request::Create, std::time::Duration::from_millis(3));
    m.registered(true);
    m.encode(Some(1))
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap().to_string())
        .collect()
}

/// The metric names a PromQL expression selects: its identifiers that are neither a function
/// (followed by `(`), an aggregation or another keyword, a label name (inside `{}` or a
/// `by (…)` list) nor a number, duration or Grafana variable.
fn metric_names(expr: &str) -> Vec<String> {
    const KEYWORDS: [&str; 25] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "and",
        "or",
        "unless",
        "offset",
        "sum",
        "min",
        "max",
        "avg",
        "count",
        "stddev",
        "stdvar",
        "topk",
        "bottomk",
        "quantile",
        "count_values",
        "group",
        "limitk",
        "limit_ratio",
    ];
    const LISTS: [&str; 6] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    let b = expr.as_bytes();
    let mut names = Vec::new();
    let (mut i, mut depth_brace, mut labels_list) = (0, 0, false);
    let mut paren_depth = 0usize;
    let mut list_at = 0usize;
    while i < b.len() {
        let c = b[i] as char;
        match c {
            '"' | '\'' | '`' => {
                i += 1;
                while i < b.len() && b[i] as char != c {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            '{' => (depth_brace, i) = (depth_brace + 1, i + 1),
            '}' => (depth_brace, i) = (depth_brace - 1, i + 1),
            '[' => {
                while i < b.len() && b[i] != b']' {
                    i += 1;
                }
            }
            '(' => (paren_depth, i) = (paren_depth + 1, i + 1),
            ')' => {
                if labels_list && paren_depth == list_at {
                    labels_list = false;
                }
                paren_depth = paren_depth.saturating_sub(1);
                i += 1;
            }
            '$' => {
                i += 1;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b"_:".contains(&b[i])) {
                    i += 1;
                }
                let word = &expr[start..i];
                let next = expr[i..].trim_start();
                if KEYWORDS.contains(&word) {
                    if LISTS.contains(&word) && next.starts_with('(') {
                        labels_list = true;
                        list_at = paren_depth + 1;
                    }
                } else if depth_brace == 0 && !labels_list && !next.starts_with('(') {
                    names.push(word.to_string());
                }
            }
            c if c.is_ascii_digit() || c == '.' => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    names
}

/// Every expression names metrics, and only ones the plugin serves.
fn assert_served(what: &str, exprs: &[String]) {
    let served = served();
    for e in exprs {
        let names = metric_names(e);
        assert!(!names.is_empty(), "{what}: {e} names no metric");
        for n in names {
            assert!(
                served.contains(&n),
                "{what}: {e} queries {n}, which the plugin does not serve: {served:?}"
            );
        }
    }
}

/// Runs Prometheus's `promtool` (scripts/test.sh installs Debian's) with `args` in `dir`.
fn promtool(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("promtool (Debian's promtool package; scripts/test.sh installs it)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}: {text}");
    text
}

/// `expr` as a recording rule file's group (promtool checks the PromQL of each).
fn as_rules(exprs: &[String]) -> Value {
    let rules: Vec<Value> = exprs
        .iter()
        .enumerate()
        .map(|(i, e)| json!({"record": format!("cpuplan:check_{i}"), "expr": e}))
        .collect();
    json!({"groups": [{"name": "check", "rules": rules}]})
}

#[test]
fn the_metric_name_reader_finds_names_and_nothing_else() {
    assert_eq!(
        metric_names(
            r#"histogram_quantile(0.99, sum by (le, node) (rate(a_bucket{x="y", z=~"$node"}[$__rate_interval]))) > 1 unless on (node) b"#
        ),
        ["a_bucket", "b"]
    );
    assert_eq!(
        metric_names("absent(cpuplan_build_info{namespace=\"n\"})"),
        ["cpuplan_build_info"]
    );
}

/// metrics.enabled: `--metrics-address=$(NODE_IP):PORT` with NODE_IP from status.hostIP (the
/// node's own address: the pod is on the host network, so never 0.0.0.0), no containerPort
/// and so no host port anywhere in the pod (on a host-network pod a containerPort is a host
/// port, which with maxSurge 1 blocks the rollout's new pod), and no listener in the config.
#[test]
fn metrics_listen_on_the_node_s_own_address_without_a_host_port() {
    for values in [
        helm::values_file("metrics"),
        helm::values_file("servicemonitor"),
        json!({"metrics": {"enabled": true, "port": 9400}, "pools": [{"name": "a"}, {"name": "b"}]}),
    ] {
        let port = values["metrics"]["port"].as_i64().unwrap_or(8893);
        let docs = render(&values);
        for ds in daemonsets(&docs) {
            let c = containers(ds, "containers")[0];
            assert_eq!(c["name"], "plugin");
            let args: Vec<&str> = c["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap())
                .collect();
            let flag = format!("--metrics-address=$(NODE_IP):{port}");
            assert_eq!(
                args.iter()
                    .filter(|a| a.contains("metrics"))
                    .collect::<Vec<_>>(),
                [&flag.as_str()],
                "{values}"
            );
            assert_eq!(
                c["env"],
                json!([{"name": "NODE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}])
            );
            let spec = pod_spec(ds).to_string();
            for key in ["\"ports\"", "containerPort", "hostPort", "0.0.0.0"] {
                assert!(!spec.contains(key), "{key} in the pod: {spec}");
            }
            assert_eq!(pod_spec(ds)["hostNetwork"], true);
        }
        for cm in docs.iter().filter(|d| d["kind"] == "ConfigMap") {
            if let Some(text) = cm["data"]["hook.json"].as_str() {
                let config: Value = serde_json::from_str(text).unwrap();
                assert_eq!(
                    config.get("metrics"),
                    None,
                    "the flag, not the config: {config}"
                );
            }
        }
    }
    // Off by default: no flag, no env, no monitor, alert or dashboard.
    let docs = render(&json!({}));
    let c = containers(one(&docs, "DaemonSet"), "containers")[0];
    assert!(!c["args"].to_string().contains("metrics"), "{c}");
    assert_eq!(c.get("env"), None);
    let kinds: Vec<&Value> = docs.iter().map(|d| &d["kind"]).collect();
    assert_eq!(
        kinds,
        [
            &json!("ConfigMap"),
            &json!("DaemonSet"),
            &json!("ServiceAccount")
        ]
    );
}

/// One monitor at most (both would scrape every series twice): the schema refuses both, at
/// render and at lint. The PodMonitor keeps the plugin container's port-free target and gives
/// it the port by number at the pod's (the node's) address; the ServiceMonitor's Service
/// targets the port by number; each selects the plugin's pods.
#[test]
fn one_monitor_at_most_and_each_reaches_the_port_by_number() {
    let both = json!({"metrics": {"enabled": true, "serviceMonitor": {"enabled": true},
        "podMonitor": {"enabled": true}}});
    let e = helm::try_render(&both).expect_err("both monitors render");
    assert!(e.contains("/metrics/podMonitor/enabled"), "{e}");
    let report = helm::lint(&both);
    assert!(
        report["errors"]
            .to_string()
            .contains("/metrics/podMonitor/enabled"),
        "{report}"
    );
    for name in helm::documented() {
        let docs = render(&helm::values_file(&name));
        let monitors = docs
            .iter()
            .filter(|d| d["kind"] == "PodMonitor" || d["kind"] == "ServiceMonitor")
            .count();
        assert!(monitors <= 1, "ci/{name}-values.yaml: {monitors} monitors");
    }

    let docs = render(&helm::values_file("metrics"));
    let ds = one(&docs, "DaemonSet");
    let pod_labels = &ds["spec"]["template"]["metadata"]["labels"];
    let matches = |sel: &Value, labels: &Value| {
        sel.as_object()
            .unwrap()
            .iter()
            .all(|(k, v)| &labels[k] == v)
    };
    let pm = one(&docs, "PodMonitor");
    assert!(matches(&pm["spec"]["selector"]["matchLabels"], pod_labels));
    let ep = &pm["spec"]["podMetricsEndpoints"][0];
    for by_name in ["port", "portNumber", "targetPort"] {
        assert_eq!(ep.get(by_name), None, "no declared port to match: {ep}");
    }
    assert_eq!(
        ep["relabelings"],
        json!([
            {"sourceLabels": ["__meta_kubernetes_pod_container_name"], "regex": "plugin", "action": "keep"},
            {"sourceLabels": ["__meta_kubernetes_pod_ip"], "regex": "(.+)", "targetLabel": "__address__",
             "replacement": "${1}:8893"},
            {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}
        ])
    );
    assert_eq!(
        containers(ds, "containers")[0]["name"],
        "plugin",
        "the container the PodMonitor keeps"
    );

    let docs = render(&helm::values_file("servicemonitor"));
    let ds = one(&docs, "DaemonSet");
    let pod_labels = &ds["spec"]["template"]["metadata"]["labels"];
    let svc = one(&docs, "Service");
    assert!(matches(&svc["spec"]["selector"], pod_labels), "{svc}");
    assert_eq!(svc["spec"]["clusterIP"], "None");
    assert_eq!(
        svc["spec"]["ports"],
        json!([{"name": "metrics", "port": 8893, "targetPort": 8893, "protocol": "TCP"}])
    );
    let sm = one(&docs, "ServiceMonitor");
    assert!(matches(
        &sm["spec"]["selector"]["matchLabels"],
        &svc["metadata"]["labels"]
    ));
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics");
    // Metrics on the hook route: nothing (the hook route has no daemon).
    let hook = render(&json!({"route": "hook", "metrics": {"enabled": true,
        "podMonitor": {"enabled": true}, "prometheusRule": {"enabled": true},
        "dashboard": {"enabled": true}}}));
    assert!(hook
        .iter()
        .all(|d| d["kind"] == "DaemonSet" || d["kind"] == "ServiceAccount"));
}

/// The alerts: Prometheus's own checker accepts the rendered rule groups (PromQL and the
/// annotation templates), every expression names metrics the plugin serves, and promtool's
/// rule unit test shows each alert firing on the series it is for and staying quiet otherwise:
/// a node whose plugin is not registered (but not a node where a rollout's new pod stands by
/// beside a registered one), no plugin scraped, a config problem, other problems by cause,
/// fallbacks.
#[test]
fn the_alerts_name_served_metrics_and_fire_on_what_they_are_for() {
    let docs = render(&helm::values_file("metrics"));
    let rule = one(&docs, "PrometheusRule");
    let groups = rule["spec"]["groups"].clone();
    let rules = groups[0]["rules"].as_array().unwrap().clone();
    let exprs: Vec<String> = rules
        .iter()
        .map(|r| r["expr"].as_str().unwrap().to_string())
        .collect();
    assert_served("PrometheusRule", &exprs);
    let t = tempfile::tempdir().unwrap();
    std::fs::write(
        t.path().join("rules.yaml"),
        json!({ "groups": groups }).to_string(),
    )
    .unwrap();
    let checked = promtool(t.path(), &["check", "rules", "rules.yaml"]);
    assert!(
        checked.contains(&format!("SUCCESS: {} rules found", rules.len())),
        "{checked}"
    );
    for r in &rules {
        let severity = r["labels"]["severity"].as_str().unwrap_or_default();
        assert!(["critical", "warning", "info"].contains(&severity), "{r}");
        assert!(r["annotations"]["summary"].is_string(), "{r}");
    }

    // The unit test: annotations left out (promtool compares them whole); labels compared.
    let bare: Vec<Value> = rules
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r.as_object_mut().unwrap().remove("annotations");
            r
        })
        .collect();
    std::fs::write(
        t.path().join("bare.yaml"),
        json!({"groups": [{"name": "cpuplan", "rules": bare}]}).to_string(),
    )
    .unwrap();
    let ns = helm::NAMESPACE;
    let s = |name: &str, labels: &str, values: &str| json!({"series": format!("{name}{{namespace=\"{ns}\",{labels}}}"), "values": values});
    let alert = |severity: &str, labels: Value| {
        let mut l = labels;
        l["severity"] = json!(severity);
        l["namespace"] = json!(ns);
        json!({ "exp_labels": l })
    };
    let at = |t: &str, name: &str, exp: Vec<Value>| json!({"eval_time": t, "alertname": name, "exp_alerts": exp});
    let firing = json!({"interval": "1m", "input_series": [
        // n1: not registered; n2: a rollout, the old pod registered, the new one standing by.
        s("cpuplan_nri_registered", "node=\"n1\",pod=\"a\"", "0x30"),
        s("cpuplan_nri_registered", "node=\"n2\",pod=\"b\"", "1x30"),
        s("cpuplan_nri_registered", "node=\"n2\",pod=\"c\"", "0x30"),
        s("cpuplan_build_info", "node=\"n1\",pod=\"a\",version=\"0.1.0\"", "1x30"),
        s("cpuplan_nri_problems_total", "node=\"n1\",pod=\"a\",cause=\"config\"", "0 0 0 1 2 3 3 3 3 3 3"),
        s("cpuplan_nri_problems_total", "node=\"n2\",pod=\"b\",cause=\"spec\"", "0 0 0 0 1 1 1 1 1 1 1"),
        s("cpuplan_nri_problems_total", "node=\"n2\",pod=\"b\",cause=\"read\"", "0x30"),
        s("cpuplan_nri_fallbacks_total", "node=\"n2\",pod=\"b\",cause=\"claim_held\"", "0 0 0 0 0 2 2 2 2 2 2"),
        s("cpuplan_nri_fallbacks_total", "node=\"n1\",pod=\"a\",cause=\"cpuset_kept\"", "0x30"),
    ], "alert_rule_test": [
        at("10m", "CpuplanPluginNotRegistered", vec![alert("critical", json!({"node": "n1"}))]),
        at("3m", "CpuplanPluginNotRegistered", vec![]),
        at("10m", "CpuplanPluginAbsent", vec![]),
        at("8m", "CpuplanConfigUnusable", vec![alert("critical", json!({"node": "n1"}))]),
        at("8m", "CpuplanPlanningProblems", vec![alert("warning", json!({"node": "n2", "cause": "spec"}))]),
        at("8m", "CpuplanPlansFallingBack", vec![alert("info", json!({"node": "n2", "cause": "claim_held"}))]),
        at("8m", "CpuplanSlowAnswers", vec![]),
    ]});
    let absent = json!({"interval": "1m", "input_series": [
        s("cpuplan_build_info", "node=\"n1\",pod=\"a\",version=\"0.1.0\"", "1 1 1 stale"),
    ], "alert_rule_test": [
        at("10m", "CpuplanPluginAbsent", vec![]),
        at("25m", "CpuplanPluginAbsent", vec![alert("warning", json!({}))]),
    ]});
    std::fs::write(
        t.path().join("test.yaml"),
        json!({"rule_files": ["bare.yaml"], "evaluation_interval": "1m",
            "tests": [firing, absent]})
        .to_string(),
    )
    .unwrap();
    let tested = promtool(t.path(), &["test", "rules", "test.yaml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
}

/// The dashboard: a ConfigMap with Grafana's sidecar label, holding JSON that parses, whose
/// every query (panels and variables) names metrics the plugin serves and parses as PromQL
/// (promtool, with Grafana's variables given values).
#[test]
fn the_dashboard_parses_and_queries_only_served_metrics() {
    let docs = render(&helm::values_file("metrics"));
    let cm = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["data"].get("cpuplan.json").is_some())
        .expect("the dashboard's ConfigMap");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    let text = cm["data"]["cpuplan.json"].as_str().unwrap();
    let dash: Value = serde_json::from_str(text).expect("the dashboard is JSON");
    let shipped =
        std::fs::read_to_string(helm::chart_dir().join("dashboards/cpuplan.json")).unwrap();
    assert_eq!(dash, serde_json::from_str::<Value>(&shipped).unwrap());
    assert_eq!(dash["title"], "cpuplan");
    let mut exprs = Vec::new();
    for p in dash["panels"].as_array().unwrap() {
        let targets = p["targets"].as_array().expect("a panel with queries");
        assert!(!targets.is_empty(), "{}", p["title"]);
        for t in targets {
            exprs.push(t["expr"].as_str().unwrap().to_string());
        }
    }
    assert!(exprs.len() >= 8, "{exprs:?}");
    let mut variables = Vec::new();
    for v in dash["templating"]["list"].as_array().unwrap() {
        if v["type"] == "query" {
            let q = v["query"]["query"].as_str().unwrap();
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|r| r.rsplit_once(','))
                .map(|(m, _)| m.trim().to_string())
                .unwrap_or_else(|| panic!("a label_values query: {q}"));
            variables.push(inner);
        }
    }
    assert_served("dashboard", &exprs);
    assert_served("dashboard variables", &variables);
    let promql: Vec<String> = exprs
        .iter()
        .chain(&variables)
        .map(|e| {
            e.replace("$__rate_interval", "5m")
                .replace("$namespace", ".*")
                .replace("$node", ".*")
        })
        .collect();
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("q.yaml"), as_rules(&promql).to_string()).unwrap();
    promtool(t.path(), &["check", "rules", "q.yaml"]);
    // Off unless asked: the default and the ServiceMonitor file render no dashboard or rule.
    for values in [json!({}), helm::values_file("servicemonitor")] {
        let docs = render(&values);
        assert!(!docs
            .iter()
            .any(|d| d["kind"] == "PrometheusRule" || d["data"].get("cpuplan.json").is_some()));
    }
    // Another namespace for Grafana's sidecar.
    let docs = render(
        &json!({"metrics": {"enabled": true, "dashboard": {"enabled": true,
        "namespace": "monitoring"}}}),
    );
    let cm = docs
        .iter()
        .find(|d| d["data"].get("cpuplan.json").is_some())
        .unwrap();
    assert_eq!(cm["metadata"]["namespace"], "monitoring");
}
