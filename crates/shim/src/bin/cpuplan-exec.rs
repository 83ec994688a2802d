//! `cpuplan-exec [--plan PATH] [--worker N | --result] -- CMD [ARGS...]`: load `plan.env`, pin, exec CMD.
//!
//! See `cpuplan_shim::launcher` for the exit statuses and `crates/shim/README.md` for the static build.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;

use cpuplan_shim::launcher::{
    find_plan, parse_args, plan_path, vars_to_set, Args, Target, EXIT_NOEXEC, EXIT_NOTFOUND,
    EXIT_PLAN, EXIT_USAGE, USAGE,
};
use cpuplan_shim::{pin_result, pin_worker, Pinning, PLAN_VAR};

fn main() {
    std::process::exit(run(std::env::args_os().skip(1).collect()));
}

fn run(args: Vec<OsString>) -> i32 {
    let inv = match parse_args(args) {
        Ok(Args::Run(inv)) => inv,
        Ok(Args::Help) => {
            println!("{USAGE}");
            return 0;
        }
        Err(e) => {
            eprintln!("cpuplan-exec: {e}");
            return EXIT_USAGE;
        }
    };
    let plan_path = plan_path(inv.plan.as_deref());
    let found = match find_plan(&plan_path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("cpuplan-exec: {e}");
            return EXIT_PLAN;
        }
    };
    if found.plan.is_none() && found.env_vars.is_none() {
        let msg = format!(
            "no plan: neither {} nor {} exists",
            found.plan_path.display(),
            found.env_path.display()
        );
        if !inv.optional {
            eprintln!("cpuplan-exec: {msg}");
            return EXIT_PLAN;
        }
        eprintln!("cpuplan-exec: {msg}; running unpinned (--optional)");
    }

    let mut set = vars_to_set(found.env_vars.as_deref().unwrap_or(&[]), |k| {
        std::env::var_os(k).is_some()
    });
    if found.plan_path.exists() && std::env::var_os(PLAN_VAR).is_none() {
        set.push((PLAN_VAR.to_string(), found.plan_path.display().to_string()));
    }
    for (k, v) in &set {
        // The launcher is single-threaded: nothing else reads the environment meanwhile.
        std::env::set_var(k, v);
    }
    if inv.verbose {
        let keys: Vec<&str> = set.iter().map(|(k, _)| k.as_str()).collect();
        eprintln!("cpuplan-exec: set {}", keys.join(" "));
    }

    if let Some(plan) = &found.plan {
        let pinned = match inv.target {
            Target::Nothing => None,
            Target::Worker(i) => Some((format!("worker {i}"), pin_worker(plan, i))),
            Target::Result => Some(("the API server's result threads".into(), pin_result(plan))),
        };
        match pinned {
            None => {}
            Some((what, Err(e))) => {
                eprintln!("cpuplan-exec: cannot pin {what}: {e}");
                return EXIT_PLAN;
            }
            Some((what, Ok(p @ Pinning::Unpinned { .. }))) => eprintln!("cpuplan-exec: {what} {p}"),
            Some((what, Ok(p))) if inv.verbose => eprintln!("cpuplan-exec: {what} {p}"),
            Some(_) => {}
        }
    }

    let argv: Vec<CString> = inv
        .cmd
        .iter()
        .map(|a| CString::new(a.as_bytes()).unwrap_or_default())
        .collect();
    let err = match nix::unistd::execvp(&argv[0], &argv) {
        Err(e) => e,
        Ok(never) => match never {},
    };
    eprintln!(
        "cpuplan-exec: cannot run {}: {err}",
        inv.cmd[0].to_string_lossy()
    );
    if err == nix::errno::Errno::ENOENT || err == nix::errno::Errno::ENOTDIR {
        EXIT_NOTFOUND
    } else {
        EXIT_NOEXEC
    }
}
