//! `cpuplan-hook`: the runtime's one-shot stages, the OCI hook (`hook STAGE`) and podman's
//! precreate (`precreate`). Small and static (scripts/build-static.sh): it links neither the
//! installer nor the NRI plugin (`tests/host/layers.rs` checks its symbols).

// dlmalloc's own global allocator, chosen by a same-age A/B against musl's (createRuntime 0.80x musl's: Cargo.toml).
#[global_allocator]
static ALLOC: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

fn main() -> std::process::ExitCode {
    cpuplan_hook::main(&cpuplan_hook::HOOK)
}
