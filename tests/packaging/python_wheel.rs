//! The Python package `cpuplan`: `scripts/python-wheel.sh` builds the abi3 manylinux2014 wheel
//! with maturin and zig (auditwheel must find it `manylinux_2_17_x86_64`, maturin must not
//! warn, the sdist must carry the crate's version); `scripts/python-test.sh` installs that
//! wheel into a fresh venv with pytest and runs `crates/python/tests` on it. This test runs
//! both and requires every pytest test to pass, none skipped.
//!
//! Needs `python3` with `venv` and PyPI (for maturin, ziglang, auditwheel and pytest), and, for
//! the runc test of the suite, root, `runc` and `busybox-static` (CI has them); it fails, never
//! skips, without them.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The target directory this test binary was built in (`<target>/debug/deps/<test>`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.ancestors()
        .nth(3)
        .expect("<target>/debug/deps")
        .to_path_buf()
}

/// The version of `crates/python/Cargo.toml` (the package's one source of its version).
fn crate_version(repo: &Path) -> String {
    let toml = std::fs::read_to_string(repo.join("crates/python/Cargo.toml")).unwrap();
    toml.lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .map(|v| v.trim_end_matches('"').to_string())
        .expect("a version in crates/python/Cargo.toml")
}

#[test]
fn the_python_wheel_passes_its_pytest_suite() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let run = |script: &str, args: &[&Path]| {
        let out = Command::new("bash")
            .arg(repo.join(script))
            .args(args)
            .env("CPUPLAN_BIN", env!("CARGO_BIN_EXE_cpuplan"))
            .env("CPUPLAN_HOOK", env!("CARGO_BIN_EXE_cpuplan-hook"))
            .env("CARGO_TARGET_DIR", target_dir())
            .current_dir(repo)
            .output()
            .unwrap_or_else(|e| panic!("run {script}: {e}"));
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            out.status.success(),
            "{script} failed ({}):\n{stdout}\n{stderr}",
            out.status
        );
        (stdout, stderr)
    };

    // The build alone: the wheel's path on its last line of stdout, its log on stderr.
    let (built, log) = run("scripts/python-wheel.sh", &[]);
    let wheel = PathBuf::from(built.lines().last().expect("the wheel's path"));
    let version = crate_version(repo);
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with(&format!("cpuplan-{version}-cp39-abi3-")) && wheel.is_file(),
        "{name}: not the crate's version {version}"
    );
    // The wheel CI tests is the manylinux2014 one, as auditwheel saw it; maturin said nothing
    // to warn about (its build backend, the version).
    assert!(
        log.contains("is consistent with the following platform tag:")
            && log.contains("\"manylinux_2_17_x86_64\""),
        "no auditwheel verdict of manylinux_2_17_x86_64:\n{log}"
    );
    // maturin's warnings read `⚠️  Warning: ...` (cargo's own, lower-case, are about manifests).
    assert!(!log.contains("Warning:"), "{log}");
    assert!(
        log.contains(&format!("cpuplan-{version}.tar.gz: version {version}")),
        "the sdist check did not run:\n{log}"
    );

    // The tests, on the installed wheel.
    let (stdout, _) = run("scripts/python-test.sh", &[&wheel]);
    // pytest's closing line, e.g. "== 126 passed in 4.1s ==": passes only.
    let summary = stdout
        .lines()
        .rev()
        .find(|l| l.contains(" passed") && l.contains(" in "))
        .unwrap_or_else(|| panic!("no pytest summary line:\n{stdout}"));
    for bad in ["failed", "error", "skipped", "xfail", "xpass", "deselected"] {
        assert!(!summary.contains(bad), "{summary}\n{stdout}");
    }
    let passed: usize = summary
        .trim_matches(|c: char| c == '=' || c.is_whitespace())
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {summary:?}"));
    assert!(passed >= 200, "only {passed} pytest tests ran: {summary}");
}
