//! The static builds the tests use: `scripts/build-static.sh --debug`, once per test binary.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
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

/// Builds `cpuplan-hook` and `cpuplan-exec` with `scripts/build-static.sh --debug` (once per
/// test binary; cargo makes later builds no-ops) and returns their paths.
pub fn static_bins() -> &'static (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
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
        assert_eq!(paths.len(), 2, "{text}");
        (paths[0].clone(), paths[1].clone())
    })
}

/// The static `cpuplan-hook`.
pub fn static_hook() -> PathBuf {
    static_bins().0.clone()
}
