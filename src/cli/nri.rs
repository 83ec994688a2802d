//! `nri`: cpuplan as an NRI plugin of containerd or CRI-O.

use std::io::Write;
use std::path::PathBuf;

use super::{Args, CliError, Command, Context, Exit, UsageError};
use crate::config::HookConfig;
use crate::nri::{NriArgs, NriOptions};

/// `nri`.
pub const NRI: Command = Command {
    name: "nri",
    summary: "run as an NRI plugin of containerd or CRI-O (long-running)",
    usage: crate::nri::HELP,
    valued: &[
        "socket",
        "name",
        "index",
        "log",
        "state",
        "probe",
        "metrics-address",
    ],
    switches: &[],
    run: nri,
};

fn nri(ctx: &Context, a: &Args, out: &mut dyn Write) -> Result<Exit, CliError> {
    if !a.positional.is_empty() {
        return Err(UsageError("nri: takes no arguments".into()).into());
    }
    if let Some(which) = a.value("probe") {
        let which: crate::nri::health::Probe =
            which.parse().map_err(|e| UsageError(format!("{e}")))?;
        let state = a
            .value("state")
            .unwrap_or(crate::nri::health::DEFAULT_STATE);
        let answer = crate::nri::probe(std::path::Path::new(state), which);
        let _ = writeln!(out, "{}", answer.line);
        return Ok(if answer.pass { Exit::Ok } else { Exit::Code(1) });
    }
    let args = NriArgs {
        socket: a.value("socket").map(PathBuf::from),
        name: a.value("name").map(String::from),
        index: a.value("index").map(String::from),
        log: a.value("log").map(PathBuf::from),
        state: a.value("state").map(PathBuf::from),
        metrics_address: a.value("metrics-address").map(String::from),
    };
    let opts = NriOptions::new(args, ctx.config.to_path_buf(), |k| std::env::var(k).ok())
        .map_err(CliError::input)?;
    let config = HookConfig::load_from(ctx.config, ctx.config_given)?;
    crate::nri::run(&opts, config).map_err(|e| CliError::Failed(e.to_string()))?;
    Ok(Exit::Ok)
}
