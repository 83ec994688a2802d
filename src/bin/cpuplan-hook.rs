//! `cpuplan-hook`: the runtime's one-shot stages, the OCI hook (`hook STAGE`) and podman's
//! precreate (`precreate`). Small and static (scripts/build-static.sh): it links neither the
//! installer nor the NRI plugin (`tests/host/layers.rs` checks its symbols).

fn main() -> std::process::ExitCode {
    cpuplan_hook::main(&cpuplan_hook::HOOK)
}
