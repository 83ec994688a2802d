//! `cpuplan-hook nri`: cpuplan as an NRI plugin (containerd >= 1.7, CRI-O >= 1.26).
//!
//! The plugin registers with the runtime over NRI's multiplexed ttrpc socket and is asked, for
//! each container being created, how to adjust it; the planning itself is a [`Handler`]. Files:
//! [`mux`] (NRI's connection multiplexer), [`proto`] (NRI's messages), [`adjust`] (builders for
//! the answers), [`events`] (the subscription), [`service`] (the `Plugin` ttrpc service),
//! [`transport`] (ttrpc over the mux), [`plugin`] (connect, register, reconnect, signals),
//! [`options`] (the command line), [`handler`] (the trait and two small handlers).
#![warn(missing_docs)]

pub mod adjust;
pub mod error;
pub mod events;
pub mod from_edit;
pub mod handler;
pub mod mux;
pub mod options;
pub mod plandir;
pub mod planner;
pub mod plugin;
pub mod proto;
pub mod service;
pub mod spec;
pub mod transport;

use std::sync::Arc;

use crate::config::HookConfig;

pub use error::NriError;
pub use events::EventMask;
pub use handler::{Handler, PassHandler, TestHandler};
pub use options::{launched_by_runtime, NriArgs, NriOptions, HELP};
pub use planner::PlanHandler;
pub use plugin::run_with;
pub use proto::{Container, ContainerAdjustment, ContainerUpdate, Mount, PodSandbox};

/// Runs the plugin as `opts` say, with the test handler under `--test-handler` and otherwise
/// [`PlanHandler`], until SIGTERM/SIGINT or, for a plugin the runtime launched, until the runtime
/// closes its socket. It logs to stderr and to `--log`, else to the config's `log`; a plugin the
/// runtime launched opens the config's log only at Configure, once it knows which configuration
/// is in force (the runtime may give one).
pub fn run(opts: &NriOptions, config: HookConfig) -> Result<(), NriError> {
    let launched = matches!(opts.endpoint, options::Endpoint::PreConnected(_));
    let early = match (&opts.log, launched) {
        (Some(log), _) => Some(log.as_path()),
        (None, false) => config.log.as_deref(),
        (None, true) => None,
    };
    crate::logging::init(early);
    crate::logging::set_level(config.log_level);
    let handler: Arc<dyn Handler> = if opts.test_handler {
        Arc::new(TestHandler::default())
    } else {
        Arc::new(PlanHandler::new(
            config,
            &opts.full_name(),
            opts.log.is_some(),
        ))
    };
    run_with(opts, handler)
}
