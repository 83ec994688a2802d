//! The C ABI from a small C program (tests/c/abi_test.c), linked to the cdylib and to the staticlib.

use crate::common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use common::{profile_dir, sample_plan, two_cpus, workspace_root, write_plan};

fn compile(out: &Path, link: &[String]) {
    let root = workspace_root();
    let status = Command::new("cc")
        .arg("-Wall")
        .arg("-Werror")
        .arg("-I")
        .arg(root.join("include"))
        .arg(root.join("crates/shim/tests/c/abi_test.c"))
        .arg("-o")
        .arg(out)
        .args(link)
        .status()
        .expect("cc is needed for the C ABI test");
    assert!(status.success(), "cc failed for {link:?}");
}

fn run(exe: &Path, plan: &Path) -> HashMap<String, String> {
    let out = Command::new(exe)
        .arg(plan)
        .env_remove("CPUPLAN_PLAN")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}: {text}", exe.display());
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn check(got: &HashMap<String, String>) {
    let (a, b) = two_cpus();
    let g = |k: &str| got.get(k).map(String::as_str).unwrap_or("(missing)");
    assert_eq!(g("early_pin"), "1");
    assert_eq!(
        g("early_error"),
        "no plan: no plan loaded (call cpuplan_load first)"
    );
    assert_eq!(g("missing"), "1");
    assert_eq!(
        g("missing_error"),
        "no plan: /nonexistent/plan.json does not exist"
    );
    assert_eq!(g("load"), "0");
    assert_eq!(g("error_after_ok"), "(null)");
    assert_eq!((g("usable"), g("left"), g("workers")), ("2", "1", "2"));
    // The API server's and a worker's share of the one CPU left; -2 names no process.
    assert_eq!(g("threads"), "1,1,1");
    assert_eq!(g("pin_worker0"), "0");
    assert_eq!(
        g("warm"),
        format!("{a},{b}"),
        "warm runs on the process mask"
    );
    assert_eq!(g("main"), b.to_string());
    assert!(
        g("why0").starts_with(&format!("pinned to cpus {b} (")),
        "{}",
        g("why0")
    );
    assert_eq!(
        g("helper_before"),
        b.to_string(),
        "a new pthread inherits its creator's mask"
    );
    assert_eq!(g("to_process_mask"), "0");
    assert_eq!(g("helper_after"), format!("{a},{b}"));
    assert_eq!(g("pin_worker1"), "0");
    assert!(
        g("why1").starts_with("left unpinned: the plan leaves it unpinned"),
        "{}",
        g("why1")
    );
    assert_eq!(g("main_after_unpinned"), b.to_string());
    assert_eq!(g("pin_negative"), "1");
    assert_eq!(
        g("negative_error"),
        "cpuplan_pin_worker: worker=\"-1\": a worker index is 0 or more"
    );
    assert_eq!(g("pin_result"), "0");
    assert_eq!(g("result"), a.to_string());
}

#[test]
fn c_program_linked_to_the_cdylib() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(dir.path(), &sample_plan());
    let lib = profile_dir();
    assert!(
        lib.join("libcpuplan_shim.so").exists(),
        "no cdylib in {}",
        lib.display()
    );
    let exe = dir.path().join("abi_dyn");
    compile(
        &exe,
        &[
            format!("-L{}", lib.display()),
            format!("-Wl,-rpath,{}", lib.display()),
            "-lcpuplan_shim".into(),
            "-lpthread".into(),
        ],
    );
    check(&run(&exe, &plan));
}

#[test]
fn c_program_linked_to_the_staticlib() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(dir.path(), &sample_plan());
    let lib = profile_dir().join("libcpuplan_shim.a");
    assert!(lib.exists(), "no staticlib at {}", lib.display());
    let exe = dir.path().join("abi_static");
    compile(
        &exe,
        &[
            lib.display().to_string(),
            "-lpthread".into(),
            "-ldl".into(),
            "-lm".into(),
            "-lgcc_s".into(),
        ],
    );
    check(&run(&exe, &plan));
}
