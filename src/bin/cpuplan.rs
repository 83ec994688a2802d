//! `cpuplan`: the operator's command (explain, plan, quota, gpus, claims, inventory,
//! check-config, install, uninstall).

fn main() -> std::process::ExitCode {
    cpuplan_hook::main(&cpuplan_hook::OPERATOR)
}
