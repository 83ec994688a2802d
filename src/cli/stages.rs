//! The runtime's entry points: `hook` (OCI hook stages) and `precreate` (podman's config stage).

use std::io::{Read, Write};

use super::{Args, CliError, Command, Context, Exit, UsageError};
use crate::config::HookConfig;
use crate::decide::{verdict, Problem, Why};
use crate::read::bundle::MAX_CONFIG;

/// `hook [STAGE]`.
pub const HOOK: Command = Command {
    name: "hook",
    summary: "run as an OCI hook: the state on stdin (no subcommand: hook, stage from the status)",
    usage: "\
usage: cpuplan-hook hook [STAGE]   (the OCI state JSON on stdin, at most 1 MiB)

STAGE: createRuntime or prestart (plan, write the cpuset and /run/cpuplan/plan.{env,json}),
poststop (release the container's GPU claims); any other stage is logged and ignored.
Without STAGE: poststop when the state's status is stopped, else createRuntime.
",
    valued: &[],
    switches: &[],
    run: hook,
};

/// `precreate`.
pub const PRECREATE: Command = Command {
    name: "precreate",
    summary: "podman's precreate stage: runtime config on stdin, the config to use on stdout",
    usage: "\
usage: cpuplan-hook precreate   (podman's precreate stage: the runtime config JSON on stdin)

Prints the config to use: the plan's variables added to process.env (never overriding one the
image or user set), linux.resources.cpu.cpus narrowed to the planned mask where the numa rule
applies, and the plan's JSON in the annotation cpuplan.plan. No pid yet: quota and mask come
from the config and the host; GPU claims and plan files stay with the createRuntime hook.
With on_error: allow, a config that cannot be read is printed unchanged, byte for byte, and one
that cannot be planned for gets the off plan's variables.
",
    valued: &[],
    switches: &[],
    run: precreate,
};

fn drop_capabilities() {
    if let Err(e) = crate::privileges::drop_capabilities() {
        eprintln!("cpuplan-hook: warning: could not drop capabilities: {e}");
    }
}

fn hook(ctx: &Context, a: &Args, _out: &mut dyn Write) -> Result<Exit, CliError> {
    if a.positional.len() > 1 {
        return Err(UsageError("hook: at most one STAGE".into()).into());
    }
    drop_capabilities();
    let stage = a.positional.first().map(String::as_str);
    let ran = catching(|| crate::hook::run_hook(stage, RawStdin, ctx.config));
    match ran {
        Some(result) => {
            result?;
            Ok(Exit::Ok)
        }
        None => fail_open(ctx, "hook").map(|()| Exit::Ok),
    }
}

/// Standard input read straight from fd 0: `std::io::stdin` would allocate (and touch) an
/// 8 KiB buffer that a document read once to its end never needs.
struct RawStdin;

impl Read for RawStdin {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        Ok(nix::unistd::read(0, buf)?)
    }
}

/// Runs `f`, catching a panic (a bug): `None` if it panicked.
fn catching<T>(f: impl FnOnce() -> T) -> Option<T> {
    super::PANIC_ABORTS.store(false, std::sync::atomic::Ordering::SeqCst);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).ok();
    super::PANIC_ABORTS.store(true, std::sync::atomic::Ordering::SeqCst);
    caught
}

/// After a panic in `stage`: under `on_error: allow` the container starts (one line says so),
/// under `deny` the stage fails.
fn fail_open(ctx: &Context, stage: &str) -> Result<(), CliError> {
    let on_error = HookConfig::load(ctx.config)
        .map(|c| c.on_error)
        .unwrap_or_else(|_| HookConfig::on_error_of_unusable(ctx.config));
    let what = format!("{stage}: internal error (a panic; please report it)");
    let problem = Problem::Internal(what);
    match verdict(on_error, &problem) {
        Ok(()) => {
            eprintln!("cpuplan-hook: {problem}; on_error allow: the container starts unplanned");
            Ok(())
        }
        Err(r) => Err(CliError::Failed(r.to_string())),
    }
}

fn precreate(ctx: &Context, a: &Args, out: &mut dyn Write) -> Result<Exit, CliError> {
    if !a.positional.is_empty() {
        return Err(UsageError("precreate: takes no arguments".into()).into());
    }
    drop_capabilities();
    let mut stdin = RawStdin;
    let mut input = Vec::new();
    (&mut stdin)
        .take(MAX_CONFIG as u64 + 1)
        .read_to_end(&mut input)?;
    let config = match HookConfig::load_from(ctx.config, ctx.config_given) {
        Ok(c) => c,
        Err(e) => {
            let c = HookConfig::of_unusable(ctx.config);
            let on_error = c.on_error;
            crate::logging::init(c.log.as_deref());
            crate::logging::set_level(c.log_level);
            let problem = Problem::from(e);
            verdict(on_error, &problem).map_err(|r| CliError::Failed(format!("precreate: {r}")))?;
            log::warn!("precreate: {problem}; config left unchanged");
            return pass_through(out, &input, &mut stdin);
        }
    };
    crate::logging::init(config.log.as_deref());
    crate::logging::set_level(config.log_level);
    if input.len() > MAX_CONFIG {
        let why = Problem::spec(Why(format!(
            "the runtime config on stdin is over {MAX_CONFIG} bytes"
        )));
        verdict(config.on_error, &why).map_err(|r| CliError::Failed(format!("precreate: {r}")))?;
        log::warn!("precreate: {why}; config left unchanged");
        return pass_through(out, &input, &mut stdin);
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    match catching(|| crate::precreate::precreate(&config, &input, &cwd)) {
        Some(Ok(bytes)) => {
            out.write_all(&bytes)?;
            Ok(Exit::Ok)
        }
        Some(Err(e)) => Err(CliError::Failed(e.to_string())),
        None => {
            fail_open(ctx, "precreate")?;
            pass_through(out, &input, &mut std::io::empty())
        }
    }
}

/// Writes what was read of the config and the rest of stdin to `out`, unchanged.
fn pass_through(out: &mut dyn Write, head: &[u8], rest: &mut dyn Read) -> Result<Exit, CliError> {
    out.write_all(head)?;
    std::io::copy(rest, out)?;
    Ok(Exit::Ok)
}
