//! `cpuplan-exec [--plan PATH] [--worker N | --result] -- CMD [ARGS...]`: load `plan.env`, pin, exec CMD.
//!
//! See `cpuplan_shim::launcher` for the exit statuses and `crates/shim/README.md` for the static build.

use std::collections::HashSet;
use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;

use cpuplan_shim::launcher::{
    find_plan, import_vars, last_values, parse_args, plan_path, retarget, set_otherwise, usage,
    Args, Target, EXIT_NOEXEC, EXIT_NOTFOUND, EXIT_PLAN, EXIT_USAGE,
};
use cpuplan_shim::text::Escaped;
use cpuplan_shim::{pin_result, pin_worker, Pinning, PLAN_VAR};

fn main() {
    std::process::exit(run(std::env::args_os().skip(1).collect()));
}

/// `KEY=VALUE` as exec takes an environment entry; `None` where either holds a NUL.
fn entry(key: &[u8], value: &[u8]) -> Option<CString> {
    CString::new([key, b"=", value].concat()).ok()
}

fn run(args: Vec<OsString>) -> i32 {
    let inv = match parse_args(args) {
        Ok(Args::Run(inv)) => inv,
        Ok(Args::Help) => {
            println!("{}", usage());
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
            Escaped(found.plan_path.display()),
            Escaped(found.env_path.display())
        );
        if !inv.optional {
            eprintln!("cpuplan-exec: {msg}");
            return EXIT_PLAN;
        }
        eprintln!("cpuplan-exec: {msg}; running unpinned (--optional)");
    }

    // Only the plan's variables, each a name with a value free of NUL (checked here, so that
    // the environment built below holds whatever the file holds).
    let file_vars = found.env_vars.as_deref().unwrap_or(&[]);
    let file = last_values(file_vars);
    let mut import = match import_vars(file_vars, &found.env_path, |k| {
        let current = std::env::var_os(k);
        match current.as_ref().map(|v| v.to_str()) {
            None => false,
            Some(None) => true,
            Some(Some(v)) => set_otherwise(&file, k, Some(v)),
        }
    }) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("cpuplan-exec: {e}");
            return EXIT_PLAN;
        }
    };
    if let Some(plan) = &found.plan {
        retarget(&mut import, plan, inv.target);
    }
    // CMD's environment: this one less the variables imported over a value the plan put there,
    // then the imported ones and the plan path, built once and handed to exec. setenv(3) per
    // variable would scan the whole environment each time: quadratic in the plan's variables.
    let replaced: HashSet<&str> = import.set.iter().map(|(k, _)| k.as_str()).collect();
    let mut env: Vec<CString> = std::env::vars_os()
        .filter(|(k, _)| k.to_str().is_none_or(|k| !replaced.contains(k)))
        .filter_map(|(k, v)| entry(k.as_bytes(), v.as_bytes()))
        .collect();
    let mut set: Vec<&str> = Vec::new();
    for (k, v) in &import.set {
        env.extend(entry(k.as_bytes(), v.as_bytes()));
        set.push(k);
    }
    // The plan path came from argv or the environment, so it holds no NUL.
    if found.plan_path.exists() && std::env::var_os(PLAN_VAR).is_none() {
        env.extend(entry(
            PLAN_VAR.as_bytes(),
            found.plan_path.as_os_str().as_bytes(),
        ));
        set.push(PLAN_VAR);
    }
    if inv.verbose {
        eprintln!("cpuplan-exec: set {}", Escaped(set.join(" ")));
        if !import.kept.is_empty() {
            eprintln!(
                "cpuplan-exec: kept {} (already set)",
                Escaped(import.kept.join(" "))
            );
        }
        if !import.ignored.is_empty() {
            eprintln!(
                "cpuplan-exec: ignored {} (not plan variables)",
                Escaped(import.ignored.join(" "))
            );
        }
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
    let err = match nix::unistd::execvpe(&argv[0], &argv, &env) {
        Err(e) => e,
        Ok(never) => match never {},
    };
    eprintln!(
        "cpuplan-exec: cannot run {}: {err}",
        Escaped(inv.cmd[0].to_string_lossy())
    );
    if err == nix::errno::Errno::ENOENT || err == nix::errno::Errno::ENOTDIR {
        EXIT_NOTFOUND
    } else {
        EXIT_NOEXEC
    }
}
