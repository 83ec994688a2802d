//! Runs `examples/threads.rs` (built by `cargo test`) and checks what each kind of thread ran on.

use crate::common;

use std::process::Command;

use common::{sample_plan, two_cpus, write_plan};

#[test]
fn the_threads_example_shows_which_threads_leave_the_pinned_cpu() {
    let exe = common::build_example("threads");
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(dir.path(), &sample_plan());
    let out = Command::new(&exe)
        .env("CPUPLAN_PLAN", &plan)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, b) = two_cpus();
    let mask = sample_plan().mask;
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with(&format!("main: worker 0 pinned to cpus {b} (")),
        "{text}"
    );
    assert_eq!(
        &lines[1..],
        [
            format!("process mask: {mask}"),
            format!("main thread: {b}"),
            format!("std::thread::spawn: {b}"),
            format!("cpuplan_shim::spawn: {mask}"),
            format!("cpuplan_shim::Builder: {mask}"),
            format!("rayon thread 0: {mask}"),
            format!("rayon thread 1: {mask}"),
        ]
    );
}
