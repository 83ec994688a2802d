//! The [`Plugin`] trait: one method per NRI request, each with a default but
//! `create_container`. The runtime sends only the events [`Plugin::events`] names; the stub
//! never calls a method for an event the plugin did not subscribe to, whatever the runtime sends.
//!
//! Methods are called from the ttrpc server's worker threads, several at a time, and each must
//! answer within the runtime's request timeout (2 s by default; `ConfigureRequest` says it).

use crate::api::{
    ConfigureRequest, Container, ContainerUpdate, CreateContainerResponse, Event, LinuxResources,
    PodSandbox, UpdateContainerResponse, UpdatePodSandboxRequest,
    ValidateContainerAdjustmentRequest,
};
use crate::events::EventMask;

/// What a plugin method fails with: the runtime gets its text (and, for CreateContainer, fails
/// the container's creation).
pub type PluginError = Box<dyn std::error::Error + Send + Sync>;

/// A plugin method's result.
pub type PluginResult<T> = Result<T, PluginError>;

/// What the stub tells the plugin of its life ([`Plugin::lifecycle`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    /// The runtime accepted the plugin's registration: it is served from now on.
    Registered,
    /// The connection to the runtime closed, or the plugin is stopping: it is not served.
    Closed,
    /// The stub's main loop is running (sent every [`crate::stub::HEARTBEAT`] while it waits for
    /// the connection to close or for the next try): a plugin that stops hearing it has a
    /// wedged stub.
    Heartbeat,
}

/// An NRI plugin.
pub trait Plugin: Send + Sync {
    /// The events the plugin subscribes to (default: CreateContainer only). Events this
    /// runtime's NRI does not know are left out of the subscription, with a warning.
    fn events(&self) -> EventMask {
        EventMask::of(&[Event::CreateContainer])
    }

    /// Configure: the plugin's configuration text from the runtime (empty when it has none),
    /// the runtime's name, version, NRI version and timeouts. An error fails the registration.
    fn configure(&self, _req: &ConfigureRequest) -> PluginResult<()> {
        Ok(())
    }

    /// Synchronize: every pod and container the runtime knows (a split request is gathered
    /// first); returns updates to existing containers.
    fn synchronize(
        &self,
        _pods: &[PodSandbox],
        _containers: &[Container],
    ) -> PluginResult<Vec<ContainerUpdate>> {
        Ok(Vec::new())
    }

    /// The runtime is shutting down.
    fn shutdown(&self) {}

    /// The stub's news of the connection and its main loop (default: nothing). Called from the
    /// stub's main thread: it must return at once.
    fn lifecycle(&self, _event: Lifecycle) {}

    /// A pod is being started.
    fn run_pod_sandbox(&self, _pod: &PodSandbox) -> PluginResult<()> {
        Ok(())
    }

    /// A pod's resources are being updated (NRI >= 0.10).
    fn update_pod_sandbox(&self, _req: &UpdatePodSandboxRequest) -> PluginResult<()> {
        Ok(())
    }

    /// A pod was updated (NRI >= 0.10).
    fn post_update_pod_sandbox(&self, _pod: &PodSandbox) -> PluginResult<()> {
        Ok(())
    }

    /// A pod is being stopped.
    fn stop_pod_sandbox(&self, _pod: &PodSandbox) -> PluginResult<()> {
        Ok(())
    }

    /// A pod was removed.
    fn remove_pod_sandbox(&self, _pod: &PodSandbox) -> PluginResult<()> {
        Ok(())
    }

    /// A container is being created: its adjustment (and updates to or evictions of others).
    /// An error fails the container's creation.
    fn create_container(
        &self,
        pod: &PodSandbox,
        container: &Container,
    ) -> PluginResult<CreateContainerResponse>;

    /// A container was created.
    fn post_create_container(&self, _pod: &PodSandbox, _container: &Container) -> PluginResult<()> {
        Ok(())
    }

    /// A container is being started.
    fn start_container(&self, _pod: &PodSandbox, _container: &Container) -> PluginResult<()> {
        Ok(())
    }

    /// A container was started.
    fn post_start_container(&self, _pod: &PodSandbox, _container: &Container) -> PluginResult<()> {
        Ok(())
    }

    /// A container's resources are being updated to `resources`: updates (an update of this
    /// container changes what it is updated to) and evictions.
    fn update_container(
        &self,
        _pod: &PodSandbox,
        _container: &Container,
        _resources: Option<&LinuxResources>,
    ) -> PluginResult<UpdateContainerResponse> {
        Ok(UpdateContainerResponse::default())
    }

    /// A container was updated.
    fn post_update_container(&self, _pod: &PodSandbox, _container: &Container) -> PluginResult<()> {
        Ok(())
    }

    /// A container is being stopped: updates to the remaining containers.
    fn stop_container(
        &self,
        _pod: &PodSandbox,
        _container: &Container,
    ) -> PluginResult<Vec<ContainerUpdate>> {
        Ok(Vec::new())
    }

    /// A container was removed.
    fn remove_container(&self, _pod: &PodSandbox, _container: &Container) -> PluginResult<()> {
        Ok(())
    }

    /// The adjustments every plugin asked for (NRI >= 0.10): `Err(reason)` rejects them and
    /// fails the container's creation.
    fn validate_container_adjustment(
        &self,
        _req: &ValidateContainerAdjustmentRequest,
    ) -> Result<(), String> {
        Ok(())
    }
}
