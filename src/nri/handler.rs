//! What the NRI session asks of the planner: the [`Handler`] trait, and two small handlers, one
//! that changes nothing and one for tests that marks every container it sees.

use std::sync::Mutex;

use super::proto::{Container, ContainerAdjustment, ContainerUpdate, PodSandbox};

/// The planner side of the NRI plugin. Called from the ttrpc server's worker threads, several
/// at a time; each call must answer within the runtime's request timeout (2 s by default).
pub trait Handler: Send + Sync {
    /// Called on Configure with the plugin's configuration text from the runtime (empty when it
    /// has none) and the runtime's name and version; an error fails the registration.
    fn configure(&self, _config: &str, _runtime: &str, _version: &str) -> Result<(), String> {
        Ok(())
    }

    /// Called on Synchronize with every pod and container the runtime knows; returns updates to
    /// existing containers (none unless the handler has some).
    fn synchronize(
        &self,
        _pods: &[PodSandbox],
        _containers: &[Container],
    ) -> Result<Vec<ContainerUpdate>, String> {
        Ok(Vec::new())
    }

    /// Called on CreateContainer: returns the adjustment (empty for none), or an error that
    /// fails the container's creation.
    fn create_container(
        &self,
        pod: &PodSandbox,
        container: &Container,
    ) -> Result<ContainerAdjustment, String>;

    /// Called on StopContainer; returns updates to the remaining containers.
    fn stop_container(&self, _pod: &PodSandbox, _container: &Container) -> Vec<ContainerUpdate> {
        Vec::new()
    }

    /// Called on the RemoveContainer event.
    fn remove_container(&self, _pod: &PodSandbox, _container: &Container) {}

    /// Called when the runtime says it is shutting down.
    fn shutdown(&self) {}
}

/// A handler that adjusts nothing (the plugin registers and follows events, and changes nothing).
#[derive(Debug, Default)]
pub struct PassHandler;

impl Handler for PassHandler {
    fn create_container(
        &self,
        _: &PodSandbox,
        _: &Container,
    ) -> Result<ContainerAdjustment, String> {
        Ok(ContainerAdjustment::default())
    }
}

/// The environment variable [`TestHandler`] sets in every container it sees created.
pub const TEST_ENV: (&str, &str) = ("NRI_TEST", "1");
/// The annotation [`TestHandler`] sets on every container it sees created.
pub const TEST_ANNOTATION: (&str, &str) = ("cpuplan.nri/test", "1");
/// Containers whose name is this fail creation under [`TestHandler`].
pub const TEST_REJECTED_NAME: &str = "cpuplan-nri-reject";
/// A pod annotation whose value [`TestHandler`] sets as the cpuset of the pod's new containers.
pub const TEST_CPUS_ANNOTATION: &str = "cpuplan.nri/test-cpus";

/// A handler for tests: sets [`TEST_ENV`] and [`TEST_ANNOTATION`] on every container created,
/// and the cpuset its pod's [`TEST_CPUS_ANNOTATION`] names; rejects a container named
/// [`TEST_REJECTED_NAME`]; and records what it was called with.
#[derive(Debug, Default)]
pub struct TestHandler {
    /// Every call so far, one line each: `configure RUNTIME`, `synchronize PODS CONTAINERS`,
    /// `create ID NAME`, `stop ID`, `remove ID`, `shutdown`.
    pub calls: Mutex<Vec<String>>,
}

impl TestHandler {
    fn record(&self, line: String) {
        log::info!("test handler: {line}");
        if let Ok(mut calls) = self.calls.lock() {
            calls.push(line);
        }
    }

    /// The calls recorded so far.
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

impl Handler for TestHandler {
    fn configure(&self, _config: &str, runtime: &str, version: &str) -> Result<(), String> {
        self.record(format!("configure {runtime} {version}"));
        Ok(())
    }

    fn synchronize(
        &self,
        pods: &[PodSandbox],
        containers: &[Container],
    ) -> Result<Vec<ContainerUpdate>, String> {
        self.record(format!("synchronize {} {}", pods.len(), containers.len()));
        Ok(Vec::new())
    }

    fn create_container(
        &self,
        pod: &PodSandbox,
        container: &Container,
    ) -> Result<ContainerAdjustment, String> {
        self.record(format!("create {} {}", container.id, container.name));
        if container.name == TEST_REJECTED_NAME {
            return Err(format!("test handler rejects {TEST_REJECTED_NAME}"));
        }
        let mut a = ContainerAdjustment::default();
        a.add_env(TEST_ENV.0, TEST_ENV.1)
            .add_annotation(TEST_ANNOTATION.0, TEST_ANNOTATION.1);
        if let Some(cpus) = pod.annotations.get(TEST_CPUS_ANNOTATION) {
            a.set_cpus(cpus.as_str());
        }
        Ok(a)
    }

    fn stop_container(&self, _pod: &PodSandbox, container: &Container) -> Vec<ContainerUpdate> {
        self.record(format!("stop {}", container.id));
        Vec::new()
    }

    fn remove_container(&self, _pod: &PodSandbox, container: &Container) {
        self.record(format!("remove {}", container.id));
    }

    fn shutdown(&self) {
        self.record("shutdown".into());
    }
}
