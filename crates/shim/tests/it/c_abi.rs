//! The C ABI from a small C program (tests/c/abi_test.c), linked to the cdylib and to the staticlib.

use crate::common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use common::{profile_dir, sample_plan, two_cpus, workspace_root, write_plan};

/// How a test's C program links the shim.
pub(crate) enum Link<'a> {
    /// To `libcpuplan_shim.so` in this directory, found there at run time through the rpath.
    Dynamic(&'a Path),
    /// To this `libcpuplan_shim.a`.
    Static(&'a Path),
}

/// Compiles `crates/shim/tests/c/<source>` into `out` with `-Wall -Werror`, linked as `link`
/// says, after checking that the library is there.
pub(crate) fn compile(source: &str, out: &Path, link: Link) {
    let args: Vec<String> = match link {
        Link::Dynamic(dir) => {
            let so = dir.join("libcpuplan_shim.so");
            assert!(so.exists(), "no cdylib at {}", so.display());
            vec![
                format!("-L{}", dir.display()),
                format!("-Wl,-rpath,{}", dir.display()),
                "-lcpuplan_shim".into(),
                "-lpthread".into(),
            ]
        }
        Link::Static(lib) => {
            assert!(lib.exists(), "no staticlib at {}", lib.display());
            let libs = ["-lpthread", "-ldl", "-lm", "-lgcc_s"].map(String::from);
            std::iter::once(lib.display().to_string())
                .chain(libs)
                .collect()
        }
    };
    let root = workspace_root();
    let status = Command::new("cc")
        .arg("-Wall")
        .arg("-Werror")
        .arg("-I")
        .arg(root.join("include"))
        .arg(root.join("crates/shim/tests/c").join(source))
        .arg("-o")
        .arg(out)
        .args(&args)
        .status()
        .expect("cc is needed for the C ABI test");
    assert!(status.success(), "cc failed for {args:?}");
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
    let exe = dir.path().join("abi_dyn");
    compile("abi_test.c", &exe, Link::Dynamic(&profile_dir()));
    check(&run(&exe, &plan));
}

#[test]
fn c_program_linked_to_the_staticlib() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(dir.path(), &sample_plan());
    let exe = dir.path().join("abi_static");
    let lib = profile_dir().join("libcpuplan_shim.a");
    compile("abi_test.c", &exe, Link::Static(&lib));
    check(&run(&exe, &plan));
}
