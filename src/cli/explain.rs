//! `explain`: what the hook would do for a bundle on this host.

use std::io::Write;

use super::inspect::{print_json, root_dir};
use super::{Args, CliError, Command, Context, Exit};
use crate::config::HookConfig;

/// `explain`.
pub const EXPLAIN: Command = Command {
    name: "explain",
    summary: "what the hook would do for a bundle on this host, writing nothing",
    usage: "\
usage: cpuplan-hook explain --bundle DIR [--root DIR] [--topology-root DIR] [--config PATH] [--json] [--no-inventory]

What the hook would do for the bundle's config.json on this host, with no pid: the live cgroup
and the GPU claims are skipped (and said so). Writes nothing. --root and --topology-root
override the hook config's root and topology_root. --json prints the plan.json the hook would
write. A planning problem prints the off plan the hook would write under on_error: allow (exit
0), and is an error (exit 1) under on_error: deny, where the hook would refuse the container.
The host-wide facts come from the host inventory in inventory_dir as the hook takes them (read
and written there when needed); the text says whether it was used (with --json, stderr does).
--no-inventory reads the host afresh.
",
    valued: &["bundle", "root", "topology-root"],
    switches: &["json", "no-inventory"],
    run: explain,
};

fn explain(ctx: &Context, a: &Args, out: &mut dyn Write) -> Result<Exit, CliError> {
    let bundle = a.required("explain", "bundle")?;
    let mut config = HookConfig::load_from(ctx.config, ctx.config_given)?;
    if let Some(r) = root_dir(a, "root")? {
        config.root = r.clone();
        config.topology_root = r;
    }
    if let Some(t) = root_dir(a, "topology-root")? {
        config.topology_root = t;
    }
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
