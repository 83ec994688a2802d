//! The plugin's life: reach the runtime (its socket, or the socket it handed over when it
//! launched the plugin), register, serve until the connection closes, and then reconnect with
//! backoff (external plugins) or exit (launched ones, as NRI's own stub does). [`run`] stops on
//! SIGTERM or SIGINT; [`spawn`] runs the same loop on a thread until [`Running::stop`].

use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, Signal};
use nix::sys::stat::{fstat, SFlag};

use crate::error::{chain, Error};
use crate::mux::Closed;
use crate::options::{Endpoint, Options};
use crate::plugin::{Lifecycle, Plugin};
use crate::service::Service;
use crate::transport::{Link, PluginServer};

/// The first wait before reconnecting; it doubles up to [`BACKOFF_MAX`].
pub const BACKOFF_MIN: Duration = Duration::from_millis(200);
/// The longest wait between reconnection attempts.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// A connection that lasted this long resets the backoff.
const STABLE: Duration = Duration::from_secs(10);
/// How often the main loop tells the plugin it runs ([`Lifecycle::Heartbeat`]) while it waits.
pub const HEARTBEAT: Duration = Duration::from_secs(1);

/// What the plugin's main loop waits for.
enum Wake {
    /// A signal, or [`Running::stop`], asked the plugin to stop.
    Stop(&'static str),
    /// Connection number `n` closed.
    Closed(u64, Closed),
}

/// Runs `plugin` as `opts` say until SIGTERM/SIGINT, or until a runtime that launched it
/// closes its socket. Blocks SIGTERM and SIGINT in the calling thread (and the threads it
/// starts) and takes them with a signal thread: call it before starting other threads.
pub fn run(opts: &Options, plugin: Arc<dyn Plugin>) -> Result<(), Error> {
    let (tx, rx) = mpsc::channel::<Wake>();
    catch_signals(tx.clone())?;
    serve(opts, plugin, tx, rx)
}

/// A plugin served on a thread of its own, by [`spawn`].
pub struct Running {
    tx: mpsc::Sender<Wake>,
    thread: JoinHandle<Result<(), Error>>,
}

impl Running {
    /// Stops the plugin (its connection closes) and waits for its thread.
    pub fn stop(self) -> Result<(), Error> {
        let _ = self.tx.send(Wake::Stop("stop"));
        self.thread.join().unwrap_or_else(|_| {
            Err(Error::Transport {
                what: "plugin thread",
                source: std::io::Error::other("it panicked"),
            })
        })
    }
}

/// Serves `plugin` as `opts` say on a new thread (no signal handling), until
/// [`Running::stop`] or, for a launched plugin, until the runtime closes its socket.
pub fn spawn(opts: Options, plugin: Arc<dyn Plugin>) -> Result<Running, Error> {
    let (tx, rx) = mpsc::channel::<Wake>();
    let loop_tx = tx.clone();
    let thread = std::thread::Builder::new()
        .name("nri-plugin".into())
        .spawn(move || serve(&opts, plugin, loop_tx, rx))
        .map_err(|source| Error::Transport {
            what: "plugin thread",
            source,
        })?;
    Ok(Running { tx, thread })
}

/// The main loop: connect, register, wait for the connection to close, reconnect.
fn serve(
    opts: &Options,
    plugin: Arc<dyn Plugin>,
    tx: mpsc::Sender<Wake>,
    rx: mpsc::Receiver<Wake>,
) -> Result<(), Error> {
    let name = opts.full_name();
    if plugin.events().is_empty() {
        return Err(Error::NoEvents(name));
    }
    let mut preconnected = match opts.endpoint {
        Endpoint::PreConnected(fd) => Some(take_fd(fd)?),
        Endpoint::Socket(_) => None,
    };
    let launched = preconnected.is_some();
    let server = PluginServer::start(Arc::new(Service::new(plugin.clone(), name.clone())))?;
    let mut backoff = BACKOFF_MIN;
    let mut n: u64 = 0;
    loop {
        n += 1;
        let trunk = match (&opts.endpoint, preconnected.take()) {
            (_, Some(s)) => Ok(s),
            (Endpoint::PreConnected(_), None) => return Ok(()),
            (Endpoint::Socket(path), None) => connect(path),
        };
        let started = Instant::now();
        let link = trunk.and_then(|trunk| {
            let tx = tx.clone();
            Link::open(trunk, &server, &opts.name, &opts.index, move |why| {
                let _ = tx.send(Wake::Closed(n, why));
            })
        });
        match link {
            Ok(link) => {
                log::info!("nri: registered as {name}");
                plugin.lifecycle(Lifecycle::Registered);
                let why = wait_closed(&rx, n, &*plugin);
                plugin.lifecycle(Lifecycle::Closed);
                link.close();
                match why {
                    Some(what) => return stopped(what),
                    None if launched => {
                        log::info!("nri: the runtime closed the connection; exiting");
                        return Ok(());
                    }
                    None => {}
                }
                if started.elapsed() >= STABLE {
                    backoff = BACKOFF_MIN;
                }
            }
            Err(e) if launched => return Err(e),
            Err(e) => log::warn!("nri: {}", chain(&e)),
        }
        log::info!("nri: reconnecting in {} ms", backoff.as_millis());
        let deadline = Instant::now() + backoff;
        loop {
            plugin.lifecycle(Lifecycle::Heartbeat);
            crate::transport::report_rejections();
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left.min(HEARTBEAT)) {
                Ok(Wake::Stop(what)) => return stopped(what),
                // a late close of a connection already given up
                Ok(Wake::Closed(..)) if !left.is_zero() => {}
                Ok(Wake::Closed(..)) => break,
                Err(RecvTimeoutError::Timeout) if left > HEARTBEAT => {}
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            }
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// Waits until connection `n` closes (`None`) or the plugin is asked to stop (`Some`), telling
/// `plugin` every [`HEARTBEAT`] that the loop runs.
fn wait_closed(rx: &mpsc::Receiver<Wake>, n: u64, plugin: &dyn Plugin) -> Option<&'static str> {
    loop {
        plugin.lifecycle(Lifecycle::Heartbeat);
        crate::transport::report_rejections();
        match rx.recv_timeout(HEARTBEAT) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(Wake::Stop(what)) => return Some(what),
            Ok(Wake::Closed(m, why)) if m == n => {
                match why {
                    Closed::Eof => log::info!("nri: the runtime closed the connection"),
                    Closed::Error(e) => log::warn!("nri: connection to the runtime failed: {e}"),
                }
                return None;
            }
            Ok(Wake::Closed(..)) => {}
            Err(RecvTimeoutError::Disconnected) => return None,
        }
    }
}

fn stopped(what: &str) -> Result<(), Error> {
    log::info!("nri: stopping on {what}");
    Ok(())
}

fn connect(path: &Path) -> Result<UnixStream, Error> {
    UnixStream::connect(path).map_err(|source| Error::Connect {
        path: path.to_path_buf(),
        source,
    })
}

/// Takes ownership of the runtime's pre-connected socket `fd`, after checking it is a socket.
fn take_fd(fd: i32) -> Result<UnixStream, Error> {
    let bad = |why: String| Error::PreConnected {
        value: fd.to_string(),
        why,
    };
    if fd < 3 {
        return Err(bad("not above stderr".into()));
    }
    let st = fstat(fd).map_err(|e| bad(format!("not an open file: {e}")))?;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFSOCK {
        return Err(bad("not a socket".into()));
    }
    // SAFETY: the runtime passed this fd to us for this purpose; it is open and a socket (just
    // checked), and nothing else in this process uses it.
    Ok(unsafe { UnixStream::from_raw_fd(fd) })
}

/// The signals that stop a plugin [`run`] serves.
fn stop_signals() -> SigSet {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    set
}

/// Runs `start` with the signals that stop the plugin (SIGTERM, SIGINT) blocked in this thread,
/// so that the threads it starts never take them: [`run`]'s signal thread does once it runs,
/// and until then a signal stops the process as by default. For a plugin that starts threads of
/// its own (a metrics listener, a health writer) before it calls [`run`].
pub fn without_stop_signals<T>(start: impl FnOnce() -> T) -> T {
    let mut old = SigSet::empty();
    let blocked = nix::sys::signal::pthread_sigmask(
        nix::sys::signal::SigmaskHow::SIG_BLOCK,
        Some(&stop_signals()),
        Some(&mut old),
    );
    let out = start();
    if blocked.is_ok() {
        let _ = nix::sys::signal::pthread_sigmask(
            nix::sys::signal::SigmaskHow::SIG_SETMASK,
            Some(&old),
            None,
        );
    }
    out
}

/// Blocks SIGTERM and SIGINT in this thread (so in the threads it starts) and sends the first
/// one that arrives to `tx` from a dedicated thread.
fn catch_signals(tx: mpsc::Sender<Wake>) -> Result<(), Error> {
    let set = stop_signals();
    set.thread_block().map_err(Error::Signals)?;
    std::thread::Builder::new()
        .name("nri-signals".into())
        .spawn(move || loop {
            if let Ok(sig) = set.wait() {
                let _ = tx.send(Wake::Stop(sig.as_str()));
                return;
            }
        })
        .map_err(|source| Error::Transport {
            what: "signal thread",
            source,
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Container, CreateContainerResponse, PodSandbox};
    use crate::events::EventMask;
    use crate::plugin::PluginResult;

    /// A plugin that subscribes to `events`, answers every create with no adjustment and
    /// records the stub's lifecycle events.
    struct Answers(EventMask, std::sync::Mutex<Vec<Lifecycle>>);

    impl Answers {
        fn to(events: EventMask) -> Arc<Answers> {
            Arc::new(Answers(events, Default::default()))
        }
    }

    impl Plugin for Answers {
        fn events(&self) -> EventMask {
            self.0
        }
        fn create_container(
            &self,
            _: &PodSandbox,
            _: &Container,
        ) -> PluginResult<CreateContainerResponse> {
            Ok(CreateContainerResponse::default())
        }
        fn lifecycle(&self, event: Lifecycle) {
            self.1.lock().unwrap().push(event);
        }
    }

    #[test]
    fn a_plugin_subscribing_to_nothing_is_refused_before_it_connects() {
        let opts = Options::new("silent", "10").unwrap();
        let err = spawn(opts, Answers::to(EventMask::NONE))
            .unwrap()
            .stop()
            .unwrap_err();
        assert!(
            matches!(err, Error::NoEvents(ref n) if n == "10-silent"),
            "{err}"
        );
    }

    #[test]
    fn a_spawned_plugin_retries_a_missing_socket_and_stops_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options::new("demo", "10")
            .unwrap()
            .with_socket(dir.path().join("none.sock"));
        let creates = EventMask::of(&[crate::api::Event::CreateContainer]);
        let running = spawn(opts, Answers::to(creates)).unwrap();
        std::thread::sleep(BACKOFF_MIN * 2);
        let started = Instant::now();
        running.stop().unwrap();
        assert!(
            started.elapsed() < BACKOFF_MAX,
            "stopped during the backoff"
        );
    }

    #[test]
    fn threads_started_without_stop_signals_block_them_and_the_caller_gets_its_mask_back() {
        fn term_blocked() -> bool {
            SigSet::thread_get_mask().unwrap().contains(Signal::SIGTERM)
        }
        // A fresh thread, so that the test harness's own mask does not matter.
        std::thread::spawn(|| {
            assert!(!term_blocked());
            let inner = without_stop_signals(|| std::thread::spawn(term_blocked).join().unwrap());
            assert!(inner, "a thread started inside blocks SIGTERM");
            assert!(!term_blocked(), "the caller's mask is restored");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_plugin_retrying_a_missing_socket_hears_heartbeats_and_no_registration() {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options::new("demo", "10")
            .unwrap()
            .with_socket(dir.path().join("none.sock"));
        let heard = Answers::to(EventMask::of(&[crate::api::Event::CreateContainer]));
        let running = spawn(opts, heard.clone()).unwrap();
        std::thread::sleep(HEARTBEAT * 2 + BACKOFF_MIN);
        running.stop().unwrap();
        let events = heard.1.lock().unwrap().clone();
        let beats = events
            .iter()
            .filter(|e| **e == Lifecycle::Heartbeat)
            .count();
        assert!(beats >= 2, "{events:?}");
        assert!(!events.contains(&Lifecycle::Registered), "{events:?}");
    }

    #[test]
    fn a_pre_connected_fd_must_be_a_socket() {
        assert!(matches!(take_fd(1), Err(Error::PreConnected { .. })));
        let f = tempfile::tempfile().unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
        let e = take_fd(fd).unwrap_err();
        assert!(e.to_string().contains("not a socket"), "{e}");
    }
}
