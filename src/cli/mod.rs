//! The command line of `cpuplan-hook`: one table of commands, one dispatcher.
//!
//! `--help`, unknown options, `--version` and the mapping of errors to exit statuses happen
//! here once; each command's handler only does its work.

pub mod args;
mod check;
mod error;
mod explain;
mod inspect;
mod install;
mod inventory;
mod nri;
mod stages;
mod status;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

pub use args::{Args, UsageError};
pub use error::CliError;

use crate::config::DEFAULT_CONFIG;
use args::take_global_config;

/// Whether a panic aborts the process: the default (a long-running NRI plugin must not go on
/// half dead); the runtime's stages (`hook`, `precreate`) turn it off to catch a panic and fail
/// open under `on_error: allow`.
pub static PANIC_ABORTS: AtomicBool = AtomicBool::new(true);

/// Whether a panic should abort the process now ([`PANIC_ABORTS`]).
pub fn panic_aborts() -> bool {
    PANIC_ABORTS.load(Ordering::SeqCst)
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Exit status 0.
    Ok,
    /// Exit with this status (a hook that refuses its container).
    Code(u8),
}

/// What every handler is given besides its arguments.
pub struct Context<'a> {
    /// The hook config's path (`--config`, else the default).
    pub config: &'a Path,
    /// Whether `--config` was given (then the file must exist).
    pub config_given: bool,
}

/// A command's handler.
type Handler = fn(&Context, &Args, &mut dyn Write) -> Result<Exit, CliError>;

/// One command: its name, its one-line summary, its usage text, its options and its handler.
pub struct Command {
    /// The subcommand word.
    pub name: &'static str,
    /// One line for the top-level help.
    pub summary: &'static str,
    /// Its `--help` text.
    pub usage: &'static str,
    /// Options that take a value.
    pub valued: &'static [&'static str],
    /// Options that take none.
    pub switches: &'static [&'static str],
    run: Handler,
}

/// Every command, in help order.
pub const COMMANDS: &[Command] = &[
    stages::HOOK,
    explain::EXPLAIN,
    inventory::INVENTORY,
    inspect::PLAN,
    inspect::QUOTA,
    inspect::GPUS,
    inspect::CLAIMS,
    status::STATUS,
    stages::PRECREATE,
    check::CHECK_CONFIG,
    install::INSTALL,
    install::UNINSTALL,
    nri::NRI,
];

/// The program's version line.
pub fn version() -> String {
    format!("cpuplan-hook {}\n", env!("CARGO_PKG_VERSION"))
}

/// The top-level usage, listing [`COMMANDS`].
pub fn usage() -> String {
    let mut s = String::from(
        "cpuplan-hook: plan a GPU container's CPUs before its workload starts (an OCI runtime hook)\n\n\
         usage: cpuplan-hook [--config PATH] [SUBCOMMAND] [OPTIONS]\n\nsubcommands:\n",
    );
    for c in COMMANDS {
        s.push_str(&format!("  {:<12} {}\n", c.name, c.summary));
    }
    s.push_str(
        "  help         this text\n\n\
         --config PATH (before or after any subcommand): the hook config (default /etc/cpuplan/hook.json).\n\
         Every subcommand takes --help; --version prints the version. Without a subcommand the state\n\
         on stdin is run as `hook`. Bad arguments or files: exit status 2 and one line on stderr.\n",
    );
    s
}

/// Runs the command line `words` (without the program name), writing to `out`; `stdin_is_tty`
/// says whether stdin is a terminal (a bare `cpuplan-hook` then prints the usage instead of waiting).
///
/// The top of the binary: its error is `anyhow`'s, carrying the command's typed [`CliError`]
/// (whose [`CliError::exit_code`] is the process's exit status).
pub fn main_with(
    words: Vec<String>,
    out: &mut dyn Write,
    stdin_is_tty: bool,
) -> anyhow::Result<Exit> {
    Ok(dispatch(words, out, stdin_is_tty)?)
}

/// Finds the command `words` name and runs its handler.
fn dispatch(
    mut words: Vec<String>,
    out: &mut dyn Write,
    stdin_is_tty: bool,
) -> Result<Exit, CliError> {
    let given = take_global_config(&mut words)?;
    let config_path = given
        .clone()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG));
    let ctx = Context {
        config: &config_path,
        config_given: given.is_some(),
    };
    let (name, rest) = match words.split_first() {
        Some((w, _)) if w == "--help" || w == "-h" || w == "help" => {
            out.write_all(usage().as_bytes())?;
            return Ok(Exit::Ok);
        }
        Some((w, _)) if w == "--version" || w == "-V" => {
            out.write_all(version().as_bytes())?;
            return Ok(Exit::Ok);
        }
        Some((w, rest)) if !w.starts_with('-') => (w.as_str(), rest),
        _ if stdin_is_tty && words.is_empty() => {
            return Err(CliError::Usage(format!(
                "no subcommand and stdin is a terminal: the hook reads the OCI state on stdin\n{}",
                usage()
            )))
        }
        _ => ("hook", &words[..]),
    };
    let Some(cmd) = COMMANDS.iter().find(|c| c.name == name) else {
        return Err(CliError::Usage(format!(
            "unknown subcommand {name:?} (see cpuplan-hook --help)"
        )));
    };
    let mut switches = cmd.switches.to_vec();
    switches.push("version");
    let a = Args::parse(cmd.name, rest, cmd.valued, &switches)?;
    if a.help {
        out.write_all(cmd.usage.as_bytes())?;
        return Ok(Exit::Ok);
    }
    if a.switch("version") {
        out.write_all(version().as_bytes())?;
        return Ok(Exit::Ok);
    }
    (cmd.run)(&ctx, &a, out)
}
