//! `cpuplan-nri`: cpuplan as an NRI plugin of containerd or CRI-O (long-running), the image's
//! entrypoint. Started with options, or by the runtime from its plugin directory without any.

fn main() -> std::process::ExitCode {
    cpuplan_hook::main(&cpuplan_hook::NRI)
}
