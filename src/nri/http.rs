//! The metrics listener (`metrics.address` in the config): `GET /metrics` (OpenMetrics text),
//! `/readyz` and `/healthz` (200 or 503 with the verdict's line), on one thread with
//! `tiny_http`. Where the address is taken (the pod a rollout replaces still holds it on the
//! node's network), it binds again every second until it gets it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tiny_http::{Header, Method, Request, Response, Server};

use super::metrics::CONTENT_TYPE;
use super::planner::PlanHandler;

/// How long the listener waits before binding again an address in use.
const REBIND: Duration = Duration::from_secs(1);

/// Serves `handler`'s metrics and probes at `address` on a thread of its own, for the
/// process's life.
pub fn serve(address: SocketAddr, handler: Arc<PlanHandler>) {
    let spawned = std::thread::Builder::new()
        .name("cpuplan-metrics".into())
        .spawn(move || {
            let server = bind(address);
            log::info!("nri: serving /metrics, /readyz and /healthz at http://{address}");
            for request in server.incoming_requests() {
                answer(request, &handler);
            }
        });
    if let Err(e) = spawned {
        log::warn!("nri: cannot start the metrics listener: {e}");
    }
}

/// The server at `address`, binding again until it is free.
fn bind(address: SocketAddr) -> Server {
    let mut logged = false;
    loop {
        match Server::http(address) {
            Ok(s) => return s,
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

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("a valid header")
}

fn answer(request: Request, handler: &PlanHandler) {
    let path = request.url().split('?').next().unwrap_or_default();
    let (status, content_type, body) = match (request.method(), path) {
        (Method::Get | Method::Head, "/metrics") => (200, CONTENT_TYPE, handler.metrics_text()),
        (Method::Get | Method::Head, "/readyz") => {
            let v = handler.health().verdict();
            let code = if v.ready { 200 } else { 503 };
            (code, "text/plain; charset=utf-8", format!("{}\n", v.why))
        }
        (Method::Get | Method::Head, "/healthz") => {
            let v = handler.health().verdict();
            let code = if v.live { 200 } else { 503 };
            (code, "text/plain; charset=utf-8", format!("{}\n", v.why))
        }
        (Method::Get | Method::Head, _) => (
            404,
            "text/plain; charset=utf-8",
            "not found: /metrics, /readyz, /healthz\n".to_string(),
        ),
        _ => (
            405,
            "text/plain; charset=utf-8",
            "only GET and HEAD\n".to_string(),
        ),
    };
    let response = Response::from_string(body)
        .with_status_code(status)
        .with_header(header("Content-Type", content_type));
    if let Err(e) = request.respond(response) {
        log::debug!("nri: metrics: cannot answer a request: {e}");
    }
}
