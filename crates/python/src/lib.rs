//! `cpuplan._cpuplan`: the Rust planner for the Python package `cpuplan`.
//!
//! A thin binding: it converts frozensets, `None` and errors, and calls the `cpuplan`
//! crate (and, to read the hook's plan, the shim's `Plan`). The Python layer
//! (`python/cpuplan`) builds the Python types (`HostGpu`, `StepCpus`, `CpuPlan`) from
//! the tuples returned here. Host-file errors become `OSError` (with the errno where the
//! OS gave one, so a missing file is `FileNotFoundError`); bad values `ValueError`; a
//! setting the mask can't honour `CpuPlanError`.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cpuplan::{
    ClaimError, ClaimOutcome, CpuPlan, CpuSet, Holder, HostGpu, Process, Setting, StepCpus,
    SysfsTopology, Topology, MAX_CPU,
};
use pyo3::create_exception;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyFrozenSet;

mod hookplan;

create_exception!(
    cpuplan.cpus,
    CpuPlanError,
    PyValueError,
    "A step_thread_core value the process mask can't honour."
);

/// A worker's or the API server's CPUs and why, as `(frozenset, str)`.
type PyStep<'py> = (Bound<'py, PyFrozenSet>, String);

/// A plan as `(mask, usable, workers, result, why)`.
type PyPlan<'py> = (
    Bound<'py, PyFrozenSet>,
    usize,
    Vec<Option<PyStep<'py>>>,
    Option<PyStep<'py>>,
    String,
);

/// A CPU set as a frozenset of ints.
fn to_py<'py>(py: Python<'py>, cpus: &CpuSet) -> PyResult<Bound<'py, PyFrozenSet>> {
    PyFrozenSet::new(py, cpus.iter())
}

/// Any iterable of CPU ids (0 to `MAX_CPU`) as a set; a negative or too large id is a `ValueError`.
fn from_py(cpus: &Bound<'_, PyAny>) -> PyResult<CpuSet> {
    let mut set = CpuSet::new();
    for item in cpus.try_iter()? {
        let id: i64 = item?.extract()?;
        if !(0..=MAX_CPU as i64).contains(&id) || !set.insert(id as usize) {
            return Err(PyValueError::new_err(format!(
                "cpu {id} is not a cpu id (0 to {MAX_CPU})"
            )));
        }
    }
    Ok(set)
}

/// A `StepCpus` as `(frozenset, why)`.
fn step_to_py<'py>(py: Python<'py>, s: &StepCpus) -> PyResult<PyStep<'py>> {
    Ok((to_py(py, &s.cpus)?, s.why.clone()))
}

/// A plan as the tuple the Python layer wraps.
fn plan_to_py<'py>(py: Python<'py>, p: &CpuPlan) -> PyResult<PyPlan<'py>> {
    let workers = p
        .workers
        .iter()
        .map(|w| w.as_ref().map(|s| step_to_py(py, s)).transpose())
        .collect::<PyResult<_>>()?;
    let result = p.result.as_ref().map(|s| step_to_py(py, s)).transpose()?;
    Ok((
        to_py(py, &p.mask)?,
        p.usable,
        workers,
        result,
        p.why.clone(),
    ))
}

/// A host file that could not be read or parsed, as `OSError` (errno and message).
fn host_error(e: &cpuplan::Error) -> PyErr {
    let errno = match e {
        cpuplan::Error::Io { source, .. } => source.raw_os_error().or(
            (source.kind() == std::io::ErrorKind::NotFound).then_some(2), // ENOENT
        ),
        _ => None,
    };
    match errno {
        Some(n) => PyOSError::new_err((n, e.to_string())),
        None => PyOSError::new_err(e.to_string()),
    }
}

/// Whether `e` is a file or device that is not there.
fn is_not_found(e: &cpuplan::Error) -> bool {
    matches!(e, cpuplan::Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
}

/// The process whose `/proc` entry is read: the caller for `None`.
fn process(pid: Option<u32>) -> Process {
    pid.map_or(Process::Current, Process::Pid)
}

/// The CPUs in a list such as `0-3,8,10-11`; empty for an empty string.
#[pyfunction]
fn parse_cpu_list<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyFrozenSet>> {
    let set = cpuplan::parse_cpu_list(text).map_err(|e| PyValueError::new_err(e.to_string()))?;
    to_py(py, &set)
}

/// `cpus` (any iterable of CPU ids) as ranges, the inverse of `parse_cpu_list`.
#[pyfunction]
fn format_cpu_list(cpus: &Bound<'_, PyAny>) -> PyResult<String> {
    Ok(cpuplan::format_cpu_list(&from_py(cpus)?))
}

/// The CPUs the process `pid` (the calling thread for `None`) may run on, reading `/proc` under `root`.
#[pyfunction]
#[pyo3(signature = (pid, root))]
fn process_mask<'py>(
    py: Python<'py>,
    pid: Option<u32>,
    root: PathBuf,
) -> PyResult<Bound<'py, PyFrozenSet>> {
    let mask = cpuplan::process_mask(&root, process(pid)).map_err(|e| host_error(&e))?;
    to_py(py, &mask)
}

/// The tightest cgroup CPU quota over `pid`'s cgroups and their ancestors, in CPUs; `None` when no level sets one.
#[pyfunction]
#[pyo3(signature = (root, pid))]
fn cgroup_cpu_quota(root: PathBuf, pid: Option<u32>) -> PyResult<Option<f64>> {
    cpuplan::cgroup_cpu_quota(&root, process(pid)).map_err(|e| host_error(&e))
}

/// The tightest cgroup v2 `cpu.max` over the cgroup `proc_cgroup` names and its ancestors under the unified mount `root`; `None` when none sets one or v2 is absent.
#[pyfunction]
#[pyo3(signature = (root, proc_cgroup))]
fn cgroup_v2_quota(root: PathBuf, proc_cgroup: PathBuf) -> PyResult<Option<f64>> {
    cpuplan::v2_quota_under(&root, &proc_cgroup).map_err(|e| host_error(&e))
}

/// min(|mask|, floor(quota)), at least 1.
#[pyfunction]
#[pyo3(signature = (mask, quota))]
fn usable(mask: &Bound<'_, PyAny>, quota: Option<f64>) -> PyResult<usize> {
    Ok(cpuplan::usable_cpus(&from_py(mask)?, quota))
}

/// The hardware threads of `cpu`'s core, `cpu` included, from sysfs under `root`.
#[pyfunction]
fn smt_siblings<'py>(
    py: Python<'py>,
    cpu: usize,
    root: PathBuf,
) -> PyResult<Bound<'py, PyFrozenSet>> {
    if cpu > MAX_CPU {
        return Err(PyValueError::new_err(format!(
            "cpu {cpu} is not a cpu id (0 to {MAX_CPU})"
        )));
    }
    let set = cpuplan::smt_siblings(&root, cpu).map_err(|e| host_error(&e))?;
    to_py(py, &set)
}

/// The host's GPUs like the device at `like` in PCI address order, as `(address, node, local)`; empty where sysfs has no such device.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn host_gpus<'py>(
    py: Python<'py>,
    like: &str,
    root: PathBuf,
) -> PyResult<Vec<(String, Option<u32>, Option<Bound<'py, PyFrozenSet>>)>> {
    gpus_to_py(py, cpuplan::host_gpus(&root, like))
}

/// As `host_gpus`, over a PCI devices directory itself (`/sys/bus/pci/devices` on a real host).
#[pyfunction]
#[allow(clippy::type_complexity)]
fn host_gpus_in<'py>(
    py: Python<'py>,
    like: &str,
    devices: PathBuf,
) -> PyResult<Vec<(String, Option<u32>, Option<Bound<'py, PyFrozenSet>>)>> {
    gpus_to_py(py, cpuplan::host_gpus_in(&devices, like))
}

/// Found GPUs as `(address, node, local)` tuples; none where sysfs has no such device.
#[allow(clippy::type_complexity)]
fn gpus_to_py(
    py: Python<'_>,
    found: cpuplan::Result<Vec<HostGpu>>,
) -> PyResult<Vec<(String, Option<u32>, Option<Bound<'_, PyFrozenSet>>)>> {
    let gpus = match found {
        Ok(gpus) => gpus,
        Err(e) if is_not_found(&e) => Vec::new(),
        Err(e) => return Err(host_error(&e)),
    };
    gpus.iter()
        .map(|g| {
            let local = g.local.as_ref().map(|l| to_py(py, l)).transpose()?;
            Ok((g.address.clone(), g.node, local))
        })
        .collect()
}

/// Sysfs under a root, where neither a Python callable gives the SMT siblings nor a PCI devices directory the GPUs.
struct PyTopology<'py> {
    sysfs: SysfsTopology,
    siblings: Option<Bound<'py, PyAny>>,
    pci: Option<PathBuf>,
    /// The first Python error the callable raised, raised again once the plan returns.
    error: RefCell<Option<PyErr>>,
}

impl Topology for PyTopology<'_> {
    fn smt_siblings(&self, cpu: usize) -> cpuplan::Result<CpuSet> {
        let Some(siblings) = &self.siblings else {
            return self.sysfs.smt_siblings(cpu);
        };
        match siblings.call1((cpu,)).and_then(|s| from_py(&s)) {
            Ok(mut set) => {
                set.insert(cpu);
                Ok(set)
            }
            Err(e) => {
                let message = e.to_string();
                self.error.borrow_mut().get_or_insert(e);
                Err(cpuplan::Error::malformed(
                    format!("siblings({cpu})"),
                    "the siblings callable raised",
                    message,
                ))
            }
        }
    }

    fn host_gpus(&self, like: &str) -> cpuplan::Result<Vec<HostGpu>> {
        match &self.pci {
            Some(devices) => cpuplan::host_gpus_in(devices, like),
            None => self.sysfs.host_gpus(like),
        }
    }
}

/// The plan for workers on PCI `addresses` (worker order, `None` for a CPU worker), as `(setting, (mask, usable, workers, result, why))`.
///
/// `setting` is `off`, `auto` or a CPU number as text, returned in its canonical form.
/// Sysfs is read under `root`; a `siblings` callable (cpu → iterable of CPUs) replaces
/// sysfs for the SMT siblings, and a `pci` devices directory sysfs's for the GPUs.
#[pyfunction]
#[pyo3(signature = (setting, addresses, mask, usable, root, siblings=None, pci=None))]
#[allow(clippy::too_many_arguments)]
fn deployment_plan<'py>(
    py: Python<'py>,
    setting: &str,
    addresses: Vec<Option<String>>,
    mask: &Bound<'py, PyAny>,
    usable: usize,
    root: PathBuf,
    siblings: Option<Bound<'py, PyAny>>,
    pci: Option<PathBuf>,
) -> PyResult<(String, PyPlan<'py>)> {
    let setting: Setting = setting
        .parse()
        .map_err(|e: cpuplan::CpuPlanError| CpuPlanError::new_err(e.to_string()))?;
    let mask = from_py(mask)?;
    let topo = PyTopology {
        sysfs: SysfsTopology::new(&root),
        siblings,
        pci,
        error: RefCell::new(None),
    };
    let planned = cpuplan::deployment_plan_on(setting, &addresses, &mask, usable, &topo);
    if let Some(e) = topo.error.into_inner() {
        return Err(e);
    }
    match planned {
        Ok(plan) => Ok((setting.to_string(), plan_to_py(py, &plan)?)),
        Err(cpuplan::CpuPlanError::Host(e)) => Err(host_error(&e)),
        Err(e) => Err(CpuPlanError::new_err(e.to_string())),
    }
}

/// A plan's derived values, `(pinned, left, preprocess_threads, png_threads, encode_workers,
/// copy_workers, worker_threads)`, from its usable count, pinned CPUs and `split`
/// (`per-process` or `off`, how the CPUs left are shared among the workers' processes).
#[pyfunction]
#[pyo3(signature = (usable, workers, result, split="per-process"))]
#[allow(clippy::type_complexity)]
fn derived<'py>(
    py: Python<'py>,
    usable: usize,
    workers: Vec<Option<Bound<'py, PyAny>>>,
    result: Option<Bound<'py, PyAny>>,
    split: &str,
) -> PyResult<(
    Bound<'py, PyFrozenSet>,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
)> {
    let step = |cpus: &Bound<'py, PyAny>| -> PyResult<StepCpus> {
        Ok(StepCpus {
            cpus: from_py(cpus)?,
            why: String::new(),
        })
    };
    let split: cpuplan::PoolSplit = split
        .parse()
        .map_err(|e: cpuplan::PoolSplitError| PyValueError::new_err(e.to_string()))?;
    let mut plan = CpuPlan::unpinned(
        Setting::Off,
        CpuSet::new(),
        usable,
        Vec::new(),
        String::new(),
    )
    .with_split(split);
    plan.workers = workers
        .iter()
        .map(|w| w.as_ref().map(step).transpose())
        .collect::<PyResult<_>>()?;
    plan.result = result.as_ref().map(step).transpose()?;
    Ok((
        to_py(py, &plan.pinned())?,
        plan.left(),
        plan.preprocess_threads(),
        plan.png_threads(),
        plan.encode_workers(),
        plan.copy_workers(),
        plan.worker_threads(),
    ))
}

/// Claim every address (canonical PCI form) in the claims directory `dir` for this process, all or none; `None`, or why not.
///
/// The holder is this process: `pid-<pid>` in scope `python:pidns:<inode>` (a pid names one
/// process only within its pid namespace: the same pid in another container is another
/// claimer), its pid and start time, so a claim lasts while the process runs (a dead holder's
/// claims are stale and taken over). The lock is waited on for at most `wait` seconds, without
/// holding the GIL.
#[pyfunction]
fn claim_gpus(
    py: Python<'_>,
    dir: PathBuf,
    addresses: Vec<String>,
    wait: f64,
) -> PyResult<Option<String>> {
    let pid = std::process::id();
    let wait = Duration::try_from_secs_f64(wait.max(0.0)).unwrap_or(Duration::MAX);
    let outcome = py.detach(|| {
        let scope = format!("python:pidns:{}", cpuplan::own_pid_ns());
        let holder = Holder::of_pid(Path::new("/"), &format!("pid-{pid}"), &scope, pid)?
            .ok_or_else(|| {
                ClaimError::Host(cpuplan::Error::malformed(
                    format!("/proc/{pid}/stat"),
                    "this process's own stat is missing",
                    "",
                ))
            })?;
        cpuplan::claim_gpus(&dir, Path::new("/"), &holder, &addresses, wait)
    });
    match outcome {
        Ok(ClaimOutcome::Claimed) => Ok(None),
        Ok(ClaimOutcome::Held { address, by }) => Ok(Some(format!(
            "gpu {address} is held by {} (pid {}) in {}",
            by.container,
            by.pid,
            dir.display()
        ))),
        Err(e @ ClaimError::Address { .. }) => Err(PyValueError::new_err(e.to_string())),
        Err(e) => Ok(Some(format!("cannot claim in {}: {e}", dir.display()))),
    }
}

/// The numbers `(domain, bus, device, function)` of a PCI address in any spelling runtimes, nvidia-smi and sysfs use; `None` if it is none.
#[pyfunction]
fn pci_key(address: &str) -> Option<(u32, u8, u8, u8)> {
    cpuplan::PciAddress::parse(address).map(|a| a.key())
}

/// The canonical `0000:18:00.0` of a PCI address (`00000000:18:00.0`, `18:00.0`, upper case); `None` if it is none.
#[pyfunction]
fn normalize_pci(address: &str) -> Option<String> {
    cpuplan::PciAddress::canonical(address)
}

/// The PCI addresses of the GPUs this process sees, as CUDA numbers them (`cuda:0` first); `None`
/// where none are known: the planner crate's discovery (`cpuplan::gpu::nvidia::cuda_gpus`):
/// `plan_devices` where any is known, else the host's NVIDIA GPUs narrowed by
/// `nvidia_visible`, then `cuda_visible`; files read under `root`.
#[pyfunction]
#[pyo3(signature = (root, plan_devices, nvidia_visible=None, cuda_visible=None))]
fn visible_gpus(
    root: PathBuf,
    plan_devices: Vec<Option<String>>,
    nvidia_visible: Option<String>,
    cuda_visible: Option<String>,
) -> Option<Vec<String>> {
    let known: Vec<String> = plan_devices.into_iter().flatten().collect();
    cpuplan::gpu::nvidia::cuda_gpus(
        &root,
        &known,
        nvidia_visible.as_deref(),
        cuda_visible.as_deref(),
    )
}

/// The Python module `cpuplan._cpuplan`.
#[pymodule]
fn _cpuplan(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("CpuPlanError", m.py().get_type::<CpuPlanError>())?;
    // The package's version: crates/python/Cargo.toml's, which maturin writes into the wheel.
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("MAX_CPU", MAX_CPU)?;
    m.add("DEFAULT_PLAN", cpuplan_shim::DEFAULT_PLAN)?;
    m.add("PLAN_VAR", cpuplan_shim::PLAN_VAR)?;
    m.add("CLAIMS_DIR_VAR", cpuplan::planenv::CLAIMS_DIR)?;
    m.add_function(wrap_pyfunction!(parse_cpu_list, m)?)?;
    m.add_function(wrap_pyfunction!(format_cpu_list, m)?)?;
    m.add_function(wrap_pyfunction!(process_mask, m)?)?;
    m.add_function(wrap_pyfunction!(cgroup_cpu_quota, m)?)?;
    m.add_function(wrap_pyfunction!(cgroup_v2_quota, m)?)?;
    m.add_function(wrap_pyfunction!(usable, m)?)?;
    m.add_function(wrap_pyfunction!(smt_siblings, m)?)?;
    m.add_function(wrap_pyfunction!(host_gpus, m)?)?;
    m.add_function(wrap_pyfunction!(host_gpus_in, m)?)?;
    m.add_function(wrap_pyfunction!(deployment_plan, m)?)?;
    m.add_function(wrap_pyfunction!(derived, m)?)?;
    m.add_function(wrap_pyfunction!(claim_gpus, m)?)?;
    m.add_function(wrap_pyfunction!(pci_key, m)?)?;
    m.add_function(wrap_pyfunction!(normalize_pci, m)?)?;
    m.add_function(wrap_pyfunction!(visible_gpus, m)?)?;
    m.add_function(wrap_pyfunction!(hookplan::read_hook_plan, m)?)?;
    Ok(())
}
