//! podman's `precreate` stage: the runtime config on stdin, the config to use on stdout.
//!
//! The plan's variables (those of `plan.env`) are added to `process.env` where the image or
//! user has not set them, `linux.resources.cpu.cpus` is narrowed to the planned mask where the
//! `numa` rule applies, and the plan is recorded in the annotation `cpuplan.plan`. There is no
//! pid yet: the quota and mask come from the config and the host; GPU claims and the plan files
//! stay with the createRuntime hook. The config is edited as JSON, so every field the hook does
//! not touch passes through unchanged.

use std::path::Path;

use serde_json::{json, Value};

use crate::bundle::BundleConfig;
use crate::config::{HookConfig, OnError};
use crate::explain::explain_bundle;
use crate::hook::Problem;
use crate::output::plan_env_vars;

/// The annotation that carries the plan's JSON.
pub const PLAN_ANNOTATION: &str = "cpuplan.plan";

/// Why precreate failed outright.
#[derive(Debug, thiserror::Error)]
pub enum PrecreateError {
    /// stdin is not a JSON object.
    #[error("precreate: the runtime config on stdin is not JSON: {0}")]
    Json(String),
    /// A planning problem under `on_error: deny`.
    #[error("precreate: {0}")]
    Denied(Problem),
}

/// The config to use for `input` (a runtime config's JSON), planned with `config`.
///
/// With `on_error: allow`, a config that cannot be planned comes back unchanged (the cause is logged).
pub fn precreate(config: &HookConfig, input: &[u8]) -> Result<Value, PrecreateError> {
    let original: Value =
        serde_json::from_slice(input).map_err(|e| PrecreateError::Json(e.to_string()))?;
    if !original.is_object() {
        return Err(PrecreateError::Json("not a JSON object".into()));
    }
    match edit(config, original.clone()) {
        Ok(v) => Ok(v),
        Err(problem) => {
            log::warn!("precreate: planning problem, config left unchanged: {problem}");
            match config.on_error {
                OnError::Allow => Ok(original),
                OnError::Deny => Err(PrecreateError::Denied(problem)),
            }
        }
    }
}

fn edit(config: &HookConfig, mut value: Value) -> Result<Value, Problem> {
    let spec = serde_json::from_value(value.clone()).map_err(|e| {
        Problem::Bundle(crate::bundle::BundleError::Load {
            path: "<stdin>".into(),
            message: format!("not a runtime spec: {e}"),
        })
    })?;
    let cwd = std::env::current_dir().unwrap_or_else(|_| Path::new("/").to_path_buf());
    let bundle = BundleConfig::from_spec("<stdin>".into(), &cwd, spec, false)?;
    let e = explain_bundle(config, &bundle, "(precreate)")?;
    let devices = e.gathered.addresses();
    let vars = plan_env_vars(&e.file.plan, &devices);
    let env = value
        .pointer_mut("/process/env")
        .filter(|v| v.is_array())
        .map(|v| v.as_array_mut().expect("array"));
    let mut added = Vec::new();
    let existing: Vec<String> = env
        .as_ref()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str()?.split('=').next().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    for (k, v) in vars {
        if !existing.iter().any(|e| e == k) {
            added.push(Value::String(format!("{k}={v}")));
        }
    }
    match env {
        Some(a) => a.extend(added),
        None => {
            if value.get("process").is_none_or(|p| !p.is_object()) {
                value["process"] = json!({});
            }
            value["process"]["env"] = Value::Array(added);
        }
    }
    if let Some(cpus) = &e.cpuset {
        if value.get("linux").is_none_or(|l| !l.is_object()) {
            value["linux"] = json!({});
        }
        if value["linux"]
            .get("resources")
            .is_none_or(|r| !r.is_object())
        {
            value["linux"]["resources"] = json!({});
        }
        if value["linux"]["resources"]
            .get("cpu")
            .is_none_or(|c| !c.is_object())
        {
            value["linux"]["resources"]["cpu"] = json!({});
        }
        value["linux"]["resources"]["cpu"]["cpus"] = Value::String(cpus.to_string());
    }
    if value.get("annotations").is_none_or(|a| !a.is_object()) {
        value["annotations"] = json!({});
    }
    let plan_json = serde_json::to_string(&e.file.plan).unwrap_or_default();
    value["annotations"][PLAN_ANNOTATION] = Value::String(plan_json);
    log::info!("precreate: {}", e.file.plan.why);
    Ok(value)
}
