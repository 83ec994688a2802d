//! ttrpc over the NRI mux, with the `ttrpc` crate's sync server and client.
//!
//! The crate's client takes a connected fd, so connection 2 (plugin calls runtime) is one end
//! of a socket pair whose other end the mux pumps. Its server only serves connections it
//! accepts from a listener, so connection 1 (runtime calls plugin) goes through a private
//! listener: an abstract unix socket (no file, so nothing is left in the file system however
//! the process ends) that serves only connections from this process (`SO_PEERCRED`: any other
//! peer is closed at once, and counted: [`report_rejections`] logs them at most once per
//! [`REJECTIONS_EVERY`], with the count and the peers' uids; ttrpc's own warning for each is
//! one a logger drops with [`is_rejection_echo`]), which the mux of each session connects to. One server serves the
//! plugin's whole life: a server per session would leak a pipe fd each time (the crate never
//! closes its listener's wake-up pipe).

use std::collections::BTreeSet;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, IntoRawFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use prost::Message;
use ttrpc::security_extension::{AcceptHook, HookError, HookOutput};

use crate::api::{RegisterPluginRequest, RUNTIME_SERVICE};
use crate::error::Error;
use crate::mux::{Closed, Mux, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use crate::service::Service;
use crate::version::NRI_VERSION;

/// How long the plugin waits for the runtime to answer its registration.
pub const REGISTER_TIMEOUT: Duration = Duration::from_secs(5);

/// How many names a [`LocalServer`] tries before giving up (another process may hold one).
const BIND_TRIES: u32 = 16;

/// A ttrpc server on a private listener, reached by connecting local streams to it.
pub struct LocalServer {
    server: Option<ttrpc::Server>,
    // Closed after the server is shut down: ttrpc never closes a listener fd it was given.
    listener: Option<UnixListener>,
    /// The listener's abstract name.
    name: Vec<u8>,
}

/// A fresh abstract name: `nri-plugin.<pid>.<count>.<nanoseconds>`.
fn fresh_name() -> Vec<u8> {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "nri-plugin.{}.{}.{nanos:x}",
        std::process::id(),
        COUNT.fetch_add(1, Ordering::Relaxed)
    )
    .into_bytes()
}

/// A listener on a fresh abstract name (one another process holds is skipped), and the name.
fn bind_private() -> Result<(UnixListener, Vec<u8>), Error> {
    let mut tries = 0;
    loop {
        let name = fresh_name();
        let addr = SocketAddr::from_abstract_name(&name).map_err(transport("private listener"))?;
        match UnixListener::bind_addr(&addr) {
            Ok(listener) => return Ok((listener, name)),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse && tries < BIND_TRIES => tries += 1,
            Err(e) => return Err(transport("private listener")(e)),
        }
    }
}

/// The pid and uid of the process at the other end of the connected unix socket `fd`
/// (`SO_PEERCRED`: the process that connected, as it was at `connect`).
fn peer(fd: BorrowedFd) -> io::Result<(i32, u32)> {
    let cred = nix::sys::socket::getsockopt(&fd, nix::sys::socket::sockopt::PeerCredentials)?;
    Ok((cred.pid(), cred.uid()))
}

/// The shortest time between two log lines about rejected connections.
pub const REJECTIONS_EVERY: Duration = Duration::from_secs(10);
/// The most distinct uids a line names (the rest are counted).
const UIDS_NAMED: usize = 8;

/// Connections to the private listener refused since the last line about them.
#[derive(Debug, Default)]
struct Rejections {
    count: u64,
    uids: BTreeSet<u32>,
    more_uids: bool,
    /// When the last line was written (none yet: the first rejection is told at once).
    logged: Option<Instant>,
}

impl Rejections {
    fn add(&mut self, uid: u32) {
        self.count += 1;
        if self.uids.len() < UIDS_NAMED || self.uids.contains(&uid) {
            self.uids.insert(uid);
        } else {
            self.more_uids = true;
        }
    }

    /// The line to log now, if one is due at `now`: something counted and the last line
    /// [`REJECTIONS_EVERY`] ago or more.
    fn due(&mut self, now: Instant) -> Option<String> {
        if self.count == 0 || self.logged.is_some_and(|t| now - t < REJECTIONS_EVERY) {
            return None;
        }
        let since = self.logged.map_or("".to_string(), |t| {
            format!(" in the last {} s", (now - t).as_secs())
        });
        let uids: Vec<String> = self.uids.iter().map(u32::to_string).collect();
        let s = if uids.len() == 1 { "" } else { "s" };
        let more = if self.more_uids { " and others" } else { "" };
        let n = self.count;
        let conns = if n == 1 { "connection" } else { "connections" };
        let line = format!(
            "nri: rejected {n} {conns} from uid{s} {}{more}{since} to the plugin's private listener (not this process; closed)",
            uids.join(", ")
        );
        *self = Rejections {
            logged: Some(now),
            ..Rejections::default()
        };
        Some(line)
    }
}

static REJECTED: Mutex<Rejections> = Mutex::new(Rejections {
    count: 0,
    uids: BTreeSet::new(),
    more_uids: false,
    logged: None,
});

/// Logs the connections to the private listener refused since the last such line, if any and
/// if that line is [`REJECTIONS_EVERY`] old (the stub calls it every second; each rejection
/// calls it too).
pub fn report_rejections() {
    let line = REJECTED.lock().ok().and_then(|mut r| r.due(Instant::now()));
    if let Some(line) = line {
        log::warn!("{line}");
    }
}

/// Whether `record` is the `ttrpc` crate's own warning for a connection the private listener
/// refused (`accept hook failed: Rejected(..)`): this crate counts those and reports them
/// summed ([`report_rejections`]), so a logger drops this one, and a flood of foreign
/// connections writes a line per [`REJECTIONS_EVERY`], not one per connection.
pub fn is_rejection_echo(record: &log::Record<'_>) -> bool {
    record.target().starts_with("ttrpc")
        && record.level() == log::Level::Warn
        && record
            .args()
            .to_string()
            .starts_with("accept hook failed: Rejected(")
}

/// Serves only connections this process made: an abstract socket has no file permissions, so
/// any other process of the network namespace could connect, and is closed at once.
#[derive(Debug)]
struct OwnProcessOnly;

impl AcceptHook for OwnProcessOnly {
    fn on_accept(&self, fd: RawFd) -> Result<HookOutput, HookError> {
        // SAFETY: ttrpc passes the descriptor of the connection it just accepted, which stays
        // open for the whole of this call.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let (pid, uid) = peer(fd).map_err(HookError::Io)?;
        if pid != std::process::id() as i32 {
            if let Ok(mut r) = REJECTED.lock() {
                r.add(uid);
            }
            report_rejections();
            return Err(HookError::Rejected(format!("peer pid {pid}")));
        }
        Ok(HookOutput {
            data: Default::default(),
            payload_transform: None,
        })
    }
}

impl LocalServer {
    /// Starts a server with `methods` on a private listener (an abstract socket that serves
    /// this process only).
    pub fn start(
        methods: std::collections::HashMap<String, Box<dyn ttrpc::MethodHandler + Send + Sync>>,
    ) -> Result<LocalServer, Error> {
        let (listener, name) = bind_private()?;
        let fd = listener.as_raw_fd();
        let mut s = LocalServer {
            server: None,
            listener: Some(listener),
            name,
        };
        let mut server = ttrpc::Server::new()
            .add_listener(fd)
            .map_err(|source| Error::Ttrpc {
                what: "server listener",
                source,
            })?
            .set_accept_hook(OwnProcessOnly)
            .register_service(methods);
        server.start().map_err(|source| Error::Ttrpc {
            what: "server start",
            source,
        })?;
        s.server = Some(server);
        Ok(s)
    }

    /// A new connection to the server.
    pub fn connect(&self) -> Result<UnixStream, Error> {
        SocketAddr::from_abstract_name(&self.name)
            .and_then(|addr| UnixStream::connect_addr(&addr))
            .map_err(transport("private connection"))
    }
}

/// The longest a [`LocalServer`] waits for the ttrpc server to shut down when dropped.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(1);

impl Drop for LocalServer {
    /// Shuts the server down and then closes its listener, on a thread of their own waited
    /// for at most [`SHUTDOWN_WAIT`]: the ttrpc crate's sync server can wait forever for the
    /// handler threads of a connection that closed while it was being set up (a runtime that
    /// hangs up at once: the test of that hung 3 times in 67 runs). Past the wait both are left
    /// to the thread, so dropping never hangs and the listener fd is never closed under it.
    fn drop(&mut self) {
        let Some(server) = self.server.take() else {
            return;
        };
        let listener = self.listener.take();
        let (done, finished) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("nri-server-shutdown".into())
            .spawn(move || {
                server.shutdown();
                drop(listener);
                let _ = done.send(());
            });
        match spawned {
            Ok(_) => {
                if finished.recv_timeout(SHUTDOWN_WAIT).is_err() {
                    log::debug!("nri: the ttrpc server did not shut down within {SHUTDOWN_WAIT:?}; left to end with the process");
                }
            }
            Err(e) => log::debug!("nri: cannot shut the ttrpc server down: {e}"),
        }
    }
}

/// The plugin's `Plugin` service on a [`LocalServer`], for every session of the plugin's life.
pub struct PluginServer {
    service: Arc<Service>,
    server: LocalServer,
}

impl PluginServer {
    /// Starts serving `service`.
    pub fn start(service: Arc<Service>) -> Result<PluginServer, Error> {
        let server = LocalServer::start(service.methods())?;
        Ok(PluginServer { service, server })
    }
}

/// One live connection to the runtime: the mux between its socket and the plugin's server
/// and client.
pub struct Link {
    _mux: Mux,
}

impl Link {
    /// Serves `server` on `trunk` and registers as `name` with index `index`; `on_close` is
    /// called once when the trunk closes (the runtime went away, or [`Link::close`]).
    pub fn open(
        trunk: UnixStream,
        server: &PluginServer,
        name: &str,
        index: &str,
        on_close: impl FnOnce(Closed) + Send + 'static,
    ) -> Result<Link, Error> {
        server.service.new_session();
        let plugin_side = server.server.connect()?;
        let (client_side, runtime_side) = UnixStream::pair().map_err(transport("socket pair"))?;
        let mux = Mux::start(
            trunk,
            vec![
                (PLUGIN_SERVICE_CONN, plugin_side),
                (RUNTIME_SERVICE_CONN, runtime_side),
            ],
            on_close,
        )
        .map_err(transport("mux threads"))?;
        let link = Link { _mux: mux };
        // The client owns its fd from here on; it is dropped (and its polling thread ends)
        // once registered: the plugin has nothing else to ask the runtime.
        let client =
            ttrpc::Client::new(client_side.into_raw_fd()).map_err(|source| Error::Ttrpc {
                what: "client",
                source,
            })?;
        register(&client, name, index)?;
        Ok(link)
    }

    /// Closes the connection, waiting for the mux's threads.
    pub fn close(self) {
        drop(self);
    }
}

/// `Runtime.RegisterPlugin` with `name`, `index` and the NRI version this crate speaks (which
/// runtimes before NRI v0.12 skip).
fn register(client: &ttrpc::Client, name: &str, index: &str) -> Result<(), Error> {
    let payload = RegisterPluginRequest {
        plugin_name: name.to_string(),
        plugin_idx: index.to_string(),
        nri_version: NRI_VERSION.to_string(),
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
        .map_err(|source| Error::Register {
            name: format!("{index}-{name}"),
            source,
        })
}

fn transport(what: &'static str) -> impl Fn(io::Error) -> Error {
    move |source| Error::Transport { what, source }
}

#[cfg(test)]
mod tests {
    //! The plugin's transport against a fake runtime: the fake runtime runs its own mux on the
    //! other end of a socket-pair trunk, serves `Runtime.RegisterPlugin` on connection 2 and
    //! calls the plugin's service on connection 1, all with the ttrpc crate.
    use super::*;
    use crate::api::{
        ConfigureRequest, ConfigureResponse, Container, ContainerAdjustment,
        CreateContainerRequest, CreateContainerResponse, PodSandbox,
    };
    use crate::plugin::{Plugin, PluginResult};
    use crate::runtime::Session;
    use std::sync::mpsc;
    use std::time::Instant;

    /// Sleeps in CreateContainer for containers named "slow"; sets `NAME` to the name.
    struct Slow;

    impl Plugin for Slow {
        fn create_container(
            &self,
            _: &PodSandbox,
            c: &Container,
        ) -> PluginResult<CreateContainerResponse> {
            if c.name == "slow" {
                std::thread::sleep(Duration::from_millis(1500));
            }
            let mut a = ContainerAdjustment::default();
            a.add_env("NAME", c.name.as_str());
            Ok(a.into())
        }
    }

    fn plugin_server() -> PluginServer {
        PluginServer::start(Arc::new(Service::new(Arc::new(Slow), "10-demo".into()))).unwrap()
    }

    fn call<M: Message + Default>(
        runtime: &Session,
        method: &str,
        payload: Vec<u8>,
    ) -> Result<M, ttrpc::Error> {
        let bytes = runtime.call_raw(method, payload)?;
        Ok(M::decode(bytes.as_slice()).expect("decode reply"))
    }

    fn create(name: &str) -> Vec<u8> {
        CreateContainerRequest {
            pod: Some(PodSandbox::default()),
            container: Some(Container {
                id: format!("id-{name}"),
                name: name.into(),
                ..Default::default()
            }),
        }
        .encode_to_vec()
    }

    #[test]
    fn registers_serves_and_a_slow_request_does_not_hold_up_the_others() {
        let (plugin_trunk, runtime_trunk) = UnixStream::pair().unwrap();

        // the runtime's end: a server for connection 2, a client for connection 1
        let runtime = Arc::new(Session::over(runtime_trunk).unwrap());

        // the plugin
        let server = plugin_server();
        let (plugin_closed_tx, plugin_closed_rx) = mpsc::channel();
        let link = Link::open(plugin_trunk, &server, "demo", "10", move |_| {
            let _ = plugin_closed_tx.send(());
        })
        .expect("register");
        let reg = runtime.registered(Duration::from_secs(5)).unwrap();
        assert_eq!(
            (
                reg.plugin_name.as_str(),
                reg.plugin_idx.as_str(),
                reg.nri_version.as_str()
            ),
            ("demo", "10", NRI_VERSION)
        );

        let rpl: ConfigureResponse = call(
            &runtime,
            "Configure",
            ConfigureRequest::default().encode_to_vec(),
        )
        .unwrap();
        assert_eq!(
            rpl.events,
            1 << 3,
            "CreateContainer, the default subscription"
        );

        // a slow CreateContainer and, while it runs, a fast one that must not wait for it
        let slow_runtime = Arc::clone(&runtime);
        let start = Instant::now();
        let slow = std::thread::spawn(move || {
            let r: CreateContainerResponse =
                call(&slow_runtime, "CreateContainer", create("slow")).unwrap();
            (r, start.elapsed())
        });
        std::thread::sleep(Duration::from_millis(200));
        let fast: CreateContainerResponse =
            call(&runtime, "CreateContainer", create("fast")).unwrap();
        let fast_took = start.elapsed();
        let (slow, slow_took) = slow.join().unwrap();
        assert_eq!(fast.adjust.unwrap().env[0].value, "fast");
        assert_eq!(slow.adjust.unwrap().env[0].value, "slow");
        assert!(
            fast_took < Duration::from_millis(1200) && slow_took >= Duration::from_millis(1500),
            "fast answered after {fast_took:?}, slow after {slow_took:?}"
        );

        // an unknown method is answered with an error, and the connection goes on
        assert!(call::<ConfigureResponse>(&runtime, "Bogus", Vec::new()).is_err());
        let _: ConfigureResponse = call(
            &runtime,
            "Configure",
            ConfigureRequest::default().encode_to_vec(),
        )
        .unwrap();

        // the runtime goes away: the plugin's side sees the trunk close
        Arc::into_inner(runtime)
            .expect("the slow call is done")
            .close();
        plugin_closed_rx
            .recv_timeout(Duration::from_secs(5))
            .unwrap();
        link.close();
    }

    #[test]
    fn rejections_are_told_at_once_then_summed_at_most_once_per_interval() {
        let t0 = Instant::now();
        let mut r = Rejections::default();
        assert_eq!(r.due(t0), None, "nothing to tell");
        r.add(65534);
        let first = r.due(t0).unwrap();
        assert!(
            first.starts_with(
                "nri: rejected 1 connection from uid 65534 to the plugin's private listener"
            ),
            "{first}"
        );
        for i in 0..100_000u32 {
            r.add(1000 + i % 20);
            assert!(r.uids.len() <= UIDS_NAMED);
        }
        assert_eq!(
            r.due(t0 + REJECTIONS_EVERY - Duration::from_millis(1)),
            None
        );
        let next = r.due(t0 + REJECTIONS_EVERY).unwrap();
        assert!(
            next.starts_with("nri: rejected 100000 connections from uids 1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007 and others in the last 10 s "),
            "{next}"
        );
        assert_eq!(r.due(t0 + 3 * REJECTIONS_EVERY), None, "nothing since");
    }

    #[test]
    fn ttrpc_s_own_warning_for_a_rejection_is_the_echo_a_logger_drops() {
        let is_echo = |target: &str, level: log::Level, args: std::fmt::Arguments<'_>| {
            is_rejection_echo(
                &log::Record::builder()
                    .target(target)
                    .level(level)
                    .args(args)
                    .build(),
            )
        };
        let warn = log::Level::Warn;
        let e = HookError::Rejected("peer pid 7".into());
        let target = "ttrpc::sync::server";
        assert!(is_echo(
            target,
            warn,
            format_args!("accept hook failed: {e:?}")
        ));
        assert!(!is_echo(
            target,
            warn,
            format_args!("listener accept got {e:?}")
        ));
        assert!(!is_echo(
            target,
            log::Level::Error,
            format_args!("accept hook failed: {e:?}")
        ));
        assert!(!is_echo(
            "nri_plugin",
            warn,
            format_args!("accept hook failed: {e:?}")
        ));
    }

    #[test]
    fn a_runtime_that_hangs_up_fails_the_registration_at_once() {
        let (plugin_trunk, runtime_trunk) = UnixStream::pair().unwrap();
        let server = plugin_server();
        // the peer closes at once: registration fails instead of hanging
        drop(runtime_trunk);
        let start = Instant::now();
        let err = Link::open(plugin_trunk, &server, "demo", "10", |_| {})
            .err()
            .expect("no runtime, no registration");
        assert!(matches!(err, Error::Register { .. }), "{err:?}");
        assert!(start.elapsed() < REGISTER_TIMEOUT + Duration::from_secs(1));
    }
}
