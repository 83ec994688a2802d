//! Replays every saved fuzz input under `fuzz/regressions/<target>/` through the same function
//! its cargo-fuzz target drives (`fuzz/targets.rs`), so CI runs them without the fuzzer.

#[path = "../../fuzz/targets.rs"]
mod targets;

use std::path::Path;

#[test]
fn every_regression_input_passes_its_target() {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions");
    let mut total = 0;
    for (name, run) in targets::TARGETS {
        let dir = base.join(name);
        let mut inputs: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .flatten()
            .map(|e| e.path())
            .collect();
        inputs.sort();
        assert!(!inputs.is_empty(), "{} holds no input", dir.display());
        for input in inputs {
            let data = std::fs::read(&input).unwrap();
            let r = std::panic::catch_unwind(|| run(&data));
            assert!(r.is_ok(), "{name}: {} fails", input.display());
            total += 1;
        }
    }
    eprintln!("{total} regression inputs replayed");
}

#[test]
fn every_fuzz_target_has_a_regressions_dir_and_a_source() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    for (name, _) in targets::TARGETS {
        assert!(
            root.join(format!("fuzz_targets/{name}.rs")).is_file(),
            "{name}"
        );
        assert!(manifest.contains(&format!("name = \"{name}\"")), "{name}");
        assert!(root.join("regressions").join(name).is_dir(), "{name}");
    }
}
