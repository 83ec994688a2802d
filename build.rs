//! cpuplan-hook's build script: where `scripts/build-static.sh` names a symbol-ordering file
//! (`CPUPLAN_TEXT_ORDER`), the `cpuplan-hook` binary is linked with it, so that the functions a
//! container start runs sit together at the start of its text (docs/performance.md, "The start
//! path, fifth pass"). Without it (every other build) it does nothing.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CPUPLAN_TEXT_ORDER");
    let Some(path) = std::env::var_os("CPUPLAN_TEXT_ORDER").filter(|p| !p.is_empty()) else {
        return;
    };
    let path = std::path::PathBuf::from(path);
    // A change of the file's contents relinks the binary.
    println!("cargo:rerun-if-changed={}", path.display());
    println!(
        "cargo:rustc-link-arg-bin=cpuplan-hook=-Wl,--symbol-ordering-file={}",
        path.display()
    );
    // A listed function that this build does not have (renamed, inlined away) is not an error.
    println!("cargo:rustc-link-arg-bin=cpuplan-hook=-Wl,--no-warn-symbol-ordering");
}
