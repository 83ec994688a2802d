//! The stub's errors: why a plugin could not start, connect, register, or go on.

use std::io;
use std::path::PathBuf;

/// Why the plugin could not start, connect, register, or go on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The plugin's name or index is not one NRI accepts.
    #[error("{0}")]
    Identity(String),
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
    /// The plugin subscribes to no event (the runtime would take a mask of 0 as every event).
    #[error("plugin {0} subscribes to no event")]
    NoEvents(String),
    /// SIGTERM/SIGINT could not be routed to the plugin's signal thread.
    #[error("cannot set up signal handling")]
    Signals(#[source] nix::Error),
}

/// An error with its causes, `a: b: c` (for one-line logs).
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
