//! NRI's `Plugin` service, every method of it: decodes each request with prost, hands it to the
//! [`Plugin`], and encodes the reply. The ttrpc server runs each request on a worker thread, so
//! a slow plugin holds up only its own request, never the connection's reader.
//!
//! What each runtime does with each answer decides the rules here:
//! - An event the plugin subscribed to is delivered whether it comes as its own call (NRI >=
//!   0.12 for every event; CreateContainer, UpdateContainer and StopContainer always) or as a
//!   `StateChange` (NRI < 0.12, and any runtime for an event whose call a plugin left
//!   unimplemented).
//! - The call of an event the plugin did not subscribe to answers `Unimplemented`: NRI 0.12
//!   then falls back to `StateChange` (for the pod events, PostCreate, Start, PostStart,
//!   PostUpdate and RemoveContainer), and `StateChange` of an event the plugin did not subscribe
//!   to is answered and never delivered. (A runtime sends neither for an event the plugin did
//!   not subscribe to; this is for one that does anyway.)
//! - A plugin's error, or a panic, is the runtime's error for that request only.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};

use prost::Message;
use ttrpc::{Code, MethodHandler, Request, Response, TtrpcContext};

use crate::api::{self, Container, Event, PodSandbox, PLUGIN_METHODS, PLUGIN_SERVICE};
use crate::events::{event_name, EventMask};
use crate::plugin::{Plugin, PluginError};
use crate::stopwatch::Stopwatch;
use crate::version::accepted_events;

/// A failed request: the ttrpc status code and message the runtime gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The status code.
    pub code: Code,
    /// The message.
    pub message: String,
}

impl Failure {
    fn new(code: Code, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }

    fn plugin(e: PluginError) -> Failure {
        Failure::new(Code::UNKNOWN, crate::error::chain(e.as_ref()))
    }
}

/// The `Plugin` service of a plugin, for every session with the runtime.
pub struct Service {
    plugin: Arc<dyn Plugin>,
    name: String,
    /// The events answered at this session's Configure (none before it).
    subscribed: AtomicI32,
    sync: Mutex<Option<api::SynchronizeRequest>>,
}

/// The event whose own call `method` is, if it is one.
fn event_of(method: &str) -> Option<Event> {
    Some(match method {
        "RunPodSandbox" => Event::RunPodSandbox,
        "UpdatePodSandbox" => Event::UpdatePodSandbox,
        "PostUpdatePodSandbox" => Event::PostUpdatePodSandbox,
        "StopPodSandbox" => Event::StopPodSandbox,
        "RemovePodSandbox" => Event::RemovePodSandbox,
        "CreateContainer" => Event::CreateContainer,
        "PostCreateContainer" => Event::PostCreateContainer,
        "StartContainer" => Event::StartContainer,
        "PostStartContainer" => Event::PostStartContainer,
        "UpdateContainer" => Event::UpdateContainer,
        "PostUpdateContainer" => Event::PostUpdateContainer,
        "StopContainer" => Event::StopContainer,
        "RemoveContainer" => Event::RemoveContainer,
        "ValidateContainerAdjustment" => Event::ValidateContainerAdjustment,
        _ => return None,
    })
}

fn decode<M: Message + Default>(method: &str, payload: &[u8]) -> Result<M, Failure> {
    M::decode(payload).map_err(|e| {
        Failure::new(
            Code::INVALID_ARGUMENT,
            format!("cannot decode {method} request: {e}"),
        )
    })
}

/// The pod of a request (an empty one when it has none).
fn pod_of(pod: &Option<PodSandbox>) -> &PodSandbox {
    static NONE: std::sync::OnceLock<PodSandbox> = std::sync::OnceLock::new();
    pod.as_ref()
        .unwrap_or_else(|| NONE.get_or_init(PodSandbox::default))
}

/// The container of a container event's request, which must have one.
fn container_of(e: Event, c: &Option<Container>) -> Result<&Container, Failure> {
    c.as_ref().ok_or_else(|| {
        Failure::new(
            Code::INVALID_ARGUMENT,
            format!("{} without a container", event_name(e)),
        )
    })
}

/// The first 12 characters of an id, for logs.
fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

fn ok<T>(r: Result<T, PluginError>) -> Result<T, Failure> {
    r.map_err(Failure::plugin)
}

impl Service {
    /// The service of `plugin`, named `name` (`INDEX-NAME`) in logs.
    pub fn new(plugin: Arc<dyn Plugin>, name: String) -> Service {
        Service {
            plugin,
            name,
            subscribed: AtomicI32::new(0),
            sync: Mutex::new(None),
        }
    }

    /// Starts a new session with the runtime: no subscription until its Configure, and a split
    /// Synchronize left unfinished is forgotten.
    pub fn new_session(&self) {
        self.subscribed.store(0, Ordering::SeqCst);
        if let Ok(mut pending) = self.sync.lock() {
            *pending = None;
        }
    }

    /// The events of this session's subscription.
    pub fn subscribed(&self) -> EventMask {
        EventMask(self.subscribed.load(Ordering::SeqCst))
    }

    /// Answers one request for `method` with the encoded reply, or the failure to report.
    pub fn call(&self, method: &str, payload: &[u8]) -> Result<Vec<u8>, Failure> {
        match method {
            "Configure" => Ok(self.configure(decode(method, payload)?)?.encode_to_vec()),
            "Synchronize" => Ok(self.synchronize(decode(method, payload)?)?.encode_to_vec()),
            "Shutdown" => {
                decode::<api::Empty>(method, payload)?;
                log::info!("nri: the runtime is shutting down");
                self.plugin.shutdown();
                Ok(Vec::new())
            }
            "StateChange" => {
                self.state_change(decode(method, payload)?)?;
                Ok(Vec::new())
            }
            _ => match event_of(method) {
                Some(e) if self.subscribed().has(e) => self.event(e, payload),
                Some(e) => Err(Failure::new(
                    Code::UNIMPLEMENTED,
                    format!("{} is not subscribed to {}", self.name, event_name(e)),
                )),
                None => Err(Failure::new(
                    Code::UNIMPLEMENTED,
                    format!("{PLUGIN_SERVICE}/{method} is not served"),
                )),
            },
        }
    }

    fn configure(&self, req: api::ConfigureRequest) -> Result<api::ConfigureResponse, Failure> {
        self.plugin.configure(&req).map_err(|e| {
            let f = Failure::plugin(e);
            log::error!("nri: configuration refused: {}", f.message);
            f
        })?;
        let wanted = self.plugin.events();
        let accepted = accepted_events(&req);
        let dropped = wanted.without(accepted);
        if !dropped.is_empty() {
            log::warn!(
                "nri: {} {} (NRI {:?}) does not know {}: not subscribed",
                req.runtime_name,
                req.runtime_version,
                req.nri_version,
                dropped.names()
            );
        }
        let events = wanted.and(accepted);
        if events.is_empty() {
            return Err(Failure::new(
                Code::FAILED_PRECONDITION,
                format!("{} subscribes to no event this runtime knows", self.name),
            ));
        }
        self.subscribed.store(events.0, Ordering::SeqCst);
        log::info!(
            "nri: {} configured by {} {}, subscribed to {}",
            self.name,
            req.runtime_name,
            req.runtime_version,
            events.names()
        );
        Ok(api::ConfigureResponse { events: events.0 })
    }

    /// Synchronize, split or whole: a request with `more` set is kept and answered with `more`
    /// (no updates); the last one hands everything gathered to the plugin.
    fn synchronize(
        &self,
        req: api::SynchronizeRequest,
    ) -> Result<api::SynchronizeResponse, Failure> {
        let mut pending = self
            .sync
            .lock()
            .map_err(|_| Failure::new(Code::INTERNAL, "synchronize state poisoned"))?;
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
            return Ok(api::SynchronizeResponse {
                update: Vec::new(),
                more: true,
            });
        }
        drop(pending);
        let update = self
            .plugin
            .synchronize(&all.pods, &all.containers)
            .map_err(|e| {
                let f = Failure::plugin(e);
                log::error!("nri: synchronize failed: {}", f.message);
                f
            })?;
        log::info!(
            "nri: synchronized with {} pods and {} containers ({} updates)",
            all.pods.len(),
            all.containers.len(),
            update.len()
        );
        Ok(api::SynchronizeResponse {
            update,
            more: false,
        })
    }

    /// An event the plugin subscribed to, in its own call.
    fn event(&self, e: Event, payload: &[u8]) -> Result<Vec<u8>, Failure> {
        let method = event_name(e);
        let p = &self.plugin;
        let empty = Vec::new;
        match e {
            Event::UpdatePodSandbox => {
                let r: api::UpdatePodSandboxRequest = decode(method, payload)?;
                ok(p.update_pod_sandbox(&r)).map(|_| empty())
            }
            Event::CreateContainer => {
                let started = Stopwatch::start();
                let r: api::CreateContainerRequest = decode(method, payload)?;
                Ok(self.create_container(&r, started)?.encode_to_vec())
            }
            Event::UpdateContainer => {
                let r: api::UpdateContainerRequest = decode(method, payload)?;
                let c = container_of(e, &r.container)?;
                let reply = ok(p.update_container(pod_of(&r.pod), c, r.linux_resources.as_ref()))?;
                Ok(reply.encode_to_vec())
            }
            Event::StopContainer => {
                let r: api::StopContainerRequest = decode(method, payload)?;
                let c = container_of(e, &r.container)?;
                let update = ok(p.stop_container(pod_of(&r.pod), c))?;
                Ok(api::StopContainerResponse { update }.encode_to_vec())
            }
            Event::ValidateContainerAdjustment => {
                let r: api::ValidateContainerAdjustmentRequest = decode(method, payload)?;
                let reply = match p.validate_container_adjustment(&r) {
                    Ok(()) => api::ValidateContainerAdjustmentResponse::default(),
                    Err(reason) => api::ValidateContainerAdjustmentResponse {
                        reject: true,
                        reason,
                    },
                };
                Ok(reply.encode_to_vec())
            }
            // The notifications: the pod events' requests hold the pod (field 1), the container
            // events' the pod and the container (fields 1 and 2), so one shape decodes them all.
            _ => {
                let r: api::PostCreateContainerRequest = decode(method, payload)?;
                self.notify(e, &r.pod, &r.container).map(|_| empty())
            }
        }
    }

    /// A notification event (no reply but success) of `pod` and `container`.
    fn notify(
        &self,
        e: Event,
        pod: &Option<PodSandbox>,
        container: &Option<Container>,
    ) -> Result<(), Failure> {
        let p = &self.plugin;
        let pod = pod_of(pod);
        ok(match e {
            Event::RunPodSandbox => p.run_pod_sandbox(pod),
            Event::PostUpdatePodSandbox => p.post_update_pod_sandbox(pod),
            Event::StopPodSandbox => p.stop_pod_sandbox(pod),
            Event::RemovePodSandbox => p.remove_pod_sandbox(pod),
            Event::PostCreateContainer => p.post_create_container(pod, container_of(e, container)?),
            Event::StartContainer => p.start_container(pod, container_of(e, container)?),
            Event::PostStartContainer => p.post_start_container(pod, container_of(e, container)?),
            Event::PostUpdateContainer => p.post_update_container(pod, container_of(e, container)?),
            Event::RemoveContainer => p.remove_container(pod, container_of(e, container)?),
            // CreateContainer and the other calls with a reply never come as a state change.
            other => {
                log::debug!("nri: ignored {} as a state change", event_name(other));
                Ok(())
            }
        })
    }

    /// `StateChange`: delivered when the plugin subscribed to its event, else answered only.
    fn state_change(&self, req: api::StateChangeEvent) -> Result<(), Failure> {
        let Ok(e) = Event::try_from(req.event) else {
            log::debug!("nri: ignored unknown event {}", req.event);
            return Ok(());
        };
        if !self.subscribed().has(e) {
            log::debug!("nri: ignored {} (not subscribed)", event_name(e));
            return Ok(());
        }
        self.notify(e, &req.pod, &req.container)
    }

    /// CreateContainer, whose decoding began at `started`: the plugin's answer, logged with
    /// the time it took on this worker thread (from the request's payload to the answer, before
    /// it is encoded; not the transport's threads before and after) and how much of it was on
    /// a CPU ([`Stopwatch`]).
    fn create_container(
        &self,
        req: &api::CreateContainerRequest,
        started: Stopwatch,
    ) -> Result<api::CreateContainerResponse, Failure> {
        let ctr = container_of(Event::CreateContainer, &req.container)?;
        let pod = pod_of(&req.pod);
        let took = || started.took();
        match self.plugin.create_container(pod, ctr) {
            Ok(mut reply) => {
                let changed = reply.adjust.as_ref().is_some_and(|a| !a.is_empty());
                if !changed {
                    reply.adjust = None;
                }
                log::info!(
                    "nri: create {}/{} ({}): {} in {}",
                    pod.name,
                    ctr.name,
                    short(&ctr.id),
                    if changed { "adjusted" } else { "unchanged" },
                    took()
                );
                Ok(reply)
            }
            Err(e) => {
                let f = Failure::plugin(e);
                log::warn!(
                    "nri: create {}/{} ({}) refused in {}: {}",
                    pod.name,
                    ctr.name,
                    short(&ctr.id),
                    took(),
                    f.message
                );
                Err(f)
            }
        }
    }

    /// The ttrpc method table of this service (every method of NRI's `Plugin` service), for
    /// `ttrpc::Server::register_service`.
    pub fn methods(self: &Arc<Self>) -> HashMap<String, Box<dyn MethodHandler + Send + Sync>> {
        PLUGIN_METHODS
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

/// One method of the service, as the ttrpc server calls it.
struct Method {
    name: &'static str,
    service: Arc<Service>,
}

/// `service`'s answer to `method`, a panic of the plugin included (an `Internal` failure).
fn answer(service: &Service, method: &str, payload: &[u8]) -> Result<Vec<u8>, Failure> {
    catch_unwind(AssertUnwindSafe(|| service.call(method, payload))).unwrap_or_else(|_| {
        log::error!("nri: the plugin panicked in {method}");
        Err(Failure::new(
            Code::INTERNAL,
            format!("the plugin panicked in {method}"),
        ))
    })
}

impl MethodHandler for Method {
    fn handler(&self, ctx: TtrpcContext, req: Request) -> ttrpc::Result<()> {
        let mut res = Response::new();
        match answer(&self.service, self.name, &req.payload) {
            Ok(payload) => res.payload = payload,
            Err(f) => res.set_status(ttrpc::get_status(f.code, f.message)),
        }
        ctx.respond(ctx.mh.stream_id, res)
    }
}

#[cfg(test)]
#[path = "service_tests.rs"]
mod tests;
