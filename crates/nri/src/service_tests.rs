//! The service against a recording plugin: every method of NRI's `Plugin` service is served,
//! subscribed events reach the plugin by either route, the others never do.

use super::*;
use crate::api::{
    ConfigureRequest, ConfigureResponse, ContainerAdjustment, CreateContainerRequest,
    CreateContainerResponse, StateChangeEvent, StopContainerRequest, SynchronizeRequest,
    SynchronizeResponse,
};
use crate::plugin::PluginResult;

/// Records its calls; subscribes to `events`; refuses containers named "reject", panics for
/// containers named "panic".
struct Recorder {
    events: EventMask,
    calls: Mutex<Vec<String>>,
}

impl Recorder {
    fn record(&self, line: String) {
        self.calls.lock().unwrap().push(line);
    }
}

impl Plugin for Recorder {
    fn events(&self) -> EventMask {
        self.events
    }
    fn configure(&self, req: &ConfigureRequest) -> PluginResult<()> {
        if req.config == "bad" {
            return Err("bad config".into());
        }
        self.record(format!("configure {}", req.runtime_name));
        Ok(())
    }
    fn synchronize(
        &self,
        pods: &[PodSandbox],
        containers: &[Container],
    ) -> PluginResult<Vec<api::ContainerUpdate>> {
        self.record(format!("synchronize {} {}", pods.len(), containers.len()));
        Ok(Vec::new())
    }
    fn shutdown(&self) {
        self.record("shutdown".into());
    }
    fn run_pod_sandbox(&self, pod: &PodSandbox) -> PluginResult<()> {
        self.record(format!("run-pod {}", pod.id));
        Ok(())
    }
    fn create_container(
        &self,
        _pod: &PodSandbox,
        c: &Container,
    ) -> PluginResult<CreateContainerResponse> {
        match c.name.as_str() {
            "reject" => Err("rejected".into()),
            "panic" => panic!("a plugin bug"),
            "unchanged" => Ok(ContainerAdjustment::default().into()),
            _ => {
                let mut a = ContainerAdjustment::default();
                a.add_env("SEEN", c.id.as_str());
                Ok(a.into())
            }
        }
    }
    fn start_container(&self, _pod: &PodSandbox, c: &Container) -> PluginResult<()> {
        self.record(format!("start {}", c.id));
        Ok(())
    }
    fn stop_container(
        &self,
        _pod: &PodSandbox,
        c: &Container,
    ) -> PluginResult<Vec<api::ContainerUpdate>> {
        self.record(format!("stop {}", c.id));
        Ok(Vec::new())
    }
    fn remove_container(&self, _pod: &PodSandbox, c: &Container) -> PluginResult<()> {
        self.record(format!("remove {}", c.id));
        Ok(())
    }
}

const SUBSCRIBED: EventMask = EventMask::of(&[
    Event::CreateContainer,
    Event::StopContainer,
    Event::RemoveContainer,
    Event::UpdatePodSandbox,
]);

fn service(events: EventMask) -> (Arc<Recorder>, Service) {
    let r = Arc::new(Recorder {
        events,
        calls: Mutex::new(Vec::new()),
    });
    let s = Service::new(r.clone(), "10-test".into());
    (r, s)
}

fn configure(s: &Service, name: &str, version: &str, nri: &str) -> Result<i32, Failure> {
    let req = ConfigureRequest {
        runtime_name: name.into(),
        runtime_version: version.into(),
        nri_version: nri.into(),
        ..Default::default()
    };
    let out = s.call("Configure", &req.encode_to_vec())?;
    Ok(ConfigureResponse::decode(out.as_slice()).unwrap().events)
}

fn ctr(id: &str, name: &str) -> Container {
    Container {
        id: id.into(),
        name: name.into(),
        ..Default::default()
    }
}

fn create(name: &str) -> Vec<u8> {
    CreateContainerRequest {
        pod: None,
        container: Some(ctr("c1", name)),
    }
    .encode_to_vec()
}

fn removal(id: &str) -> Vec<u8> {
    api::RemoveContainerRequest {
        pod: None,
        container: Some(ctr(id, "x")),
    }
    .encode_to_vec()
}

#[test]
fn configure_subscribes_to_what_this_runtime_knows() {
    let (r, s) = service(SUBSCRIBED);
    // containerd 1.7 (NRI 0.6.1) would refuse UpdatePodSandbox's bit: it is left out
    let old = configure(&s, "containerd", "1.7.24", "").unwrap();
    assert_eq!(
        EventMask(old),
        SUBSCRIBED.without(EventMask::of(&[Event::UpdatePodSandbox]))
    );
    assert_eq!(s.subscribed(), EventMask(old));
    let new = configure(&s, "containerd", "v2.3.4", "v0.12.1").unwrap();
    assert_eq!(EventMask(new), SUBSCRIBED);
    assert_eq!(
        *r.calls.lock().unwrap(),
        ["configure containerd", "configure containerd"]
    );
    // a configuration the plugin refuses fails the registration
    let bad = ConfigureRequest {
        config: "bad".into(),
        ..Default::default()
    };
    let f = s.call("Configure", &bad.encode_to_vec()).unwrap_err();
    assert_eq!((f.code, f.message.as_str()), (Code::UNKNOWN, "bad config"));
}

#[test]
fn a_subscription_this_runtime_cannot_take_is_refused_not_sent_as_zero() {
    let (_r, s) = service(EventMask::of(&[Event::ValidateContainerAdjustment]));
    let f = configure(&s, "containerd", "1.7.24", "").unwrap_err();
    assert_eq!(f.code, Code::FAILED_PRECONDITION, "{}", f.message);
    assert_eq!(configure(&s, "cri-o", "1.35.0", "").unwrap(), 1 << 13);
}

#[test]
fn every_method_of_the_api_is_served_and_the_unsubscribed_answer_unimplemented() {
    let (r, s) = service(SUBSCRIBED);
    let table = Arc::new(Service::new(r.clone(), "10-test".into())).methods();
    assert_eq!(table.len(), PLUGIN_METHODS.len());
    assert_eq!(PLUGIN_METHODS.len(), 18, "NRI v0.12's Plugin service");
    for m in PLUGIN_METHODS {
        assert!(table.contains_key(&format!("/{PLUGIN_SERVICE}/{m}")), "{m}");
    }
    configure(&s, "containerd", "v2.3.4", "v0.12.1").unwrap();
    for m in PLUGIN_METHODS.iter().filter(|m| event_of(m).is_some()) {
        let e = event_of(m).unwrap();
        let got = s.call(m, &[]);
        if SUBSCRIBED.has(e) {
            // subscribed: served (an empty request lacks the container a container event needs)
            assert!(
                got.as_ref().is_ok() || got.as_ref().unwrap_err().code == Code::INVALID_ARGUMENT,
                "{m}: {got:?}"
            );
        } else {
            assert_eq!(got.unwrap_err().code, Code::UNIMPLEMENTED, "{m}");
        }
    }
    assert_eq!(s.call("Bogus", &[]).unwrap_err().code, Code::UNIMPLEMENTED);
}

#[test]
fn an_event_reaches_the_plugin_by_its_own_call_or_by_state_change_once_subscribed() {
    let (r, s) = service(SUBSCRIBED);
    // before Configure nothing is subscribed
    assert_eq!(
        s.call("RemoveContainer", &removal("early"))
            .unwrap_err()
            .code,
        Code::UNIMPLEMENTED
    );
    configure(&s, "containerd", "v2.3.4", "v0.12.1").unwrap();
    s.call("RemoveContainer", &removal("c1")).unwrap();
    let ev = |e: Event, id: &str| {
        StateChangeEvent {
            event: e as i32,
            pod: Some(PodSandbox {
                id: "p".into(),
                ..Default::default()
            }),
            container: Some(ctr(id, "x")),
        }
        .encode_to_vec()
    };
    s.call("StateChange", &ev(Event::RemoveContainer, "c2"))
        .unwrap();
    // not subscribed: answered, never delivered, whichever way it comes
    s.call("StateChange", &ev(Event::StartContainer, "c3"))
        .unwrap();
    s.call("StateChange", &ev(Event::RunPodSandbox, "c3"))
        .unwrap();
    assert_eq!(
        s.call("StartContainer", &ev(Event::StartContainer, "c3"))
            .unwrap_err()
            .code,
        Code::UNIMPLEMENTED
    );
    // unknown events are answered too
    let unknown = StateChangeEvent {
        event: 99,
        ..Default::default()
    };
    s.call("StateChange", &unknown.encode_to_vec()).unwrap();
    let stop = StopContainerRequest {
        pod: None,
        container: Some(ctr("c4", "x")),
    };
    s.call("StopContainer", &stop.encode_to_vec()).unwrap();
    s.call("Shutdown", &[]).unwrap();
    assert_eq!(
        *r.calls.lock().unwrap(),
        [
            "configure containerd",
            "remove c1",
            "remove c2",
            "stop c4",
            "shutdown"
        ]
    );
}

#[test]
fn a_container_event_without_a_container_never_reaches_the_plugin() {
    let (r, s) = service(SUBSCRIBED);
    configure(&s, "containerd", "1.7.24", "").unwrap();
    for m in ["StopContainer", "RemoveContainer", "CreateContainer"] {
        let f = s.call(m, &[]).unwrap_err();
        assert_eq!(f.code, Code::INVALID_ARGUMENT, "{m}");
        assert!(f.message.contains("without a container"), "{}", f.message);
    }
    let ev = StateChangeEvent {
        event: Event::RemoveContainer as i32,
        ..Default::default()
    };
    assert_eq!(
        s.call("StateChange", &ev.encode_to_vec()).unwrap_err().code,
        Code::INVALID_ARGUMENT
    );
    assert_eq!(*r.calls.lock().unwrap(), ["configure containerd"]);
}

#[test]
fn create_container_answers_the_adjustment_and_failures_become_statuses() {
    let (_r, s) = service(SUBSCRIBED);
    configure(&s, "containerd", "1.7.24", "").unwrap();
    let out = s.call("CreateContainer", &create("srv")).unwrap();
    let rpl = CreateContainerResponse::decode(out.as_slice()).unwrap();
    let a = rpl.adjust.unwrap();
    assert_eq!(
        (a.env[0].key.as_str(), a.env[0].value.as_str()),
        ("SEEN", "c1")
    );
    let out = s.call("CreateContainer", &create("unchanged")).unwrap();
    assert_eq!(
        CreateContainerResponse::decode(out.as_slice()).unwrap(),
        CreateContainerResponse::default(),
        "an empty adjustment is none"
    );
    let f = s.call("CreateContainer", &create("reject")).unwrap_err();
    assert_eq!((f.code, f.message.as_str()), (Code::UNKNOWN, "rejected"));
    let f = s.call("CreateContainer", &[0xff, 0xff]).unwrap_err();
    assert_eq!(f.code, Code::INVALID_ARGUMENT);
}

#[test]
fn a_panicking_plugin_fails_only_its_request() {
    let (r, s) = service(SUBSCRIBED);
    configure(&s, "containerd", "1.7.24", "").unwrap();
    let f = answer(&s, "CreateContainer", &create("panic")).unwrap_err();
    assert_eq!(f.code, Code::INTERNAL, "{}", f.message);
    assert!(answer(&s, "CreateContainer", &create("srv")).is_ok());
    assert_eq!(r.calls.lock().unwrap().len(), 1);
}

#[test]
fn split_synchronize_is_gathered_and_a_new_session_forgets_it() {
    let (r, s) = service(SUBSCRIBED);
    let part = |n: usize, more: bool| {
        SynchronizeRequest {
            pods: vec![PodSandbox::default()],
            containers: (0..n).map(|i| ctr(&i.to_string(), "c")).collect(),
            more,
        }
        .encode_to_vec()
    };
    let rpl = |out: Vec<u8>| SynchronizeResponse::decode(out.as_slice()).unwrap();
    let first = rpl(s.call("Synchronize", &part(2, true)).unwrap());
    assert!(first.more && first.update.is_empty());
    assert!(
        r.calls.lock().unwrap().is_empty(),
        "waits for the last part"
    );
    assert!(!rpl(s.call("Synchronize", &part(1, false)).unwrap()).more);
    s.call("Synchronize", &part(5, true)).unwrap();
    s.new_session();
    s.call("Synchronize", &part(0, false)).unwrap();
    assert_eq!(
        *r.calls.lock().unwrap(),
        ["synchronize 2 3", "synchronize 1 0"]
    );
}
