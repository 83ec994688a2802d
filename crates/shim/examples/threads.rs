//! Threads a pinned thread starts: std's inherit its CPUs; `cpuplan_shim::spawn`, `Builder` and a rayon pool whose
//! start handler calls `on_process_mask` run on the process mask.
//!
//! `CPUPLAN_PLAN=plan.json cargo run -p cpuplan-shim --example threads` pins this thread as worker 0;
//! with no plan it pins itself to the last CPU of its mask instead.

use cpuplan::CpuSet;
use cpuplan_shim::{
    install, on_process_mask, pin_thread, pin_worker, process_mask, spawn, thread_affinity,
    Builder, Plan,
};

fn cpus() -> CpuSet {
    thread_affinity().unwrap_or_default()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    match Plan::find() {
        Ok(plan) => {
            let plan = install(Some(plan)).ok_or("install returned no plan")?;
            println!("main: worker 0 {}", pin_worker(&plan, 0)?);
        }
        Err(e) => {
            let mask = process_mask();
            let last: CpuSet = mask.last().into_iter().collect();
            pin_thread(&last, &mask, || ())?;
            println!("main: {e}; pinned to the mask's last cpu");
        }
    }
    println!("process mask: {}", process_mask());
    println!("main thread: {}", cpus());

    let plain = std::thread::spawn(cpus)
        .join()
        .map_err(|_| "thread panicked")?;
    println!("std::thread::spawn: {plain}");

    let ours = spawn(cpus).join().map_err(|_| "thread panicked")?;
    println!("cpuplan_shim::spawn: {ours}");

    let built = Builder::new()
        .name("helper".into())
        .spawn(cpus)?
        .join()
        .map_err(|_| "thread panicked")?;
    println!("cpuplan_shim::Builder: {built}");

    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .start_handler(|_| {
            if let Err(e) = on_process_mask() {
                eprintln!("rayon thread stays on its creator's cpus: {e}");
            }
        })
        .build()?;
    for (i, c) in pool.broadcast(|_| cpus()).iter().enumerate() {
        println!("rayon thread {i}: {c}");
    }
    Ok(())
}
