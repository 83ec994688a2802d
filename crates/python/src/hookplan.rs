//! Reading the plan the hook wrote into the container: the one place the package reads plan files.
//!
//! The shim's [`Plan`] reads `plan.json` (or the `CPUPLAN_*` variables of `plan.env`). Its
//! `PlanFile` keeps a device only for a pinned worker, so the container's GPUs (every
//! worker's device, in worker order) come from what the hook writes beside it:
//! `inputs.gpus` in `plan.json`, `CPUPLAN_DEVICES` in `plan.env`.

use std::path::{Path, PathBuf};

use cpuplan_shim::{Plan, ShimError};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

use crate::{plan_to_py, PyPlan};

/// The hook's plan as `(setting, (mask, usable, workers, result, why), devices, source)`.
type PyHookPlan<'py> = (String, PyPlan<'py>, Vec<Option<String>>, String);

/// A plan that was found, with its workers' devices.
type Found = (Plan, Vec<Option<String>>);

/// A shim error as the Python exception for it: a file that can't be read is `OSError`, one that doesn't parse `ValueError`.
fn shim_error(e: ShimError) -> PyErr {
    match &e {
        ShimError::Io { source, .. } => match source.raw_os_error() {
            Some(n) => PyOSError::new_err((n, e.to_string())),
            None => PyOSError::new_err(e.to_string()),
        },
        _ => PyValueError::new_err(e.to_string()),
    }
}

/// Each worker's device: the one the plan names for a pinned worker, else the `listed` one at its index when the list has one per worker.
fn devices(plan: &Plan, listed: Option<Vec<Option<String>>>) -> Vec<Option<String>> {
    let n = plan.file.workers.len();
    let listed = listed.filter(|l| l.len() == n).unwrap_or_default();
    (0..n)
        .map(|i| {
            plan.file.workers[i]
                .as_ref()
                .and_then(|w| w.device.clone())
                .or_else(|| listed.get(i).cloned().flatten())
        })
        .collect()
}

/// The plan file at `path` with its workers' devices; `Ok(None)` when there is no such file.
fn from_file(path: &Path) -> Result<Option<Found>, ShimError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(ShimError::Io {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let plan = Plan::parse_json(&text, path)?;
    let gpus = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| {
            v.pointer("/inputs/gpus")?
                .as_array()?
                .iter()
                .map(|g| g.as_str().map(|s| Some(s.to_string())))
                .collect::<Option<Vec<_>>>()
        });
    let devices = devices(&plan, gpus);
    Ok(Some((plan, devices)))
}

/// The plan in this process's `CPUPLAN_*` variables with its workers' devices; `Ok(None)` when `CPUPLAN_MASK` is not set.
fn from_env() -> Result<Option<Found>, ShimError> {
    let plan = match Plan::from_env() {
        Ok(plan) => plan,
        Err(ShimError::NoPlan(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    let listed = std::env::var("CPUPLAN_DEVICES")
        .ok()
        .filter(|d| !d.is_empty())
        .map(|d| {
            d.split(';')
                .map(|s| Some(s.trim().to_string()).filter(|s| !s.is_empty()))
                .collect()
        });
    let devices = devices(&plan, listed);
    Ok(Some((plan, devices)))
}

/// The hook's plan: the file at `path`; with no `path`, `$CPUPLAN_PLAN` (else `/run/cpuplan/plan.json`), else the `CPUPLAN_*` variables.
///
/// Returns `None` when there is none (a `path` given but missing is `FileNotFoundError`);
/// a plan that exists but does not parse raises `ValueError`, one that can't be read `OSError`.
#[pyfunction]
#[pyo3(signature = (path=None))]
pub fn read_hook_plan(py: Python<'_>, path: Option<PathBuf>) -> PyResult<Option<PyHookPlan<'_>>> {
    let found = match &path {
        Some(p) => match from_file(p).map_err(shim_error)? {
            Some(found) => Some(found),
            None => {
                return Err(PyOSError::new_err((
                    2, // ENOENT
                    format!("no plan: {} does not exist", p.display()),
                )));
            }
        },
        None => match from_file(&Plan::default_path()).map_err(shim_error)? {
            Some(found) => Some(found),
            None => from_env().map_err(shim_error)?,
        },
    };
    let Some((plan, devices)) = found else {
        return Ok(None);
    };
    let cpu_plan = plan.file.to_plan();
    Ok(Some((
        plan.file.setting.clone(),
        plan_to_py(py, &cpu_plan)?,
        devices,
        plan.source.clone(),
    )))
}
