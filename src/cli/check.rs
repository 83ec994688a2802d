//! `check-config`: whether a hook config loads, and if not, what is wrong with it.

use std::io::Write;
use std::path::Path;

use super::{Args, CliError, Command, Context, Exit, UsageError};
use crate::config::{ConfigError, HookConfig};

/// `check-config`.
pub const CHECK_CONFIG: Command = Command {
    name: "check-config",
    summary: "check a hook config: \"ok\", or what is wrong (exit 2)",
    usage: "\
usage: cpuplan check-config [FILE]   (default: --config, else /etc/cpuplan/hook.json)

Loads the hook config as every hook run, precreate and the NRI plugin do. Prints one line,
\"ok: FILE\", and exits 0 when it loads (a missing default file is the defaults: ok); else one
line naming the file, the key and the value on stderr, and exits 2. A config that fails to load
gives every container the off plan carrying that line (or refuses it, where its on_error says
deny). Debian's postinst and `install` run it.
",
    valued: &[],
    switches: &[],
    run: check_config,
};

/// The line `check-config` prints for the config at `path` when it loads; the error when it
/// does not. `must_exist`: a path the user named (a missing one is then an error).
pub fn check(path: &Path, must_exist: bool) -> Result<String, ConfigError> {
    HookConfig::load_from(path, must_exist)?;
    Ok(if path.exists() {
        format!("ok: {}", path.display())
    } else {
        format!(
            "ok: {} does not exist: every key has its default",
            path.display()
        )
    })
}

fn check_config(ctx: &Context, a: &Args, out: &mut dyn Write) -> Result<Exit, CliError> {
    let (path, named) = match a.positional.as_slice() {
        [] => (ctx.config, ctx.config_given),
        [file] => (Path::new(file.as_str()), true),
        _ => return Err(UsageError("check-config: at most one FILE".into()).into()),
    };
    writeln!(out, "{}", check(path, named)?)?;
    Ok(Exit::Ok)
}
