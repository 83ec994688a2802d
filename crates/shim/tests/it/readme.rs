//! Runs the shim's documented examples, read from README.md and docs/shim.md (the README's Rust
//! one is a doctest; its Python one runs in the Python package's tests).

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{
    profile_dir, sample_plan, static_exec, two_cpus, workspace_root, write_plan, STATIC_BUILD,
};

/// The fenced block after `<!-- test: name -->` in README.md or docs/shim.md (where it must be unique).
fn block(name: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = ["README.md", "docs/shim.md"]
        .map(|f| std::fs::read_to_string(root.join(f)).unwrap())
        .join("\n");
    let marker = format!("<!-- test: {name} -->\n```");
    assert_eq!(readme.matches(&marker).count(), 1, "{marker:?} once");
    let start = readme
        .find(&marker)
        .unwrap_or_else(|| panic!("no {marker:?} in README.md or docs/shim.md"));
    let body = &readme[start + marker.len()..];
    let body = &body[body.find('\n').unwrap() + 1..];
    body[..body.find("```").unwrap()].to_string()
}

fn stdout_of(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn way_1_the_entrypoint_sources_plan_env() {
    let dir = tempfile::tempdir().unwrap();
    let plan_dir = dir.path().join("run/cpuplan");
    std::fs::create_dir_all(&plan_dir).unwrap();
    write_plan(&plan_dir, &sample_plan());
    let script = block("entrypoint").replace("/run/cpuplan", plan_dir.to_str().unwrap());
    let path = dir.path().join("entrypoint.sh");
    std::fs::write(&path, script).unwrap();
    let out = stdout_of(Command::new("sh").arg(&path).args([
        "sh",
        "-c",
        "echo $OMP_NUM_THREADS $GOMAXPROCS \"$CPUPLAN_WHY\"",
    ]));
    let (_, b) = two_cpus();
    assert_eq!(
        out,
        format!("1 2 step_thread_core {b}: the plan's why, with a quote: it's\n")
    );
    // Without a plan the workload still starts.
    std::fs::remove_file(plan_dir.join("plan.env")).unwrap();
    let out = stdout_of(
        Command::new("sh")
            .arg(&path)
            .args(["echo", "started"])
            .env_remove("OMP_NUM_THREADS"),
    );
    assert_eq!(out, "started\n");
}

#[test]
fn way_2_cpuplan_exec_pins_and_sets_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(dir.path(), &sample_plan());
    let exe = static_exec();
    let path = format!(
        "{}:{}",
        exe.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = stdout_of(
        Command::new("sh")
            .arg("-c")
            .arg(block("exec"))
            .env("PATH", path)
            .env("CPUPLAN_PLAN", &plan)
            .env("OMP_NUM_THREADS", "7"),
    );
    let (_, b) = two_cpus();
    assert!(
        out.starts_with(&format!("Cpus_allowed_list:\t{b}\n")),
        "{out}"
    );
    assert!(out.contains(&format!("\nCPUPLAN_WORKERS={b};-\n")), "{out}");
    assert!(
        out.contains("\nOMP_NUM_THREADS=7\n"),
        "an existing variable is kept: {out}"
    );
    assert!(out.contains("\nMKL_NUM_THREADS=1\n"), "{out}");
}

#[test]
fn the_static_build_command_is_the_one_the_tests_use() {
    assert_eq!(block("static-build").trim(), STATIC_BUILD);
}

#[test]
fn way_3_the_c_example_compiles_with_the_documented_command_and_pins() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(dir.path(), &sample_plan());
    let src = dir.path().join("worker.c");
    std::fs::write(&src, block("c")).unwrap();
    let exe = dir.path().join("worker");
    let lib = profile_dir();
    let cc = block("cc")
        .replace("\"$PWD/target/debug\"", &format!("'{}'", lib.display()))
        .replace("target/debug", lib.to_str().unwrap())
        .replace(" worker.c ", &format!(" '{}' ", src.display()))
        .replace("-o worker", &format!("-o '{}'", exe.display()));
    stdout_of(
        Command::new("sh")
            .arg("-c")
            .arg(&cc)
            .current_dir(workspace_root()),
    );
    let out = stdout_of(Command::new(&exe).env("CPUPLAN_PLAN", &plan));
    let (_, b) = two_cpus();
    assert!(
        out.starts_with(&format!("worker 0 pinned to cpus {b} (")),
        "{out}"
    );
    assert!(out.ends_with("; pools get 1 cpus\n"), "{out}");
    let none = Command::new(&exe)
        .env("CPUPLAN_PLAN", dir.path().join("none.json"))
        .output()
        .unwrap();
    assert!(none.status.success());
    assert!(String::from_utf8_lossy(&none.stderr).starts_with("running unpinned: no plan: "));
}
