//! `cpuplan-nri`: cpuplan as an NRI plugin (containerd >= 1.7, CRI-O >= 1.26), on the
//! workspace's NRI stub crate (`crates/nri`, `nri_plugin`), which speaks the protocol.
//!
//! What is cpuplan's here: `planner` (the [`nri_plugin::Plugin`]: read, decide, claim,
//! write, answer), `ids` (the one check of every id a path is built from), [`instance`] (one
//! plugin per plan directory at a time), `attempts`
//! (containers whose plan mount may have stopped their start), `plandir` (the host directory
//! of plans), `spec` (NRI's container as the planner's spec), `from_edit`
//! (the edit as NRI's adjustment), [`options`] (the command line), `metrics` (Prometheus),
//! `health` (readiness and liveness, and the probes' state file), `http` (the listener),
//! `ranks` (each GPU worker process placed on its GPU's CPUs, watching the kernel's process
//! events).
#![warn(missing_docs)]

mod attempts;
mod error;
mod from_edit;
pub(crate) mod health;
mod http;
mod ids;
pub mod instance;
pub mod metrics;
pub mod options;
mod plandir;
mod planner;
pub(crate) mod ranks;
mod spec;

use std::sync::Arc;

use crate::config::HookConfig;

pub use error::NriError;
pub use options::{NriArgs, NriOptions, HELP};
pub use planner::PlanHandler;

/// Runs the plugin as `opts` say, planning with [`PlanHandler`], until SIGTERM/SIGINT or, for a
/// plugin the runtime launched, until the runtime closes its socket. An external plugin connects
/// only once it holds its `nri_dir` (`instance::Instance`), waiting while another plugin
/// serves that directory; one the runtime launched takes it at Configure (the configuration in
/// force is known then) and fails its registration if another plugin holds it. It logs to stderr and to
/// `--log` (`stderr`: nowhere else), else to the config's `log`; a plugin the runtime launched opens the config's log
/// only at Configure, once it knows which configuration is in force (the runtime may give one).
pub fn run(opts: &NriOptions, config: HookConfig) -> Result<(), NriError> {
    let launched = matches!(opts.stub.endpoint, nri_plugin::Endpoint::PreConnected(_));
    let early = match (&opts.log, launched) {
        // `--log stderr`: stderr only (the systemd unit's journal), never the config's file.
        (Some(log), _) if log.as_os_str() == "stderr" => None,
        (Some(log), _) => Some(log.as_path()),
        (None, false) => config.log.as_deref(),
        (None, true) => None,
    };
    crate::logging::set_ident("cpuplan-nri");
    crate::logging::set_drop(nri_plugin::transport::is_rejection_echo);
    crate::logging::init(early);
    crate::logging::set_level(config.log_level);
    let nri_dir = config.nri_dir.clone();
    let listen = opts.metrics_address.or(config.metrics);
    let handler = Arc::new(PlanHandler::new(
        config,
        &opts.stub.full_name(),
        opts.log.is_some(),
    ));
    let health = handler.health();
    // These threads start before the stub's signal thread: they must not take SIGTERM/SIGINT.
    nri_plugin::without_stop_signals(|| {
        if !launched {
            // The probes are a DaemonSet's (an external plugin); a runtime watches one it launched.
            health::keep_state(opts.state.clone(), handler.health());
        }
        if let Some(address) = listen {
            http::serve(address, Arc::clone(&handler));
        }
        ranks::spawn(handler.ranks());
    });
    if launched {
        handler.hold_at_configure();
    } else {
        let standby = || health.set(health::Phase::Standby);
        handler.hold(instance::Instance::acquire_standing_by(&nri_dir, standby)?);
    }
    health.set(health::Phase::Connecting);
    nri_plugin::run(&opts.stub, handler)?;
    Ok(())
}

/// `--probe ready|live`: the plugin's verdict from its state file at `state`, as one line.
pub fn probe(state: &std::path::Path, which: health::Probe) -> health::Answer {
    health::probe(state, which, std::time::SystemTime::now())
}
