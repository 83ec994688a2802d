//! `explain`: what the hook would do for a bundle on this host.

use std::io::Write;

use super::inspect::{config_with_roots, print_json};
use super::{Args, CliError, Command, Context, Exit};
use crate::config::HookConfig;
use crate::read::host::Host;
use crate::read::running::RunningError;

/// `explain`.
pub const EXPLAIN: Command = Command {
    name: "explain",
    summary: "what the hook would do for a bundle, or whether a running container's plan is stale",
    usage: "\
usage: cpuplan explain --bundle DIR [--root DIR] [--topology-root DIR] [--config PATH] [--json] [--no-inventory]
       cpuplan explain --pid PID [--root DIR] [--topology-root DIR] [--config PATH] [--json]

--bundle: what the hook would do for the bundle's config.json on this host, with no pid: the
live cgroup and the GPU claims are skipped (and said so). Writes no plan, cpuset or claim.
--root and --topology-root override the hook config's root and topology_root. --json prints the plan.json
the hook would write. A planning problem prints the off plan the hook would write under
on_error: allow (exit 0), and is an error (exit 1) under on_error: deny, where the hook would
refuse the container. The host-wide facts come from the host inventory in inventory_dir as the
hook takes them (read and written there when needed); the text says whether it was used (with
--json, stderr does). --no-inventory reads the host afresh.

--pid: a running container whose init is PID (crictl inspect's info.pid): the plan.json the
hook wrote in its plan directory (read inside the container's root, no link followed) against
its cgroup's cpuset and quota now, `plan: current` or `plan: stale: cpuset 0-1 (plan 1)` (the
cgroup changed after the plan was written: kubelet's CPU manager, an in-place resize). --json:
{pid, stale, drifts: [{what, now, plan}], now: {cpuset, quota}, plan}. Exit 0 either way; a
pid that does not run, is no container's init (it shares this command's mount namespace) or
whose container has no readable plan.json: one line and exit 2; a cgroup that cannot be read:
exit 1. What the plan file holds is the container's: its strings are printed escaped.
",
    valued: &["bundle", "pid", "root", "topology-root"],
    switches: &["json", "no-inventory"],
    run: explain,
};

fn explain(ctx: &Context, a: &Args, out: &mut dyn Write) -> Result<Exit, CliError> {
    let config = config_with_roots(ctx, a)?;
    if let Some(pid) = a.value("pid") {
        if a.value("bundle").is_some() {
            return Err(CliError::Usage(
                "explain: --bundle and --pid: give one of them".into(),
            ));
        }
        return running(&config, pid, a.switch("json"), out);
    }
    let bundle = a.value("bundle").ok_or_else(|| {
        CliError::Usage(
            "explain: --bundle DIR or --pid PID is required (see explain --help)".into(),
        )
    })?;
    let (e, host) = crate::explain::explain(
        &config,
        std::path::Path::new(bundle),
        !a.switch("no-inventory"),
    )?;
    if let Err(r) = e.decision.verdict(config.on_error) {
        return Err(CliError::Failed(format!(
            "explain: the hook would refuse the container (on_error: deny): {r}"
        )));
    }
    if a.switch("json") {
        print_json(out, &e.edit.doc)?;
        eprintln!("inventory: {}", e.inventory);
    } else {
        out.write_all(e.text(&host)?.as_bytes())?;
    }
    Ok(Exit::Ok)
}

/// `explain --pid PID` given a pid that is no running container with a plan.
#[derive(Debug, thiserror::Error)]
#[error("explain --pid: {0}")]
struct PidError(#[source] RunningError);

/// `explain --pid PID`: the running container's plan against its cgroup now.
fn running(
    config: &HookConfig,
    pid: &str,
    json: bool,
    out: &mut dyn Write,
) -> Result<Exit, CliError> {
    let pid: u32 = pid
        .parse()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| CliError::Usage(format!("explain: --pid {pid:?} is not a pid")))?;
    let check = crate::explain::check_running(config, pid).map_err(|e| match e {
        // The cgroup could not be read: the command failed, not its input.
        RunningError::Cgroup { .. } => CliError::Failed(format!("explain: {e}")),
        // No such pid, no container's init, no readable plan: a bad argument (exit 2).
        _ => CliError::input(PidError(e)),
    })?;
    if json {
        print_json(out, &check.json())?;
    } else {
        out.write_all(check.text(&Host::of(config))?.as_bytes())?;
    }
    Ok(Exit::Ok)
}
