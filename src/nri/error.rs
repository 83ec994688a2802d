//! The NRI plugin's errors.

use std::io;
use std::path::PathBuf;

/// Why the NRI plugin could not start, connect, register, or go on.
#[derive(Debug, thiserror::Error)]
pub enum NriError {
    /// The command line of `cpuplan-hook nri` is wrong.
    #[error("{0}")]
    Usage(String),
    /// The runtime's NRI socket could not be connected to.
    #[error("cannot connect to the NRI socket {}", path.display())]
    Connect {
        /// The socket's path.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// `NRI_PLUGIN_SOCKET` does not name a usable pre-connected socket.
    #[error("bad pre-connected socket NRI_PLUGIN_SOCKET={value:?}: {why}")]
    PreConnected {
        /// The variable's value.
        value: String,
        /// What is wrong with it.
        why: String,
    },
    /// A local part of the transport (socket, listener, thread) could not be set up.
    #[error("cannot set up the NRI transport: {what}")]
    Transport {
        /// What was being set up.
        what: &'static str,
        /// Why it failed.
        #[source]
        source: io::Error,
    },
    /// The ttrpc server or client failed.
    #[error("ttrpc: {what}")]
    Ttrpc {
        /// What was being done.
        what: &'static str,
        /// The ttrpc error.
        #[source]
        source: ttrpc::Error,
    },
    /// The runtime did not accept the plugin's registration.
    #[error("registration of NRI plugin {name} failed")]
    Register {
        /// The plugin's `INDEX-NAME`.
        name: String,
        /// The runtime's answer, or the transport's error.
        #[source]
        source: ttrpc::Error,
    },
    /// SIGTERM/SIGINT could not be routed to the plugin's signal thread.
    #[error("cannot set up signal handling")]
    Signals(#[source] nix::Error),
}
