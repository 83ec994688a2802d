//! The static builds the tests use: `scripts/build-static.sh --debug`, once per test binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The target dir of this test run (this binary lives in `<target>/debug/deps`).
pub fn target_dir() -> PathBuf {
    std::env::current_exe()
        .unwrap()
        .ancestors()
        .nth(3)
        .unwrap()
        .to_path_buf()
}

/// The workspace binary `name` cargo built for this test run, beside the test binary's own
/// `deps` directory (what `CARGO_BIN_EXE_<name>` names in the package's own tests).
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .ancestors()
        .nth(2)
        .expect("<target>/<profile>/deps")
        .join(name);
    assert!(
        path.is_file(),
        "no {} (cargo builds it for the root package's tests: `cargo test --test GROUP`)",
        path.display()
    );
    path
}

/// The root package's version (its `Cargo.toml`'s `[package]` table).
pub fn package_version() -> String {
    let toml = std::fs::read_to_string(workspace_root().join("Cargo.toml")).unwrap();
    let package = toml
        .split("\n[package]\n")
        .nth(1)
        .expect("a [package] table");
    let line = package
        .lines()
        .find(|l| l.starts_with("version = "))
        .expect("the package's version");
    line.trim_start_matches("version = ")
        .trim_matches('"')
        .to_string()
}

/// The static binaries `scripts/build-static.sh` builds.
pub struct StaticBins {
    /// `cpuplan-hook`: the runtime's stages.
    pub hook: PathBuf,
    /// `cpuplan-nri`: the NRI plugin.
    pub nri: PathBuf,
    /// `cpuplan`: the operator's command (install, explain, claims…).
    pub cpuplan: PathBuf,
    /// `cpuplan-exec`: the in-container launcher.
    pub exec: PathBuf,
}

/// Builds the static binaries with `scripts/build-static.sh --debug` (once per test binary;
/// cargo makes later builds no-ops) and returns their paths.
pub fn static_bins() -> &'static StaticBins {
    static BUILT: OnceLock<StaticBins> = OnceLock::new();
    BUILT.get_or_init(|| {
        let out = Command::new("bash")
            .arg(workspace_root().join("scripts/build-static.sh"))
            .arg("--debug")
            .current_dir(workspace_root())
            .env("CARGO_TARGET_DIR", target_dir())
            .output()
            .expect("run scripts/build-static.sh");
        assert!(
            out.status.success(),
            "scripts/build-static.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let paths: Vec<PathBuf> = text.lines().map(PathBuf::from).collect();
        let named = |name: &str| {
            paths
                .iter()
                .find(|p| p.file_name().is_some_and(|f| f == name))
                .unwrap_or_else(|| panic!("build-static.sh printed no {name}: {text}"))
                .clone()
        };
        StaticBins {
            hook: named("cpuplan-hook"),
            nri: named("cpuplan-nri"),
            cpuplan: named("cpuplan"),
            exec: named("cpuplan-exec"),
        }
    })
}

/// The static `cpuplan-hook`.
pub fn static_hook() -> PathBuf {
    static_bins().hook.clone()
}

/// The static `cpuplan` (which installs the static `cpuplan-hook` beside it).
pub fn static_cpuplan() -> PathBuf {
    static_bins().cpuplan.clone()
}
