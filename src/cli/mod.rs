//! The command lines of the three binaries: one table of commands per [`Program`], one
//! dispatcher. `cpuplan-hook` ([`HOOK`]) runs the runtime's stages, `cpuplan-nri` ([`NRI`]) the
//! NRI plugin, `cpuplan` ([`OPERATOR`]) the operator's commands; a command is one entry in its
//! program's table. Each binary links only what its table reaches (`tests/host/layers.rs` checks
//! that the hook has neither the installer nor the NRI plugin).
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

/// One program: its name, what it is for, and its own table of commands.
pub struct Program {
    /// The binary's name, which starts its messages.
    pub name: &'static str,
    /// The first line of its `--help`.
    pub about: &'static str,
    /// Its commands, in help order. A program of one command takes no subcommand word: every
    /// word is that command's.
    pub commands: &'static [Command],
    /// The command a command line without a subcommand word runs, if any.
    pub default: Option<&'static str>,
}

/// `cpuplan-hook`: the runtime's one-shot stages (the OCI hook, podman's precreate).
pub const HOOK: Program = Program {
    name: "cpuplan-hook",
    about: "plan a GPU container's CPUs before its workload starts (an OCI runtime hook)",
    commands: &[stages::HOOK, stages::PRECREATE],
    default: Some("hook"),
};

/// `cpuplan-nri`: the NRI plugin of containerd or CRI-O (long-running).
pub const NRI: Program = Program {
    name: "cpuplan-nri",
    about: "run as an NRI plugin of containerd or CRI-O",
    commands: &[nri::NRI],
    default: None,
};

/// `cpuplan`: the operator's command.
pub const OPERATOR: Program = Program {
    name: "cpuplan",
    about: "inspect, explain and install cpuplan (the operator's command)",
    commands: &[
        explain::EXPLAIN,
        inventory::INVENTORY,
        inspect::PLAN,
        inspect::QUOTA,
        inspect::GPUS,
        inspect::CLAIMS,
        status::STATUS,
        check::CHECK_CONFIG,
        install::INSTALL,
        install::UNINSTALL,
    ],
    default: None,
};

impl Program {
    /// The program's version line.
    pub fn version(&self) -> String {
        format!("{} {}\n", self.name, env!("CARGO_PKG_VERSION"))
    }

    /// The top-level usage, listing its commands (a program of one command: that command's).
    pub fn usage(&self) -> String {
        if let [only] = self.commands {
            return only.usage.to_string();
        }
        let name = self.name;
        let mut s = format!(
            "{name}: {}\n\nusage: {name} [--config PATH] SUBCOMMAND [OPTIONS]\n\nsubcommands:\n",
            self.about
        );
        for c in self.commands {
            s.push_str(&format!("  {:<12} {}\n", c.name, c.summary));
        }
        s.push_str(
            "  help         this text\n\n\
             --config PATH (before or after any subcommand): the hook config (default /etc/cpuplan/hook.json).\n\
             Every subcommand takes --help; --version prints the version. Bad arguments or files: exit\n\
             status 2 and one line on stderr.\n",
        );
        if let Some(d) = self.default {
            s.push_str(&format!(
                "Without a subcommand, what is on stdin is run as `{d}`.\n"
            ));
        }
        s
    }
}

/// The process's `main` for `program`: runs the command line and returns the exit status. A
/// panic aborts (after the usual message), except in the runtime's stages, which catch it to
/// fail open ([`PANIC_ABORTS`]); an error is printed as one line naming the program.
pub fn main(program: &Program) -> std::process::ExitCode {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        if panic_aborts() {
            std::process::abort();
        }
    }));
    let name = program.name;
    let words = match words() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("{name}: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let mut out = std::io::stdout().lock();
    // Not `std::io::stdin().is_terminal()`: `stdin()` allocates its 8 KiB buffer, which the
    // runtime's stages (they read fd 0 unbuffered) never use.
    let stdin_is_tty = nix::unistd::isatty(0).unwrap_or(false);
    let ran = main_with(program, words, &mut out, stdin_is_tty);
    let _ = out.flush();
    std::process::ExitCode::from(match ran {
        Ok(Exit::Ok) => 0,
        Ok(Exit::Code(c)) => c,
        Err(e) => {
            let typed = e.downcast_ref::<CliError>();
            if let Some(CliError::Usage(_)) = typed {
                // The usage text spans lines on purpose.
                eprintln!("{name}: {e}");
            } else {
                // Errors may quote what a container supplied: one line, whatever it holds.
                eprintln!("{name}: {}", crate::logging::escape(&e.to_string()));
            }
            typed.map_or(1, CliError::exit_code)
        }
    })
}

/// The command line's words after the program's name; a word that is not UTF-8 is an error
/// naming it.
fn words() -> Result<Vec<String>, String> {
    std::env::args_os()
        .enumerate()
        .skip(1)
        .map(|(i, w)| {
            w.into_string().map_err(|w| {
                format!(
                    "argument {i} is not UTF-8: {}",
                    crate::logging::escape(&w.to_string_lossy())
                )
            })
        })
        .collect()
}

/// Runs `program`'s command line `words` (without the program name), writing to `out`;
/// `stdin_is_tty` says whether stdin is a terminal (a bare `cpuplan-hook` then prints the usage
/// instead of waiting).
///
/// The top of the binary: its error is `anyhow`'s, carrying the command's typed [`CliError`]
/// (whose [`CliError::exit_code`] is the process's exit status).
pub fn main_with(
    program: &Program,
    words: Vec<String>,
    out: &mut dyn Write,
    stdin_is_tty: bool,
) -> anyhow::Result<Exit> {
    Ok(dispatch(program, words, out, stdin_is_tty)?)
}

/// Finds the command `words` name in `program`'s table and runs its handler.
fn dispatch(
    program: &Program,
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
    let pname = program.name;
    let (name, rest) = match (program.commands, words.split_first()) {
        ([only], _) => (only.name, &words[..]),
        (_, Some((w, _))) if w == "--help" || w == "-h" || w == "help" => {
            out.write_all(program.usage().as_bytes())?;
            return Ok(Exit::Ok);
        }
        (_, Some((w, _))) if w == "--version" || w == "-V" => {
            out.write_all(program.version().as_bytes())?;
            return Ok(Exit::Ok);
        }
        (_, Some((w, rest))) if !w.starts_with('-') => (w.as_str(), rest),
        _ => match program.default {
            Some(_) if stdin_is_tty && words.is_empty() => {
                return Err(CliError::Usage(format!(
                "no subcommand and stdin is a terminal: the hook reads the OCI state on stdin\n{}",
                program.usage()
            )))
            }
            Some(default) => (default, &words[..]),
            None => {
                return Err(CliError::Usage(format!(
                    "no subcommand\n{}",
                    program.usage()
                )))
            }
        },
    };
    let Some(cmd) = program.commands.iter().find(|c| c.name == name) else {
        return Err(CliError::Usage(format!(
            "unknown subcommand {name:?} (see {pname} --help)"
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
        out.write_all(program.version().as_bytes())?;
        return Ok(Exit::Ok);
    }
    (cmd.run)(&ctx, &a, out)
}
