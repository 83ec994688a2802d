//! Reading the plan the hook wrote into the container: the one place the package reads plan files.
//!
//! The shim's [`Plan`] reads `plan.json` (or the plan variables of `plan.env`); every worker's
//! device, in worker order, is the plan's own (`devices` in `plan.json`, `CPUPLAN_DEVICES`).

use std::path::{Path, PathBuf};

use cpuplan_shim::{Plan, ShimError};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

use crate::{plan_to_py, PyPlan};

/// The hook's plan as `(setting, (mask, usable, workers, result, why), devices, source, pool_split)`.
type PyHookPlan<'py> = (String, PyPlan<'py>, Vec<Option<String>>, String, String);

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

/// The plan file at `path` with its workers' devices; `Ok(None)` when there is no such file.
fn from_file(path: &Path) -> PyResult<Option<Found>> {
    match Plan::load_from(path) {
        Ok(plan) => Ok(Some(with_devices(plan))),
        Err(ShimError::NoPlan(_)) => Ok(None),
        Err(e) => Err(shim_error(e)),
    }
}

/// The plan in this process's `CPUPLAN_*` variables with its workers' devices; `Ok(None)` when `CPUPLAN_MASK` is not set.
fn from_env() -> PyResult<Option<Found>> {
    match Plan::from_env() {
        Ok(plan) => Ok(Some(with_devices(plan))),
        Err(ShimError::NoPlan(_)) => Ok(None),
        Err(e) => Err(shim_error(e)),
    }
}

fn with_devices(plan: Plan) -> Found {
    let devices = plan.file.worker_devices();
    (plan, devices)
}

/// The hook's plan: the file at `path`; with no `path`, `$CPUPLAN_PLAN` (else `/run/cpuplan/plan.json`), else the `CPUPLAN_*` variables.
///
/// Returns `None` when there is none (a `path` given but missing is `FileNotFoundError`);
/// a plan that exists but does not parse raises `ValueError`, one that can't be read `OSError`.
#[pyfunction]
#[pyo3(signature = (path=None))]
pub fn read_hook_plan(py: Python<'_>, path: Option<PathBuf>) -> PyResult<Option<PyHookPlan<'_>>> {
    let found = match &path {
        Some(p) => match from_file(p)? {
            Some(found) => Some(found),
            None => {
                return Err(PyOSError::new_err((
                    2, // ENOENT
                    format!("no plan: {} does not exist", p.display()),
                )));
            }
        },
        None => match from_file(&Plan::default_path())? {
            Some(found) => Some(found),
            None => from_env()?,
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
        plan.file.pool_split.to_string(),
    )))
}
