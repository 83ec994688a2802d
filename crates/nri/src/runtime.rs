//! The runtime's end of NRI, for testing plugins over the real protocol: a [`Session`] runs
//! NRI's multiplexer on a connection from a plugin, serves `Runtime.RegisterPlugin`, and calls
//! the plugin's `Plugin` service as containerd or CRI-O would, with any request a test builds
//! (hostile ones included). [`Listener`] is a runtime's NRI socket a plugin connects to.

use std::collections::HashMap;
use std::os::fd::IntoRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Duration;

use prost::Message;
use ttrpc::{MethodHandler, TtrpcContext};

use crate::api::{RegisterPluginRequest, PLUGIN_SERVICE, RUNTIME_SERVICE};
use crate::error::Error;
use crate::mux::{Mux, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use crate::transport::LocalServer;

/// How long a call to the plugin may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// A runtime's NRI socket, bound at a path.
pub struct Listener {
    listener: UnixListener,
    path: PathBuf,
}

impl Listener {
    /// Binds the socket at `path`.
    pub fn bind(path: &Path) -> Result<Listener, Error> {
        let listener = UnixListener::bind(path).map_err(|source| Error::Transport {
            what: "runtime listener",
            source,
        })?;
        Ok(Listener {
            listener,
            path: path.to_path_buf(),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits for a plugin to connect; its session (not yet registered).
    pub fn accept(&self) -> Result<Session, Error> {
        let (trunk, _) = self.listener.accept().map_err(|source| Error::Transport {
            what: "accept a plugin",
            source,
        })?;
        Session::over(trunk)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The runtime's `RegisterPlugin`: passes what it got on.
struct Register(Mutex<mpsc::Sender<RegisterPluginRequest>>);

impl MethodHandler for Register {
    fn handler(&self, ctx: TtrpcContext, req: ttrpc::Request) -> ttrpc::Result<()> {
        if let Ok(r) = RegisterPluginRequest::decode(req.payload.as_slice()) {
            if let Ok(tx) = self.0.lock() {
                let _ = tx.send(r);
            }
        }
        ctx.respond(ctx.mh.stream_id, ttrpc::Response::new())
    }
}

/// One plugin's connection, seen from the runtime.
pub struct Session {
    // Dropped first: the trunk closes and the mux's threads end before the client goes.
    _mux: Mux,
    client: ttrpc::Client,
    registered: Mutex<mpsc::Receiver<RegisterPluginRequest>>,
    // Shut down after the mux (its connection ends first).
    _server: LocalServer,
}

impl Session {
    /// Serves `Runtime.RegisterPlugin` and a client of the plugin's service over `trunk`.
    pub fn over(trunk: UnixStream) -> Result<Session, Error> {
        let (tx, registered) = mpsc::channel();
        let mut methods: HashMap<String, Box<dyn MethodHandler + Send + Sync>> = HashMap::new();
        methods.insert(
            format!("/{RUNTIME_SERVICE}/RegisterPlugin"),
            Box::new(Register(Mutex::new(tx))),
        );
        let server = LocalServer::start(methods)?;
        let server_side = server.connect()?;
        let (client_fd, client_side) = UnixStream::pair().map_err(|source| Error::Transport {
            what: "socket pair",
            source,
        })?;
        let mux = Mux::start(
            trunk,
            vec![
                (PLUGIN_SERVICE_CONN, client_side),
                (RUNTIME_SERVICE_CONN, server_side),
            ],
            |_| {},
        )
        .map_err(|source| Error::Transport {
            what: "mux threads",
            source,
        })?;
        let client =
            ttrpc::Client::new(client_fd.into_raw_fd()).map_err(|source| Error::Ttrpc {
                what: "client",
                source,
            })?;
        Ok(Session {
            client,
            _mux: mux,
            registered: Mutex::new(registered),
            _server: server,
        })
    }

    /// Waits up to `timeout` for the plugin's registration; what it sent.
    pub fn registered(&self, timeout: Duration) -> Option<RegisterPluginRequest> {
        self.registered.lock().ok()?.recv_timeout(timeout).ok()
    }

    /// Calls `method` of the plugin's service with the encoded `payload`; the reply's bytes.
    pub fn call_raw(&self, method: &str, payload: Vec<u8>) -> Result<Vec<u8>, ttrpc::Error> {
        let mut req = ttrpc::Request::new();
        req.service = PLUGIN_SERVICE.to_string();
        req.method = method.to_string();
        req.payload = payload;
        req.timeout_nano = CALL_TIMEOUT.as_nanos() as i64;
        let res = self.client.request(req)?;
        Ok(res.payload)
    }

    /// Calls `method` of the plugin's service with `req`; the decoded reply.
    pub fn call<R: Message + Default>(
        &self,
        method: &str,
        req: &impl Message,
    ) -> Result<R, ttrpc::Error> {
        let bytes = self.call_raw(method, req.encode_to_vec())?;
        R::decode(bytes.as_slice()).map_err(|e| ttrpc::Error::Others(format!("reply: {e}")))
    }

    /// Closes the connection: the plugin sees the runtime go.
    pub fn close(self) {
        drop(self);
    }
}
