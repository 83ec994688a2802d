//! A plugin for testing a runtime's NRI wiring: it records every event it gets (in its log and
//! in memory), sets `NRI_TEST=1` and the annotation `nri-plugin.test/seen=1` on every container
//! created, gives a pod's new containers the cpuset its annotation `nri-plugin.test/cpus`
//! names, and refuses to create a container named `nri-reject`.
//!
//! ```text
//! cargo run -p nri-plugin --example recorder -- [--socket /var/run/nri/nri.sock]
//! ```

use std::sync::{Arc, Mutex};

use nri_plugin::api::{
    ConfigureRequest, Container, ContainerAdjustment, ContainerUpdate, CreateContainerResponse,
    Event, PodSandbox,
};
use nri_plugin::{EventMask, Options, Plugin, PluginResult};

/// The environment variable set in every container created.
pub const ENV: (&str, &str) = ("NRI_TEST", "1");
/// The annotation set on every container created.
pub const ANNOTATION: (&str, &str) = ("nri-plugin.test/seen", "1");
/// The pod annotation whose value is set as the cpuset of the pod's new containers.
pub const CPUS_ANNOTATION: &str = "nri-plugin.test/cpus";
/// Containers of this name are refused.
pub const REJECTED: &str = "nri-reject";

/// Records its calls and adjusts every container created.
#[derive(Default)]
pub struct Recorder {
    calls: Mutex<Vec<String>>,
}

impl Recorder {
    fn record(&self, line: String) {
        log::info!("recorder: {line}");
        if let Ok(mut calls) = self.calls.lock() {
            calls.push(line);
        }
    }

    /// The calls so far, one line each: `configure RUNTIME`, `synchronize PODS CONTAINERS`,
    /// `run-pod NAME`, `create ID NAME`, `start ID`, `stop ID`, `remove ID`, `shutdown`.
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

impl Plugin for Recorder {
    fn events(&self) -> EventMask {
        EventMask::of(&[
            Event::RunPodSandbox,
            Event::CreateContainer,
            Event::StartContainer,
            Event::StopContainer,
            Event::RemoveContainer,
        ])
    }

    fn configure(&self, req: &ConfigureRequest) -> PluginResult<()> {
        self.record(format!("configure {}", req.runtime_name));
        Ok(())
    }

    fn synchronize(
        &self,
        pods: &[PodSandbox],
        containers: &[Container],
    ) -> PluginResult<Vec<ContainerUpdate>> {
        self.record(format!("synchronize {} {}", pods.len(), containers.len()));
        Ok(Vec::new())
    }

    fn shutdown(&self) {
        self.record("shutdown".into());
    }

    fn run_pod_sandbox(&self, pod: &PodSandbox) -> PluginResult<()> {
        self.record(format!("run-pod {}", pod.name));
        Ok(())
    }

    fn create_container(
        &self,
        pod: &PodSandbox,
        container: &Container,
    ) -> PluginResult<CreateContainerResponse> {
        self.record(format!("create {} {}", container.id, container.name));
        if container.name == REJECTED {
            return Err(format!("the recorder refuses {REJECTED}").into());
        }
        let mut a = ContainerAdjustment::default();
        a.add_env(ENV.0, ENV.1)
            .add_annotation(ANNOTATION.0, ANNOTATION.1);
        if let Some(cpus) = pod.annotations.get(CPUS_ANNOTATION) {
            a.set_cpus(cpus.as_str());
        }
        Ok(a.into())
    }

    fn start_container(&self, _pod: &PodSandbox, container: &Container) -> PluginResult<()> {
        self.record(format!("start {}", container.id));
        Ok(())
    }

    fn stop_container(
        &self,
        _pod: &PodSandbox,
        container: &Container,
    ) -> PluginResult<Vec<ContainerUpdate>> {
        self.record(format!("stop {}", container.id));
        Ok(Vec::new())
    }

    fn remove_container(&self, _pod: &PodSandbox, container: &Container) -> PluginResult<()> {
        self.record(format!("remove {}", container.id));
        Ok(())
    }
}

/// Writes log lines to stderr.
struct Stderr;

impl log::Log for Stderr {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::Level::Info
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) && !r.target().starts_with("ttrpc") {
            eprintln!("{} {}", r.level(), r.args());
        }
    }
    fn flush(&self) {}
}

#[allow(dead_code)] // a test that includes this file runs the plugin in process
fn main() {
    let _ = log::set_logger(&Stderr).map(|()| log::set_max_level(log::LevelFilter::Info));
    let mut args = std::env::args().skip(1);
    let socket = match (args.next().as_deref(), args.next()) {
        (Some("--socket"), Some(p)) => Some(p.into()),
        (None, _) => None,
        _ => {
            eprintln!("usage: recorder [--socket PATH]");
            std::process::exit(2);
        }
    };
    let opts = Options::resolve(socket, None, None, "recorder", "90", |k| {
        std::env::var(k).ok()
    });
    if let Err(e) = opts.and_then(|o| nri_plugin::run(&o, Arc::new(Recorder::default()))) {
        eprintln!("recorder: {}", nri_plugin::error::chain(&e));
        std::process::exit(1);
    }
}
