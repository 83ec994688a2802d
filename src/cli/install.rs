//! `install` and `uninstall`: the binary, the registrations and a default hook config.

use std::io::Write;
use std::path::Path;

use super::{Args, CliError, Command, Context, Exit};
use crate::install::{Layout, DEFAULT_HOOKS_DIR, DEFAULT_PREFIX};

const USAGE: &str = "\
usage: cpuplan-hook install [--prefix DIR] [--hooks-dir DIR] [--with-precreate] [--config PATH]
       cpuplan-hook uninstall [--prefix DIR] [--hooks-dir DIR] [--config PATH]

install copies this binary to <prefix>/libexec/cpuplan/cpuplan-hook (prefix /usr/local), writes
cpuplan.json (and with --with-precreate cpuplan-precreate.json) into the hooks dir
(/etc/containers/oci/hooks.d), writes a default hook config at --config
(/etc/cpuplan/hook.json) if none exists, and prints what containerd users add. Idempotent;
refuses to overwrite a hooks.d file it did not write. uninstall removes them (the config only
if it is still the default).
";

/// `install`.
pub const INSTALL: Command = Command {
    name: "install",
    summary: "install the binary, the hooks.d files and a default config",
    usage: USAGE,
    valued: &["prefix", "hooks-dir"],
    switches: &["with-precreate"],
    run: install,
};

/// `uninstall`.
pub const UNINSTALL: Command = Command {
    name: "uninstall",
    summary: "undo install",
    usage: USAGE,
    valued: &["prefix", "hooks-dir"],
    switches: &[],
    run: uninstall,
};

/// The layout of `install`/`uninstall`, its paths made absolute: a runtime runs the registered
/// hook from another directory.
fn layout(a: &Args, config: &Path) -> Result<Layout, CliError> {
    let abs = |p: &str| {
        std::path::absolute(p)
            .map_err(|e| CliError::Failed(format!("cannot make {p} absolute: {e}")))
    };
    Ok(Layout {
        prefix: abs(a.value("prefix").unwrap_or(DEFAULT_PREFIX))?,
        hooks_dir: abs(a.value("hooks-dir").unwrap_or(DEFAULT_HOOKS_DIR))?,
        config: abs(&config.display().to_string())?,
    })
}

fn say(out: &mut dyn Write, lines: Vec<String>) -> Result<Exit, CliError> {
    for line in lines {
        writeln!(out, "{line}")?;
    }
    Ok(Exit::Ok)
}

fn install(ctx: &Context, a: &Args, out: &mut dyn Write) -> Result<Exit, CliError> {
    let me = std::env::current_exe()
        .map_err(|e| CliError::Failed(format!("cannot find this binary: {e}")))?;
    let said = crate::install::install(&layout(a, ctx.config)?, &me, a.switch("with-precreate"))?;
    say(out, said)
}

fn uninstall(ctx: &Context, a: &Args, out: &mut dyn Write) -> Result<Exit, CliError> {
    let said = crate::install::uninstall(&layout(a, ctx.config)?)?;
    say(out, said)
}
