//! The plugin's life: reach the runtime (its socket, or the socket it handed us when it launched
//! us), register, serve until the connection closes, and then reconnect with backoff (external
//! plugins) or exit (launched ones, as NRI's own stubs do). SIGTERM and SIGINT stop it cleanly.

use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, Signal};
use nix::sys::stat::{fstat, SFlag};

use super::error::NriError;
use super::events::EventMask;
use super::handler::Handler;
use super::mux::Closed;
use super::options::{Endpoint, NriOptions};
use super::service::PluginService;
use super::transport::{Link, PluginServer};

/// The first wait before reconnecting; it doubles up to [`BACKOFF_MAX`].
pub const BACKOFF_MIN: Duration = Duration::from_millis(200);
/// The longest wait between reconnection attempts.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// A connection that lasted this long resets the backoff.
const STABLE: Duration = Duration::from_secs(10);

/// What the plugin's main loop waits for.
enum Wake {
    /// A signal asked the plugin to stop.
    Signal(Signal),
    /// Connection number `n` closed.
    Closed(u64, Closed),
}

/// Runs the plugin with `handler` until SIGTERM/SIGINT, or until a runtime that launched it
/// closes its socket. Blocks SIGTERM and SIGINT in the calling thread (and the threads it
/// starts) and takes them with a signal thread; call it before starting other threads.
pub fn run_with(opts: &NriOptions, handler: Arc<dyn Handler>) -> Result<(), NriError> {
    let (tx, rx) = mpsc::channel::<Wake>();
    catch_signals(tx.clone())?;
    let name = opts.full_name();
    let mut preconnected = match opts.endpoint {
        Endpoint::PreConnected(fd) => Some(take_fd(fd)?),
        Endpoint::Socket(_) => None,
    };
    let launched = preconnected.is_some();
    let server = PluginServer::start(Arc::new(PluginService::new(
        handler,
        EventMask::CPUPLAN,
        name.clone(),
    )))?;
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
                let why = wait_closed(&rx, n);
                link.close();
                match why {
                    Some(sig) => return stopped(sig),
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
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(Wake::Signal(sig)) => return stopped(sig),
                // a late close of a connection already given up
                Ok(Wake::Closed(..)) if !left.is_zero() => {}
                Ok(Wake::Closed(..)) | Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            }
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// Waits until connection `n` closes (`None`) or a signal comes (`Some`).
fn wait_closed(rx: &mpsc::Receiver<Wake>, n: u64) -> Option<Signal> {
    loop {
        match rx.recv() {
            Ok(Wake::Signal(sig)) => return Some(sig),
            Ok(Wake::Closed(m, why)) if m == n => {
                match why {
                    Closed::Eof => log::info!("nri: the runtime closed the connection"),
                    Closed::Error(e) => log::warn!("nri: connection to the runtime failed: {e}"),
                }
                return None;
            }
            Ok(Wake::Closed(..)) => {}
            Err(_) => return None,
        }
    }
}

fn stopped(sig: Signal) -> Result<(), NriError> {
    log::info!("nri: stopping on {sig}");
    Ok(())
}

fn connect(path: &Path) -> Result<UnixStream, NriError> {
    UnixStream::connect(path).map_err(|source| NriError::Connect {
        path: path.to_path_buf(),
        source,
    })
}

/// Takes ownership of the runtime's pre-connected socket `fd`, after checking it is a socket.
fn take_fd(fd: i32) -> Result<UnixStream, NriError> {
    let bad = |why: String| NriError::PreConnected {
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

/// Blocks SIGTERM and SIGINT in this thread (so in the threads it starts) and sends the first
/// one that arrives to `tx` from a dedicated thread.
fn catch_signals(tx: mpsc::Sender<Wake>) -> Result<(), NriError> {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    set.thread_block().map_err(NriError::Signals)?;
    std::thread::Builder::new()
        .name("nri-signals".into())
        .spawn(move || loop {
            if let Ok(sig) = set.wait() {
                let _ = tx.send(Wake::Signal(sig));
                return;
            }
        })
        .map_err(|source| NriError::Transport {
            what: "signal thread",
            source,
        })?;
    Ok(())
}

/// An error with its causes, `a: b: c`.
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
