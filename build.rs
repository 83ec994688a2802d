//! cpuplan-hook's build script, for the `cpuplan-hook` binary only:
//! - on a musl target (the shipped static build, scripts/build-static.sh) it is linked by the
//!   toolchain's own LLD (`rust-lld`, through the `gcc-ld` directory rustc ships), which the
//!   text order needs: rustc links musl with the system's `cc` and its default linker;
//! - where `scripts/build-static.sh` names a symbol-ordering file (`CPUPLAN_TEXT_ORDER`), it is
//!   linked with it, so that the functions a container start runs sit together at the start of
//!   its text (docs/performance.md).
//!
//! Every other build it leaves as it is.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CPUPLAN_TEXT_ORDER");
    if std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("musl") {
        if let Some(dir) = gcc_ld() {
            println!("cargo:rustc-link-arg-bin=cpuplan-hook=-B{}", dir.display());
            println!("cargo:rustc-link-arg-bin=cpuplan-hook=-fuse-ld=lld");
        } else {
            println!("cargo:warning=no rust-lld in this toolchain: the hook is linked by cc's default linker, its text unordered");
            return;
        }
    }
    let Some(path) = std::env::var_os("CPUPLAN_TEXT_ORDER").filter(|p| !p.is_empty()) else {
        return;
    };
    let path = PathBuf::from(path);
    // A change of the file's contents relinks the binary.
    println!("cargo:rerun-if-changed={}", path.display());
    println!(
        "cargo:rustc-link-arg-bin=cpuplan-hook=-Wl,--symbol-ordering-file={}",
        path.display()
    );
    // A listed function that this build does not have (renamed, inlined away) is not an error.
    println!("cargo:rustc-link-arg-bin=cpuplan-hook=-Wl,--no-warn-symbol-ordering");
}

/// The toolchain's `gcc-ld` directory (its `ld.lld` runs `rust-lld`), where it has one.
fn gcc_ld() -> Option<PathBuf> {
    let rustc = std::env::var_os("RUSTC")?;
    let host = std::env::var("HOST").ok()?;
    let out = Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()?;
    let sysroot = String::from_utf8(out.stdout).ok()?;
    let dir = PathBuf::from(sysroot.trim())
        .join("lib/rustlib")
        .join(host)
        .join("bin/gcc-ld");
    dir.join("ld.lld").is_file().then_some(dir)
}
