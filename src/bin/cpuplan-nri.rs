//! `cpuplan-nri`: cpuplan as an NRI plugin of containerd or CRI-O (long-running), the image's
//! entrypoint. Started with options, or by the runtime from its plugin directory without any.

// dlmalloc's own global allocator, chosen by a same-age A/B against musl's (CreateContainer p50 0.75-0.85x musl's: Cargo.toml).
#[global_allocator]
static ALLOC: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

fn main() -> std::process::ExitCode {
    cpuplan_hook::main(&cpuplan_hook::NRI)
}
