//! The C ABI from Python through the ctypes wrapper: examples/python/worker.py.

mod common;

use std::process::Command;

use common::{profile_dir, sample_plan, two_cpus, workspace_root, write_plan};

fn worker_py(args: &[&std::ffi::OsStr]) -> (bool, String, String) {
    let out = Command::new("python3")
        .arg(workspace_root().join("examples/python/worker.py"))
        .args(args)
        .env("CPUPLAN_LIB", profile_dir().join("libcpuplan_shim.so"))
        .env_remove("CPUPLAN_PLAN")
        .output()
        .expect("python3 is needed for the Python test");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn worker_py_pins_itself_and_its_helper_runs_on_the_process_mask() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(dir.path(), &sample_plan());
    let (ok, out, err) = worker_py(&[plan.as_os_str()]);
    assert!(ok, "{out}{err}");
    let (a, b) = two_cpus();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "plan: usable=2 left=1 workers=2");
    assert_eq!(lines[1], format!("warm cpus={a},{b}"));
    assert!(
        lines[2].starts_with(&format!("worker 0: pinned to cpus {b} (")),
        "{out}"
    );
    assert_eq!(lines[3], format!("main cpus={b}"));
    assert_eq!(lines[4], format!("helper cpus={a},{b}"));
}

#[test]
fn worker_py_without_a_plan_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("plan.json");
    let (ok, out, err) = worker_py(&[missing.as_os_str()]);
    assert!(!ok, "{out}");
    assert_eq!(
        err.trim(),
        format!(
            "no plan, running unpinned: [Errno 2] no plan: {} does not exist",
            missing.display()
        )
    );
}

#[test]
fn python_wrapper_finds_the_plan_through_the_variables() {
    // No file anywhere: cpuplan.load() falls back to the CPUPLAN_* variables of plan.env.
    let script = "import sys; sys.path.insert(0, sys.argv[1]); import cpuplan; cpuplan.load(); \
                  print(cpuplan.usable(), cpuplan.left(), cpuplan.workers(), cpuplan.pin_worker(5))";
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(workspace_root().join("examples/python"))
        .env("CPUPLAN_LIB", profile_dir().join("libcpuplan_shim.so"))
        .env("CPUPLAN_PLAN", "/nonexistent/plan.json")
        .env("CPUPLAN_MASK", "0-1")
        .env("CPUPLAN_USABLE", "2")
        .env("CPUPLAN_WORKERS", "1;")
        .env("CPUPLAN_WHY", "from env")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        text.trim(),
        "2 1 2 left unpinned: the plan pins no worker 5 (it lists 2 workers; from env)"
    );
}
