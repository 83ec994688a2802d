//! The Python package `cpuplan`: `scripts/python-wheel.sh` builds the abi3 manylinux2014 wheel
//! with maturin and zig, requires `auditwheel show` to find it `manylinux_2_17_x86_64`, checks
//! that the sdist stops at once without Rust, installs the wheel into a fresh venv with pytest
//! and runs `crates/python/tests` on it; this test runs the script and requires every pytest
//! test to pass, none skipped.
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

#[test]
fn the_python_wheel_passes_its_pytest_suite() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("bash")
        .arg(repo.join("scripts/python-wheel.sh"))
        .env("CPUPLAN_BIN", env!("CARGO_BIN_EXE_cpuplan"))
        .env("CPUPLAN_HOOK", env!("CARGO_BIN_EXE_cpuplan-hook"))
        .env("CARGO_TARGET_DIR", target_dir())
        .current_dir(repo)
        .output()
        .expect("run scripts/python-wheel.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "scripts/python-wheel.sh failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
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
    // The wheel CI tests is the manylinux2014 one, as auditwheel saw it.
    assert!(
        stdout.contains("is consistent with the following platform tag:")
            && stdout.contains("\"manylinux_2_17_x86_64\""),
        "no auditwheel verdict of manylinux_2_17_x86_64:\n{stdout}"
    );
    assert!(
        stdout.contains("building from source needs a Rust toolchain"),
        "the sdist check did not run:\n{stdout}"
    );
}
