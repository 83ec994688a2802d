//! `cpuplan-hook`: the OCI hook binary and its command line.

use std::io::IsTerminal;
use std::process::ExitCode;

use cpuplan_hook::{escape, main_with, CliError, Exit};

fn main() -> ExitCode {
    // The release profile unwinds panics (for the shim's C ABI); this binary stops at its first
    // panic, in any thread (an NRI plugin thread too), after the usual message, except in the
    // runtime's stages, which catch it to fail open (cli::PANIC_ABORTS).
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        if cpuplan_hook::panic_aborts() {
            std::process::abort();
        }
    }));
    let mut words: Vec<String> = std::env::args().skip(1).collect();
    if cpuplan_hook::nri::launched_by_runtime(&words) {
        words.push("nri".into()); // launched by an NRI runtime from its plugin directory
    }
    let mut out = std::io::stdout().lock();
    match main_with(words, &mut out, std::io::stdin().is_terminal()) {
        Ok(Exit::Ok) => ExitCode::SUCCESS,
        Ok(Exit::Code(c)) => ExitCode::from(c),
        Err(e) => {
            let typed = e.downcast_ref::<CliError>();
            if let Some(CliError::Usage(_)) = typed {
                // The usage text spans lines on purpose.
                eprintln!("cpuplan-hook: {e}");
            } else {
                // Errors may quote what a container supplied: one line, whatever it holds.
                eprintln!("cpuplan-hook: {}", escape(&e.to_string()));
            }
            ExitCode::from(typed.map_or(1, CliError::exit_code))
        }
    }
}
