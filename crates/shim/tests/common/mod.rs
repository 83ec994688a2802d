//! Helpers the shim's integration tests share: plans for this machine's CPUs, the target dir, the static launcher.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use cpuplan::{CpuPlan, CpuSet, PlanFile, Setting, StepCpus};

/// The CPUs this test thread may run on; the tests need two of them (CI has 2 CPUs).
pub fn machine_mask() -> CpuSet {
    let mask = cpuplan_shim::thread_affinity().expect("sched_getaffinity");
    assert!(
        mask.len() >= 2,
        "these tests need a process mask of 2 CPUs or more, got {mask}"
    );
    mask
}

/// The first two CPUs of [`machine_mask`] (0 and 1 on CI).
pub fn two_cpus() -> (usize, usize) {
    let m = machine_mask();
    let mut it = m.iter();
    (it.next().unwrap(), it.next().unwrap())
}

/// One CPU as a set.
pub fn one(cpu: usize) -> CpuSet {
    [cpu].into_iter().collect()
}

/// A plan over the machine's first two CPUs: worker 0 on the second, worker 1 unpinned, the API server on the first.
pub fn sample_plan() -> CpuPlan {
    let (a, b) = two_cpus();
    CpuPlan {
        setting: Setting::Auto,
        mask: [a, b].into_iter().collect(),
        usable: 2,
        devices: vec![Some("0000:2a:00.0".to_string()), None],
        workers: vec![
            Some(StepCpus {
                cpus: one(b),
                why: format!("step_thread_core {b}: worker 0 on cpu {b}"),
            }),
            None,
        ],
        result: Some(StepCpus {
            cpus: one(a),
            why: format!("the API server's core, cpu {a}"),
        }),
        split: cpuplan::PoolSplit::PerProcess,
        why: format!("step_thread_core {b}: the plan's why, with a quote: it's"),
    }
}

/// The `plan.env` text the hook writes for `plan` (through the one `plan.env` writer).
pub fn hook_env(plan: &CpuPlan) -> String {
    cpuplan::planenv::PlanEnv::new(&PlanFile::new(plan)).encode()
}

/// Writes `plan.json` (with an extra key, as the hook adds) and `plan.env` for `plan` into `dir`; returns the JSON's path.
pub fn write_plan(dir: &Path, plan: &CpuPlan) -> PathBuf {
    let f = PlanFile::new(plan);
    let mut v = serde_json::to_value(&f).unwrap();
    v["container"] = "written-by-the-test".into();
    let json = dir.join("plan.json");
    std::fs::write(&json, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    std::fs::write(dir.join("plan.env"), hook_env(plan)).unwrap();
    json
}

/// The workspace's target directory (this test binary lives in `<target>/debug/deps`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors().nth(3).unwrap().to_path_buf()
}

/// Runs `cargo build ARGS --target-dir <this test's target dir>` in the workspace root (cargo
/// releases its lock before tests run), with `env` set; fails the test naming `what` otherwise.
fn cargo_build(what: &str, args: &[&str], env: &[(&str, &str)]) {
    cargo_build_in(&target_dir(), what, args, env)
}

/// [`cargo_build`] into the target directory `dir`.
fn cargo_build_in(dir: &Path, what: &str, args: &[&str], env: &[(&str, &str)]) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .arg("build")
        .args(args)
        .arg("--target-dir")
        .arg(dir)
        .envs(env.iter().copied())
        .current_dir(workspace_root())
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "building {what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The debug profile's output dir, where the cdylib and staticlib are: built here once per test
/// binary by the package cpuplan-shim-capi (the shim itself is an rlib).
pub fn profile_dir() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            cargo_build("libcpuplan_shim", &["-p", "cpuplan-shim-capi"], &[]);
            target_dir().join("debug")
        })
        .clone()
}

/// The release profile's output dir of a build of the library with the test-only `panic-test`
/// feature (`cpuplan_test_panic()` in the C ABI): built once per test binary, in its own target
/// dir (`<target>/panic-test`) so that no library with that symbol lands in `target/release`.
pub fn release_panic_test_dir() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = target_dir().join("panic-test");
            cargo_build_in(
                &dir,
                "libcpuplan_shim (release, panic-test)",
                &[
                    "--release",
                    "-p",
                    "cpuplan-shim-capi",
                    "--features",
                    "panic-test",
                ],
                &[],
            );
            dir.join("release")
        })
        .clone()
}

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The command the README documents for the static launcher (run in the workspace root): the
/// alias in `.cargo/config.toml`.
pub const STATIC_BUILD: &str = "cargo build-static";

/// Builds the static `cpuplan-exec` with [`STATIC_BUILD`] (once per test binary) and returns its path.
pub fn static_exec() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let args = STATIC_BUILD
                .strip_prefix("cargo ")
                .expect("STATIC_BUILD is a cargo command")
                .split_whitespace();
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let out = Command::new(cargo)
                .args(args)
                .arg("--target-dir")
                .arg(target_dir())
                .current_dir(workspace_root())
                .env_remove("CARGO_TARGET_DIR")
                .env_remove("RUSTFLAGS")
                .output()
                .expect("run cargo");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "`{STATIC_BUILD}` failed: {err}");
            // cargo replays a fresh crate's warnings, so this holds on every run: no "dropping
            // unsupported crate type `cdylib`" (the C libraries are cpuplan-shim-capi's).
            assert!(!err.contains("warning"), "`{STATIC_BUILD}` warned: {err}");
            target_dir().join("x86_64-unknown-linux-musl/debug/cpuplan-exec")
        })
        .clone()
}

/// The workspace's one ELF program-header parser (the hook's `install` uses it too).
#[path = "../../../../src/elf.rs"]
pub mod elf;

/// ELF `PT_INTERP`: the program asks for a dynamic loader.
#[allow(unused_imports)] // not every test binary checks static-ness
pub use elf::PT_INTERP;

/// The ELF program header types of the file at `path` (64-bit little-endian only).
pub fn elf_program_headers(path: &Path) -> Vec<u32> {
    elf::program_headers(path)
        .unwrap_or_else(|e| panic!("{e}"))
        .iter()
        .map(|h| h.kind)
        .collect()
}

/// Builds example `name` of this crate in the dev profile (as `cargo test` would) and returns its path.
pub fn build_example(name: &str) -> PathBuf {
    cargo_build(
        &format!("example {name}"),
        &["-p", "cpuplan-shim", "--example", name],
        &[],
    );
    target_dir().join("debug/examples").join(name)
}
