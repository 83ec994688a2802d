//! The metrics listener (`metrics.address` in the config, or `--metrics-address`): `GET
//! /metrics` (Prometheus text 0.0.4, or OpenMetrics text where the `Accept` header asks for
//! it), `/readyz` and `/healthz` (200 or 503 with the verdict's line). Where the address is
//! taken (the pod a rollout replaces still holds it on the node's network), it binds again
//! every second until it gets it.
//!
//! Bounded by construction, since any pod of the node may reach it: hyper's HTTP/1 server
//! connection on tokio's current-thread runtime, on the listener's one thread. A connection is
//! a task, never a thread, so the process's threads do not grow with connections; at most
//! [`MAX_CONNECTIONS`] are open, and one more sheds the oldest (never a queue); a request's
//! head must arrive within [`HEADER_TIMEOUT`] (also the idle limit between keep-alive
//! requests) and fit [`MAX_BUF`] bytes (431 otherwise); a write that makes no progress for
//! [`WRITE_TIMEOUT`] ends its connection (a client that pipelines without reading stalls only
//! itself, and not for long); a connection lives at most [`MAX_LIFETIME`]; a request with a
//! body is refused (413). Memory is about [`MAX_CONNECTIONS`] times a connection's buffers.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Body, Bytes, Incoming};
use hyper::header::{HeaderValue, ACCEPT, CONNECTION, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;
use tokio::time::Sleep;

use super::health::Verdict;
use super::metrics::{convert, Format};
use super::planner::PlanHandler;

/// How long the listener waits before binding again an address in use.
const REBIND: Duration = Duration::from_secs(1);
/// The most connections open at once; one more closes the oldest.
pub const MAX_CONNECTIONS: usize = 256;
/// How long a request's head may take to arrive, and a keep-alive connection may stay idle.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a write may make no progress (a client that does not read) before its connection
/// is closed.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest a connection lives, however busy.
pub const MAX_LIFETIME: Duration = Duration::from_secs(60);
/// A connection's read buffer, and so the largest request head (hyper's least is 8 KiB).
pub const MAX_BUF: usize = 16 << 10;
/// The most header fields a request may have.
const MAX_HEADERS: usize = 32;
/// How long the listener pauses after a failed accept (out of descriptors, say).
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// What the listener serves: the metrics in a format, and the probes' verdict.
pub(crate) trait Pages: Send + Sync + 'static {
    /// The metrics in `format`.
    fn metrics(&self, format: Format) -> String;
    /// Readiness and liveness now.
    fn verdict(&self) -> Verdict;
}

impl Pages for PlanHandler {
    fn metrics(&self, format: Format) -> String {
        convert(&self.metrics_text(), format)
    }

    fn verdict(&self) -> Verdict {
        self.health().verdict()
    }
}

/// Serves `handler`'s metrics and probes at `address` on a thread of its own, for the
/// process's life.
pub fn serve(address: SocketAddr, handler: Arc<PlanHandler>) {
    spawn(address, handler);
}

/// [`serve`] for any [`Pages`].
pub(crate) fn spawn(address: SocketAddr, pages: Arc<dyn Pages>) {
    let spawned = std::thread::Builder::new()
        .name("cpuplan-metrics".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .enable_time()
                .build()
            {
                Ok(r) => r,
                Err(e) => {
                    log::warn!("nri: metrics: cannot start the listener's runtime: {e}");
                    return;
                }
            };
            let listener = bind(address);
            let local = tokio::task::LocalSet::new();
            local.block_on(&runtime, async move {
                match TcpListener::from_std(listener) {
                    Ok(l) => {
                        log::info!(
                            "nri: serving /metrics, /readyz and /healthz at http://{}",
                            l.local_addr().unwrap_or(address)
                        );
                        accept_loop(l, pages).await
                    }
                    Err(e) => log::warn!("nri: metrics: cannot listen at {address}: {e}"),
                }
            });
        });
    if let Err(e) = spawned {
        log::warn!("nri: cannot start the metrics listener: {e}");
    }
}

/// A listener at `address`, binding again until it is free. `[::]` (what `:PORT` means) falls
/// back to `0.0.0.0` on a kernel without IPv6.
fn bind(address: SocketAddr) -> std::net::TcpListener {
    let mut logged = false;
    loop {
        let bound = std::net::TcpListener::bind(address).or_else(|e| {
            let v4 = SocketAddr::from(([0, 0, 0, 0], address.port()));
            match address {
                SocketAddr::V6(a) if a.ip().is_unspecified() && no_ipv6(&e) => {
                    std::net::TcpListener::bind(v4)
                }
                _ => Err(e),
            }
        });
        match bound.and_then(|l| l.set_nonblocking(true).map(|()| l)) {
            Ok(l) => return l,
            Err(e) => {
                if !logged {
                    log::warn!(
                        "nri: metrics: cannot listen at {address}: {e}; trying again every {} s",
                        REBIND.as_secs()
                    );
                    logged = true;
                }
                std::thread::sleep(REBIND);
            }
        }
    }
}

fn no_ipv6(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(nix::libc::EAFNOSUPPORT | nix::libc::EADDRNOTAVAIL)
    )
}

/// The open connections by age (oldest first), to shed the oldest when full.
type Open = Rc<RefCell<BTreeMap<u64, AbortHandle>>>;

/// Removes its connection from [`Open`] when the connection's task ends, however it ends.
struct Forget(Open, u64);

impl Drop for Forget {
    fn drop(&mut self) {
        // Already taken out where the task was shed (its table may be borrowed right then).
        if let Ok(mut open) = self.0.try_borrow_mut() {
            open.remove(&self.1);
        }
    }
}

async fn accept_loop(listener: TcpListener, pages: Arc<dyn Pages>) {
    let open: Open = Rc::default();
    let mut next: u64 = 0;
    let mut failed_logged = false;
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                if !failed_logged {
                    log::warn!("nri: metrics: cannot accept a connection: {e}");
                    failed_logged = true;
                }
                tokio::time::sleep(ACCEPT_PAUSE).await;
                continue;
            }
        };
        {
            let mut o = open.borrow_mut();
            while o.len() >= MAX_CONNECTIONS {
                if let Some((_, oldest)) = o.pop_first() {
                    oldest.abort();
                }
            }
        }
        let id = next;
        next += 1;
        let forget = Forget(Rc::clone(&open), id);
        let pages = Arc::clone(&pages);
        let task = tokio::task::spawn_local(async move {
            let _forget = forget;
            connection(stream, pages).await;
        });
        open.borrow_mut().insert(id, task.abort_handle());
    }
}

/// Serves one connection until it closes, fails or outlives [`MAX_LIFETIME`].
async fn connection(stream: TcpStream, pages: Arc<dyn Pages>) {
    let io = TokioIo::new(WriteDeadline {
        inner: stream,
        stall: None,
    });
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let answer = answer(&req, &*pages);
        async move { Ok::<_, Infallible>(answer) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(MAX_BUF)
        .max_headers(MAX_HEADERS)
        .serve_connection(io, service);
    match tokio::time::timeout(MAX_LIFETIME, conn).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => log::debug!("nri: metrics: a connection ended: {e}"),
        Err(_) => log::debug!("nri: metrics: a connection closed after {MAX_LIFETIME:?}"),
    }
}

const TEXT: &str = "text/plain; charset=utf-8";

fn answer(req: &Request<Incoming>, pages: &dyn Pages) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    let get = matches!(*req.method(), Method::GET | Method::HEAD);
    if !req.body().is_end_stream() {
        let mut r = reply(413, TEXT, "requests take no body\n".into());
        r.headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
        return r;
    }
    match (get, path) {
        (true, "/metrics") => {
            let accept = req.headers().get(ACCEPT).and_then(|v| v.to_str().ok());
            let format = Format::negotiate(accept);
            reply(200, format.content_type(), pages.metrics(format))
        }
        (true, "/readyz") => {
            let v = pages.verdict();
            reply(
                if v.ready { 200 } else { 503 },
                TEXT,
                format!("{}\n", v.why),
            )
        }
        (true, "/healthz") => {
            let v = pages.verdict();
            reply(if v.live { 200 } else { 503 }, TEXT, format!("{}\n", v.why))
        }
        (true, _) => reply(404, TEXT, "not found: /metrics, /readyz, /healthz\n".into()),
        (false, _) => reply(405, TEXT, "only GET and HEAD\n".into()),
    }
}

fn reply(status: u16, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// A connection whose writes fail once one has made no progress for [`WRITE_TIMEOUT`].
struct WriteDeadline {
    inner: TcpStream,
    stall: Option<Pin<Box<Sleep>>>,
}

impl WriteDeadline {
    /// `r` as it came, the stall forgotten, or, while pending, pending until the deadline.
    fn watch<T>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if r.is_ready() {
            self.stall = None;
            return r;
        }
        let stall = self
            .stall
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(WRITE_TIMEOUT)));
        match stall.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read nothing for the write timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for WriteDeadline {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for WriteDeadline {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.watch(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watch(cx, r)
    }
}
