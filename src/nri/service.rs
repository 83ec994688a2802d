//! NRI's `Plugin` service served over ttrpc: decodes each request with prost, hands it to the
//! [`Handler`], and encodes the reply. The ttrpc server runs each request on a worker thread,
//! so a slow handler holds up only its own request, never the connection's reader.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use prost::Message;
use ttrpc::{Code, MethodHandler, Request, Response, TtrpcContext};

use super::events::EventMask;
use super::handler::Handler;
use super::proto::{
    ConfigureRequest, ConfigureResponse, Container, CreateContainerRequest,
    CreateContainerResponse, Empty, Event, PodSandbox, StateChangeEvent, StopContainerRequest,
    StopContainerResponse, SynchronizeRequest, SynchronizeResponse, UpdateContainerRequest,
    UpdateContainerResponse, PLUGIN_SERVICE,
};

/// The methods of NRI's `Plugin` service this plugin serves.
pub const METHODS: [&str; 7] = [
    "Configure",
    "Synchronize",
    "Shutdown",
    "CreateContainer",
    "UpdateContainer",
    "StopContainer",
    "StateChange",
];

/// A failed request: the ttrpc status code and message the runtime gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The status code.
    pub code: Code,
    /// The message.
    pub message: String,
}

impl Failure {
    fn bad_request(method: &str, e: prost::DecodeError) -> Failure {
        Failure {
            code: Code::INVALID_ARGUMENT,
            message: format!("cannot decode {method} request: {e}"),
        }
    }

    fn handler(message: String) -> Failure {
        Failure {
            code: Code::UNKNOWN,
            message,
        }
    }
}

/// The `Plugin` service of one session with the runtime.
pub struct PluginService {
    handler: Arc<dyn Handler>,
    events: EventMask,
    name: String,
    sync: Mutex<Option<SynchronizeRequest>>,
}

impl PluginService {
    /// A service answering for plugin `name` (`INDEX-NAME`, for logs), subscribing to `events`
    /// and handing requests to `handler`.
    pub fn new(handler: Arc<dyn Handler>, events: EventMask, name: String) -> PluginService {
        PluginService {
            handler,
            events,
            name,
            sync: Mutex::new(None),
        }
    }

    /// Starts a new session with the runtime: forgets a split Synchronize left unfinished.
    pub fn new_session(&self) {
        if let Ok(mut pending) = self.sync.lock() {
            *pending = None;
        }
    }

    /// Answers one request for `method` with the encoded reply, or the failure to report.
    pub fn call(&self, method: &str, payload: &[u8]) -> Result<Vec<u8>, Failure> {
        match method {
            "Configure" => {
                let req = decode::<ConfigureRequest>(method, payload)?;
                Ok(self.configure(&req)?.encode_to_vec())
            }
            "Synchronize" => {
                let req = decode::<SynchronizeRequest>(method, payload)?;
                Ok(self.synchronize(req)?.encode_to_vec())
            }
            "Shutdown" => {
                decode::<Empty>(method, payload)?;
                log::info!("nri: the runtime is shutting down");
                self.handler.shutdown();
                Ok(Empty {}.encode_to_vec())
            }
            "CreateContainer" => {
                let started = Instant::now();
                let req = decode::<CreateContainerRequest>(method, payload)?;
                Ok(self.create_container(&req, started)?.encode_to_vec())
            }
            "UpdateContainer" => {
                decode::<UpdateContainerRequest>(method, payload)?;
                Ok(UpdateContainerResponse::default().encode_to_vec())
            }
            "StopContainer" => {
                let req = decode::<StopContainerRequest>(method, payload)?;
                let (pod, ctr) = parts(&req.pod, &req.container);
                let update = self.handler.stop_container(pod, ctr);
                Ok(StopContainerResponse { update }.encode_to_vec())
            }
            "StateChange" => {
                let req = decode::<StateChangeEvent>(method, payload)?;
                self.state_change(&req);
                Ok(Empty {}.encode_to_vec())
            }
            other => Err(Failure {
                code: Code::UNIMPLEMENTED,
                message: format!("{PLUGIN_SERVICE}/{other} is not served"),
            }),
        }
    }

    fn configure(&self, req: &ConfigureRequest) -> Result<ConfigureResponse, Failure> {
        self.handler
            .configure(&req.config, &req.runtime_name, &req.runtime_version)
            .map_err(|e| {
                log::error!("nri: configuration refused: {e}");
                Failure::handler(e)
            })?;
        log::info!(
            "nri: {} configured by {} {}, subscribed to {}",
            self.name,
            req.runtime_name,
            req.runtime_version,
            self.events.names()
        );
        Ok(ConfigureResponse {
            events: self.events.0,
        })
    }

    /// Synchronize, split or whole: a request with `more` set is kept and answered with `more`
    /// (no updates); the last one hands everything gathered to the handler.
    fn synchronize(&self, req: SynchronizeRequest) -> Result<SynchronizeResponse, Failure> {
        let mut pending = self
            .sync
            .lock()
            .map_err(|_| Failure::handler("synchronize state poisoned".into()))?;
        let mut all = match pending.take() {
            Some(mut before) => {
                before.pods.extend(req.pods);
                before.containers.extend(req.containers);
                before.more = req.more;
                before
            }
            None => req,
        };
        if all.more {
            all.more = false;
            *pending = Some(all);
            return Ok(SynchronizeResponse {
                update: Vec::new(),
                more: true,
            });
        }
        drop(pending);
        let update = self
            .handler
            .synchronize(&all.pods, &all.containers)
            .map_err(|e| {
                log::error!("nri: synchronize failed: {e}");
                Failure::handler(e)
            })?;
        log::info!(
            "nri: synchronized with {} pods and {} containers ({} updates)",
            all.pods.len(),
            all.containers.len(),
            update.len()
        );
        Ok(SynchronizeResponse {
            update,
            more: false,
        })
    }

    /// CreateContainer, decoded at `started`: the handler's adjustment, logged with the time
    /// taken since then.
    fn create_container(
        &self,
        req: &CreateContainerRequest,
        started: Instant,
    ) -> Result<CreateContainerResponse, Failure> {
        let Some(ctr) = &req.container else {
            return Err(Failure {
                code: Code::INVALID_ARGUMENT,
                message: "CreateContainer without a container".into(),
            });
        };
        let default_pod = PodSandbox::default();
        let pod = req.pod.as_ref().unwrap_or(&default_pod);
        match self.handler.create_container(pod, ctr) {
            Ok(adjust) => {
                log::info!(
                    "nri: create {}/{} ({}): {} in {:.3} ms",
                    pod.name,
                    ctr.name,
                    short(&ctr.id),
                    if adjust.is_empty() {
                        "unchanged"
                    } else {
                        "adjusted"
                    },
                    started.elapsed().as_secs_f64() * 1e3
                );
                Ok(CreateContainerResponse {
                    adjust: (!adjust.is_empty()).then_some(adjust),
                    update: Vec::new(),
                    evict: Vec::new(),
                })
            }
            Err(e) => {
                log::warn!(
                    "nri: create {}/{} ({}) refused in {:.3} ms: {e}",
                    pod.name,
                    ctr.name,
                    short(&ctr.id),
                    started.elapsed().as_secs_f64() * 1e3
                );
                Err(Failure::handler(e))
            }
        }
    }

    fn state_change(&self, req: &StateChangeEvent) {
        let (pod, ctr) = parts(&req.pod, &req.container);
        match Event::try_from(req.event) {
            Ok(Event::RemoveContainer) => self.handler.remove_container(pod, ctr),
            Ok(e) => log::debug!("nri: ignored event {}", super::events::event_name(e)),
            Err(_) => log::debug!("nri: ignored unknown event {}", req.event),
        }
    }

    /// The ttrpc method table of this service, for `ttrpc::Server::register_service`.
    pub fn methods(self: &Arc<Self>) -> HashMap<String, Box<dyn MethodHandler + Send + Sync>> {
        METHODS
            .iter()
            .map(|m| {
                let h: Box<dyn MethodHandler + Send + Sync> = Box::new(Method {
                    name: m,
                    service: Arc::clone(self),
                });
                (format!("/{PLUGIN_SERVICE}/{m}"), h)
            })
            .collect()
    }
}

fn decode<M: Message + Default>(method: &str, payload: &[u8]) -> Result<M, Failure> {
    M::decode(payload).map_err(|e| Failure::bad_request(method, e))
}

fn parts<'a>(
    pod: &'a Option<PodSandbox>,
    ctr: &'a Option<Container>,
) -> (&'a PodSandbox, &'a Container) {
    static POD: std::sync::OnceLock<PodSandbox> = std::sync::OnceLock::new();
    static CTR: std::sync::OnceLock<Container> = std::sync::OnceLock::new();
    (
        pod.as_ref()
            .unwrap_or_else(|| POD.get_or_init(PodSandbox::default)),
        ctr.as_ref()
            .unwrap_or_else(|| CTR.get_or_init(Container::default)),
    )
}

fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// One method of the service, as the ttrpc server calls it.
struct Method {
    name: &'static str,
    service: Arc<PluginService>,
}

impl MethodHandler for Method {
    fn handler(&self, ctx: TtrpcContext, req: Request) -> ttrpc::Result<()> {
        let mut res = Response::new();
        match self.service.call(self.name, &req.payload) {
            Ok(payload) => res.payload = payload,
            Err(f) => res.set_status(ttrpc::get_status(f.code, f.message)),
        }
        ctx.respond(ctx.mh.stream_id, res)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nri::handler::{TestHandler, TEST_ENV, TEST_REJECTED_NAME};

    fn service() -> (Arc<TestHandler>, PluginService) {
        let h = Arc::new(TestHandler::default());
        let s = PluginService::new(h.clone(), EventMask::CPUPLAN, "10-cpuplan".into());
        (h, s)
    }

    fn container(id: &str, name: &str) -> Container {
        Container {
            id: id.into(),
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn configure_answers_the_event_mask() {
        let (h, s) = service();
        let req = ConfigureRequest {
            runtime_name: "containerd".into(),
            runtime_version: "1.7".into(),
            ..Default::default()
        };
        let out = s.call("Configure", &req.encode_to_vec()).unwrap();
        let rpl = ConfigureResponse::decode(out.as_slice()).unwrap();
        assert_eq!(rpl.events, EventMask::CPUPLAN.0);
        assert_eq!(h.calls(), ["configure containerd 1.7"]);
    }

    #[test]
    fn create_container_returns_the_handlers_adjustment() {
        let (_h, s) = service();
        let req = CreateContainerRequest {
            pod: Some(PodSandbox::default()),
            container: Some(container("c1", "srv")),
        };
        let out = s.call("CreateContainer", &req.encode_to_vec()).unwrap();
        let rpl = CreateContainerResponse::decode(out.as_slice()).unwrap();
        let adjust = rpl.adjust.unwrap();
        assert_eq!(adjust.env[0].key, TEST_ENV.0);
        assert_eq!(adjust.env[0].value, TEST_ENV.1);
    }

    #[test]
    fn handler_errors_and_bad_requests_become_statuses() {
        let (_h, s) = service();
        let req = CreateContainerRequest {
            pod: None,
            container: Some(container("c2", TEST_REJECTED_NAME)),
        };
        let f = s.call("CreateContainer", &req.encode_to_vec()).unwrap_err();
        assert_eq!(f.code, Code::UNKNOWN);
        assert!(f.message.contains(TEST_REJECTED_NAME), "{}", f.message);
        let f = s.call("CreateContainer", &[0xff, 0xff]).unwrap_err();
        assert_eq!(f.code, Code::INVALID_ARGUMENT);
        let f = s.call("CreateContainer", &[]).unwrap_err();
        assert_eq!(f.code, Code::INVALID_ARGUMENT, "no container");
        let f = s.call("Bogus", &[]).unwrap_err();
        assert_eq!(f.code, Code::UNIMPLEMENTED);
    }

    #[test]
    fn split_synchronize_is_gathered_before_the_handler_sees_it() {
        let (h, s) = service();
        let first = SynchronizeRequest {
            pods: vec![PodSandbox::default()],
            containers: vec![container("a", "a"), container("b", "b")],
            more: true,
        };
        let rpl = SynchronizeResponse::decode(
            s.call("Synchronize", &first.encode_to_vec())
                .unwrap()
                .as_slice(),
        )
        .unwrap();
        assert!(rpl.more && rpl.update.is_empty());
        assert!(h.calls().is_empty(), "the handler waits for the last part");
        let last = SynchronizeRequest {
            pods: vec![PodSandbox::default()],
            containers: vec![container("c", "c")],
            more: false,
        };
        let rpl = SynchronizeResponse::decode(
            s.call("Synchronize", &last.encode_to_vec())
                .unwrap()
                .as_slice(),
        )
        .unwrap();
        assert!(!rpl.more);
        assert_eq!(h.calls(), ["synchronize 2 3"]);
    }

    #[test]
    fn a_new_session_forgets_an_unfinished_split_synchronize() {
        let (h, s) = service();
        let part = SynchronizeRequest {
            pods: vec![PodSandbox::default()],
            containers: Vec::new(),
            more: true,
        };
        s.call("Synchronize", &part.encode_to_vec()).unwrap();
        s.new_session();
        let whole = SynchronizeRequest::default();
        s.call("Synchronize", &whole.encode_to_vec()).unwrap();
        assert_eq!(h.calls(), ["synchronize 0 0"]);
    }

    #[test]
    fn stop_and_remove_reach_the_handler() {
        let (h, s) = service();
        let stop = StopContainerRequest {
            pod: None,
            container: Some(container("c3", "x")),
        };
        s.call("StopContainer", &stop.encode_to_vec()).unwrap();
        let ev = StateChangeEvent {
            event: Event::RemoveContainer as i32,
            pod: None,
            container: Some(container("c3", "x")),
        };
        s.call("StateChange", &ev.encode_to_vec()).unwrap();
        let other = StateChangeEvent {
            event: Event::StartContainer as i32,
            ..Default::default()
        };
        s.call("StateChange", &other.encode_to_vec()).unwrap();
        s.call("UpdateContainer", &[]).unwrap();
        s.call("Shutdown", &[]).unwrap();
        assert_eq!(h.calls(), ["stop c3", "remove c3", "shutdown"]);
    }
}
