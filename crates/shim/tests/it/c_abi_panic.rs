//! A panic inside a C ABI call, in a release build: the call returns `-EIO` and the C program
//! goes on (the workspace's release profile must unwind, or `catch_unwind` in `ffi.rs` is dead).
//!
//! The panic is injected through `cpuplan_test_panic()`, which only a build with the shim's
//! test-only `panic-test` feature exports; tests/c/panic_test.c calls it from C.

use crate::common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use super::c_abi::{compile, Link};
use common::release_panic_test_dir;

/// Runs the program and checks it survived the panic with -EIO and went on to exit 0.
fn check(exe: &Path) {
    // cargo test's LD_LIBRARY_PATH names target/debug, whose library (without the feature)
    // would win over the rpath (a DT_RUNPATH) of the release one.
    let out = Command::new(exe)
        .env_remove("CPUPLAN_PLAN")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let got: HashMap<&str, &str> = stdout.lines().filter_map(|l| l.split_once('=')).collect();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}: the host process did not survive the panic ({:?})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        exe.display(),
        out.status
    );
    let g = |k: &str| got.get(k).copied().unwrap_or("(missing)");
    assert_eq!(g("panic"), "-5", "-EIO");
    assert_eq!(g("panic_error"), "cpuplan: internal error (panic)");
    assert_eq!(g("again"), "-5", "a second panic is caught too");
    assert_eq!(g("missing"), "-2", "the library still answers: -ENOENT");
    assert_eq!(
        g("missing_error"),
        "no plan: /nonexistent/plan.json does not exist"
    );
    assert_eq!(g("continued"), "1");
    assert!(
        stderr.contains("a panic injected by the panic-test feature"),
        "the panic did happen: {stderr}"
    );
}

#[test]
fn a_panic_in_the_release_cdylib_returns_eio() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("panic_dyn");
    compile(
        "panic_test.c",
        &exe,
        Link::Dynamic(&release_panic_test_dir()),
    );
    check(&exe);
}

#[test]
fn a_panic_in_the_release_staticlib_returns_eio() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("panic_static");
    let lib = release_panic_test_dir().join("libcpuplan_shim.a");
    compile("panic_test.c", &exe, Link::Static(&lib));
    check(&exe);
}
