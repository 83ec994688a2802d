//! `cpuplan-hook`: the OCI hook binary and its command line.

use std::process::ExitCode;

use cpuplan_hook::cli::commands::{BadInput, Exit};
use cpuplan_hook::cli::{main_with, UsageError};

fn main() -> ExitCode {
    let mut words: Vec<String> = std::env::args().skip(1).collect();
    if cpuplan_hook::nri::launched_by_runtime(&words) {
        words.push("nri".into()); // launched by an NRI runtime from its plugin directory
    }
    let mut out = std::io::stdout().lock();
    match main_with(words, &mut out) {
        Ok(Exit::Ok) => ExitCode::SUCCESS,
        Ok(Exit::Code(c)) => ExitCode::from(c.clamp(1, 255) as u8),
        Err(e) => {
            let code = if e.is::<UsageError>() || e.is::<BadInput>() {
                2
            } else {
                1
            };
            eprintln!("cpuplan-hook: {e:#}");
            ExitCode::from(code)
        }
    }
}
