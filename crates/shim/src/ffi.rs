//! The C ABI (`include/cpuplan.h`): load a plan, pin the calling thread, read the plan's sizes.
//!
//! Every function returns 0 (or a count) on success and a negative errno on failure,
//! with a message for [`cpuplan_last_error`]. Nothing unwinds across the boundary: each
//! body runs under `catch_unwind`, and a panic returns `-EIO`.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use nix::libc;

use crate::error::ShimError;
use crate::pin::{pin_result_with, pin_worker_with, Pinning};
use crate::plan::Plan;
use crate::state::{install, installed};
use crate::thread::on_process_mask;

thread_local! {
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
    static LAST_WHY: RefCell<Option<CString>> = const { RefCell::new(None) };
}

fn c_string(s: String) -> CString {
    CString::new(s.replace('\0', "\\0")).unwrap_or_default()
}

fn set_last(cell: &'static std::thread::LocalKey<RefCell<Option<CString>>>, msg: Option<String>) {
    cell.with(|c| *c.borrow_mut() = msg.map(c_string));
}

/// Runs `f`, turning an error into its negated errno and a panic into `-EIO`.
fn guard(f: impl FnOnce() -> Result<c_int, ShimError>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(n)) => {
            set_last(&LAST_ERROR, None);
            n
        }
        Ok(Err(e)) => {
            let errno = e.errno();
            set_last(&LAST_ERROR, Some(e.to_string()));
            -errno
        }
        Err(_) => {
            set_last(&LAST_ERROR, Some("cpuplan: internal error (panic)".into()));
            -libc::EIO
        }
    }
}

fn the_plan() -> Result<std::sync::Arc<Plan>, ShimError> {
    installed().ok_or_else(|| ShimError::NoPlan("no plan loaded (call cpuplan_load first)".into()))
}

fn count(n: usize) -> c_int {
    c_int::try_from(n).unwrap_or(c_int::MAX)
}

fn record(p: Pinning) -> c_int {
    set_last(&LAST_WHY, Some(p.to_string()));
    0
}

/// Loads and installs the plan at `path` (NULL: `$CPUPLAN_PLAN`, else `/run/cpuplan/plan.json`, else the `CPUPLAN_*` variables).
///
/// # Safety
/// `path` is NULL or a NUL-terminated string valid for the duration of the call.
#[no_mangle]
pub unsafe extern "C" fn cpuplan_load(path: *const c_char) -> c_int {
    let path = if path.is_null() {
        None
    } else {
        // SAFETY: the caller guarantees a non-NULL `path` is a NUL-terminated string that
        // outlives this call; it is copied before returning.
        Some(
            unsafe { CStr::from_ptr(path) }
                .to_string_lossy()
                .into_owned(),
        )
    };
    guard(move || {
        let plan = match path {
            None => Plan::find()?,
            Some(p) => Plan::load_from(Path::new(&p))?,
        };
        install(Some(plan));
        Ok(0)
    })
}

/// Pins the calling thread to worker `worker`'s CPUs; 0 also when the plan leaves it unpinned (see [`cpuplan_last_why`]).
#[no_mangle]
pub extern "C" fn cpuplan_pin_worker(worker: c_int) -> c_int {
    cpuplan_pin_worker_warm(worker, None, std::ptr::null_mut())
}

/// [`cpuplan_pin_worker`], calling `warm(arg)` on the process mask just before the move (when not NULL).
#[no_mangle]
pub extern "C" fn cpuplan_pin_worker_warm(
    worker: c_int,
    warm: Option<extern "C" fn(*mut c_void)>,
    arg: *mut c_void,
) -> c_int {
    guard(|| {
        let i = usize::try_from(worker).map_err(|_| ShimError::Var {
            source_name: "cpuplan_pin_worker".into(),
            name: "worker".into(),
            value: worker.to_string(),
            what: "a worker index is 0 or more".into(),
        })?;
        let plan = the_plan()?;
        let p = pin_worker_with(&plan, i, || {
            if let Some(f) = warm {
                f(arg)
            }
        })?;
        Ok(record(p))
    })
}

/// Pins the calling thread to the API server's result CPUs; 0 also when the plan leaves them unpinned.
#[no_mangle]
pub extern "C" fn cpuplan_pin_result() -> c_int {
    guard(|| {
        let plan = the_plan()?;
        Ok(record(pin_result_with(&plan, || ())?))
    })
}

/// Moves the calling thread onto the process mask (the plan's mask, else the affinity at first use).
#[no_mangle]
pub extern "C" fn cpuplan_to_process_mask() -> c_int {
    guard(|| {
        on_process_mask()?;
        Ok(0)
    })
}

/// The loaded plan's usable CPU count, or a negative errno.
#[no_mangle]
pub extern "C" fn cpuplan_usable() -> c_int {
    guard(|| Ok(count(the_plan()?.usable())))
}

/// The loaded plan's CPUs left for pools, or a negative errno.
#[no_mangle]
pub extern "C" fn cpuplan_left() -> c_int {
    guard(|| Ok(count(the_plan()?.left())))
}

/// How many workers the loaded plan lists, or a negative errno.
#[no_mangle]
pub extern "C" fn cpuplan_workers() -> c_int {
    guard(|| Ok(count(the_plan()?.workers())))
}

/// The intra-op threads of `worker`'s process (0 or more), or of the API server (-1), under the
/// loaded plan ([`cpuplan::CpuPlan::threads_for`]), or a negative errno.
#[no_mangle]
pub extern "C" fn cpuplan_threads(worker: c_int) -> c_int {
    guard(|| {
        let process = match worker {
            -1 => cpuplan::Role::ApiServer,
            w => cpuplan::Role::Worker(usize::try_from(w).map_err(|_| ShimError::Var {
                source_name: "cpuplan_threads".into(),
                name: "worker".into(),
                value: worker.to_string(),
                what: "a worker index is 0 or more, or -1 for the API server".into(),
            })?),
        };
        Ok(count(the_plan()?.threads_for(process)))
    })
}

/// Panics inside the guard: returns `-EIO` where panics unwind (test builds only, feature `panic-test`).
#[cfg(feature = "panic-test")]
#[no_mangle]
pub extern "C" fn cpuplan_test_panic() -> c_int {
    guard(|| panic!("cpuplan_test_panic: a panic injected by the panic-test feature"))
}

/// The message of this thread's last failed call, or NULL if its last call succeeded; valid until this thread's next call.
#[no_mangle]
pub extern "C" fn cpuplan_last_error() -> *const c_char {
    LAST_ERROR.with(|c| c.borrow().as_ref().map_or(std::ptr::null(), |s| s.as_ptr()))
}

/// What this thread's last successful pin call did ("pinned to cpus ..." or "left unpinned: ..."), or NULL.
#[no_mangle]
pub extern "C" fn cpuplan_last_why() -> *const c_char {
    LAST_WHY.with(|c| c.borrow().as_ref().map_or(std::ptr::null(), |s| s.as_ptr()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last_error() -> Option<String> {
        let p = cpuplan_last_error();
        // SAFETY: a non-NULL cpuplan_last_error() is a NUL-terminated string owned by this
        // thread's slot, unchanged until this thread's next call.
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }

    #[test]
    fn a_panic_is_caught_and_reported() {
        assert_eq!(guard(|| panic!("boom")), -libc::EIO);
        assert_eq!(
            last_error().as_deref(),
            Some("cpuplan: internal error (panic)")
        );
        assert_eq!(guard(|| Ok(5)), 5);
        assert_eq!(last_error(), None);
    }

    #[test]
    fn errors_become_negative_errnos_with_their_message() {
        assert_eq!(guard(|| Err(ShimError::NoPlan("x".into()))), -libc::ENOENT);
        assert_eq!(last_error().as_deref(), Some("no plan: x"));
        assert_eq!(guard(|| Err(ShimError::EmptyCpus)), -libc::EINVAL);
        let io = std::io::Error::from_raw_os_error(libc::EPERM);
        let e = ShimError::SetAffinity {
            cpus: cpuplan::CpuSet::new(),
            source: io,
        };
        assert_eq!(guard(|| Err(e)), -libc::EPERM);
    }

    #[test]
    fn a_nul_in_a_message_does_not_lose_it() {
        assert_eq!(c_string("a\0b".into()).to_str().unwrap(), "a\\0b");
    }

    #[test]
    fn a_load_path_that_is_not_there_is_enoent() {
        let path = CString::new("/nonexistent/cpuplan/plan.json").unwrap();
        // SAFETY: `path` is a NUL-terminated string alive for the call.
        assert_eq!(unsafe { cpuplan_load(path.as_ptr()) }, -libc::ENOENT);
        assert_eq!(
            last_error().as_deref(),
            Some("no plan: /nonexistent/cpuplan/plan.json does not exist")
        );
    }
}
