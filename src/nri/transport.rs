//! ttrpc over the NRI mux, with the `ttrpc` crate's sync server and client.
//!
//! The crate's client takes a connected fd, so connection 2 (plugin calls runtime) is one end
//! of a socket pair whose other end the mux pumps. Its server only serves connections it
//! accepts from a listener, so connection 1 (runtime calls plugin) goes through a private
//! listener: a unix socket in a fresh 0700 directory, connected to once by the mux and unlinked
//! at once, so nothing else can reach it.

use std::io;
use std::os::fd::{AsRawFd, IntoRawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use prost::Message;

use super::error::NriError;
use super::mux::{Closed, Mux, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use super::proto::{RegisterPluginRequest, RUNTIME_SERVICE};
use super::service::PluginService;

/// How long the plugin waits for the runtime to answer its registration.
pub const REGISTER_TIMEOUT: Duration = Duration::from_secs(5);

/// One live connection to the runtime: the mux, and the ttrpc server on it.
pub struct Link {
    mux: Option<Mux>,
    server: Option<ttrpc::Server>,
    // Closed after the server is shut down: ttrpc never closes a listener fd it was given.
    _listener: UnixListener,
}

impl Link {
    /// Serves `service` on `trunk` and registers as `name` with index `index`; `on_close` is
    /// called once when the trunk closes (the runtime went away, or [`Link::close`]).
    pub fn open(
        trunk: UnixStream,
        service: Arc<PluginService>,
        name: &str,
        index: &str,
        on_close: impl FnOnce(Closed) + Send + 'static,
    ) -> Result<Link, NriError> {
        let (listener, plugin_side) = private_connection()?;
        let mut server = ttrpc::Server::new()
            .add_listener(listener.as_raw_fd())
            .map_err(|source| NriError::Ttrpc {
                what: "server listener",
                source,
            })?
            .register_service(service.methods());
        server.start().map_err(|source| NriError::Ttrpc {
            what: "server start",
            source,
        })?;
        let (client_side, runtime_side) = UnixStream::pair().map_err(transport("socket pair"))?;
        let mux = match Mux::start(
            trunk,
            vec![
                (PLUGIN_SERVICE_CONN, plugin_side),
                (RUNTIME_SERVICE_CONN, runtime_side),
            ],
            on_close,
        ) {
            Ok(m) => m,
            Err(e) => {
                server.shutdown();
                return Err(NriError::Transport {
                    what: "mux threads",
                    source: e,
                });
            }
        };
        let link = Link {
            mux: Some(mux),
            server: Some(server),
            _listener: listener,
        };
        // The client owns its fd from here on; it is dropped (and its polling thread ends)
        // once registered: the plugin has nothing else to ask the runtime.
        let client =
            ttrpc::Client::new(client_side.into_raw_fd()).map_err(|source| NriError::Ttrpc {
                what: "client",
                source,
            })?;
        register(&client, name, index)?;
        Ok(link)
    }

    /// Closes the connection and stops the server, waiting for their threads.
    pub fn close(mut self) {
        self.shut();
    }

    fn shut(&mut self) {
        if let Some(mux) = self.mux.take() {
            mux.close();
            mux.join();
        }
        if let Some(server) = self.server.take() {
            server.shutdown();
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.shut();
    }
}

/// `Runtime.RegisterPlugin` with `name` and `index`.
fn register(client: &ttrpc::Client, name: &str, index: &str) -> Result<(), NriError> {
    let payload = RegisterPluginRequest {
        plugin_name: name.to_string(),
        plugin_idx: index.to_string(),
    }
    .encode_to_vec();
    let mut req = ttrpc::Request::new();
    req.service = RUNTIME_SERVICE.to_string();
    req.method = "RegisterPlugin".to_string();
    req.payload = payload;
    req.timeout_nano = REGISTER_TIMEOUT.as_nanos() as i64;
    client
        .request(req)
        .map(|_| ())
        .map_err(|source| NriError::Register {
            name: format!("{index}-{name}"),
            source,
        })
}

/// A listener in a fresh private directory and one connection to it, the directory removed.
fn private_connection() -> Result<(UnixListener, UnixStream), NriError> {
    let template = std::env::temp_dir().join("cpuplan-nri.XXXXXX");
    let dir: PathBuf = nix::unistd::mkdtemp(&template).map_err(|e| NriError::Transport {
        what: "private directory",
        source: io::Error::from(e),
    })?;
    let path = dir.join("plugin.sock");
    let made = UnixListener::bind(&path)
        .and_then(|l| UnixStream::connect(&path).map(|s| (l, s)))
        .map_err(transport("private listener"));
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir(&dir);
    made
}

fn transport(what: &'static str) -> impl Fn(io::Error) -> NriError {
    move |source| NriError::Transport { what, source }
}
