//! The subset of NRI's protobuf API (`nri.pkg.api.v1alpha1`) that the plugin speaks, written
//! as `prost` messages: field names and numbers are NRI's (`pkg/api/api.proto`, checked against
//! v0.6.1, which Debian's containerd 1.7.24 is built with, and against upstream's later
//! revisions, which only add fields). Fields the plugin never reads or writes are left out:
//! prost skips them when decoding, and the runtime never needs them from us.

use std::collections::BTreeMap;

/// The ttrpc service the runtime serves to the plugin (on mux connection 2).
pub const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";
/// The ttrpc service the plugin serves to the runtime (on mux connection 1).
pub const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";

/// `Runtime.RegisterPlugin` request: the plugin's name and two-digit index.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct RegisterPluginRequest {
    /// Name of the plugin to register.
    #[prost(string, tag = "1")]
    pub plugin_name: String,
    /// Invocation index ("00".."99"); plugins are called in ascending order.
    #[prost(string, tag = "2")]
    pub plugin_idx: String,
}

/// An empty message (requests and replies that are events).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Empty {}

/// `Plugin.Configure` request: the plugin's configuration text and who the runtime is.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ConfigureRequest {
    /// Plugin-specific configuration from the runtime's NRI config dir (may be empty).
    #[prost(string, tag = "1")]
    pub config: String,
    /// Name of the runtime NRI runs in.
    #[prost(string, tag = "2")]
    pub runtime_name: String,
    /// Version of the runtime NRI runs in.
    #[prost(string, tag = "3")]
    pub runtime_version: String,
    /// The runtime's registration timeout in milliseconds (NRI >= 0.7; 0 when not sent).
    #[prost(int64, tag = "4")]
    pub registration_timeout: i64,
    /// The runtime's request timeout in milliseconds (NRI >= 0.7; 0 when not sent).
    #[prost(int64, tag = "5")]
    pub request_timeout: i64,
}

/// `Plugin.Configure` reply: the events the plugin subscribes to.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ConfigureResponse {
    /// Event mask: bit `e - 1` set for each subscribed [`Event`] `e`.
    #[prost(int32, tag = "2")]
    pub events: i32,
}

/// `Plugin.Synchronize` request: the pods and containers the runtime knows.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct SynchronizeRequest {
    /// Pods known to the runtime.
    #[prost(message, repeated, tag = "1")]
    pub pods: Vec<PodSandbox>,
    /// Containers known to the runtime.
    #[prost(message, repeated, tag = "2")]
    pub containers: Vec<Container>,
    /// Whether more pods and containers follow in another request (NRI >= 0.8).
    #[prost(bool, tag = "3")]
    pub more: bool,
}

/// `Plugin.Synchronize` reply: updates to existing containers.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct SynchronizeResponse {
    /// Updates to containers requested by the plugin.
    #[prost(message, repeated, tag = "1")]
    pub update: Vec<ContainerUpdate>,
    /// Echoes a split request's `more`: the plugin takes the rest in further requests.
    #[prost(bool, tag = "2")]
    pub more: bool,
}

/// `Plugin.CreateContainer` request: the container being created and its pod.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct CreateContainerRequest {
    /// Pod of the container being created.
    #[prost(message, optional, tag = "1")]
    pub pod: Option<PodSandbox>,
    /// Container being created.
    #[prost(message, optional, tag = "2")]
    pub container: Option<Container>,
}

/// `Plugin.CreateContainer` reply: the adjustment of the new container and updates to others.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct CreateContainerResponse {
    /// Adjustments to the container being created.
    #[prost(message, optional, tag = "1")]
    pub adjust: Option<ContainerAdjustment>,
    /// Updates to other existing containers.
    #[prost(message, repeated, tag = "2")]
    pub update: Vec<ContainerUpdate>,
    /// Existing containers to evict.
    #[prost(message, repeated, tag = "3")]
    pub evict: Vec<ContainerEviction>,
}

/// `Plugin.UpdateContainer` request: a container's resources are being updated.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct UpdateContainerRequest {
    /// Pod of the container being updated.
    #[prost(message, optional, tag = "1")]
    pub pod: Option<PodSandbox>,
    /// Container being updated.
    #[prost(message, optional, tag = "2")]
    pub container: Option<Container>,
    /// The resources it is updated to.
    #[prost(message, optional, tag = "3")]
    pub linux_resources: Option<LinuxResources>,
}

/// `Plugin.UpdateContainer` reply: updates and evictions of containers.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct UpdateContainerResponse {
    /// Updates to containers.
    #[prost(message, repeated, tag = "1")]
    pub update: Vec<ContainerUpdate>,
    /// Containers to evict.
    #[prost(message, repeated, tag = "2")]
    pub evict: Vec<ContainerEviction>,
}

/// `Plugin.StopContainer` request: the container being stopped and its pod.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct StopContainerRequest {
    /// Pod of the container being stopped.
    #[prost(message, optional, tag = "1")]
    pub pod: Option<PodSandbox>,
    /// Container being stopped.
    #[prost(message, optional, tag = "2")]
    pub container: Option<Container>,
}

/// `Plugin.StopContainer` reply: updates to the remaining containers.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct StopContainerResponse {
    /// Updates to containers.
    #[prost(message, repeated, tag = "1")]
    pub update: Vec<ContainerUpdate>,
}

/// `Plugin.StateChange` request: any other subscribed pod or container event.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct StateChangeEvent {
    /// Which event.
    #[prost(enumeration = "Event", tag = "1")]
    pub event: i32,
    /// The pod (of the container, for container events).
    #[prost(message, optional, tag = "2")]
    pub pod: Option<PodSandbox>,
    /// The container (none for pod events).
    #[prost(message, optional, tag = "3")]
    pub container: Option<Container>,
}

/// The pod and container events a plugin can subscribe to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, ::prost::Enumeration)]
#[repr(i32)]
pub enum Event {
    /// No event.
    Unknown = 0,
    /// A pod sandbox is started.
    RunPodSandbox = 1,
    /// A pod sandbox is stopped.
    StopPodSandbox = 2,
    /// A pod sandbox is removed.
    RemovePodSandbox = 3,
    /// A container is being created (can be adjusted).
    CreateContainer = 4,
    /// A container was created.
    PostCreateContainer = 5,
    /// A container is being started.
    StartContainer = 6,
    /// A container was started.
    PostStartContainer = 7,
    /// A container is being updated.
    UpdateContainer = 8,
    /// A container was updated.
    PostUpdateContainer = 9,
    /// A container is being stopped.
    StopContainer = 10,
    /// A container is removed.
    RemoveContainer = 11,
}

/// A pod, as much of it as a plugin is told.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct PodSandbox {
    /// The runtime's sandbox id.
    #[prost(string, tag = "1")]
    pub id: String,
    /// Pod name.
    #[prost(string, tag = "2")]
    pub name: String,
    /// Pod UID.
    #[prost(string, tag = "3")]
    pub uid: String,
    /// Pod namespace.
    #[prost(string, tag = "4")]
    pub namespace: String,
    /// Pod labels.
    #[prost(btree_map = "string, string", tag = "5")]
    pub labels: BTreeMap<String, String>,
    /// Pod annotations.
    #[prost(btree_map = "string, string", tag = "6")]
    pub annotations: BTreeMap<String, String>,
    /// The runtime handler (runtime class) of the pod.
    #[prost(string, tag = "7")]
    pub runtime_handler: String,
    /// Linux-specific pod data.
    #[prost(message, optional, tag = "8")]
    pub linux: Option<LinuxPodSandbox>,
    /// The sandbox's pid.
    #[prost(uint32, tag = "9")]
    pub pid: u32,
}

/// Linux-specific pod data.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct LinuxPodSandbox {
    /// Pod overhead resources.
    #[prost(message, optional, tag = "1")]
    pub pod_overhead: Option<LinuxResources>,
    /// Pod resources (sum of its containers').
    #[prost(message, optional, tag = "2")]
    pub pod_resources: Option<LinuxResources>,
    /// The pod's cgroup parent.
    #[prost(string, tag = "3")]
    pub cgroup_parent: String,
    /// The sandbox's cgroups path.
    #[prost(string, tag = "4")]
    pub cgroups_path: String,
    /// The sandbox's namespaces.
    #[prost(message, repeated, tag = "5")]
    pub namespaces: Vec<LinuxNamespace>,
    /// The sandbox's resources.
    #[prost(message, optional, tag = "6")]
    pub resources: Option<LinuxResources>,
}

/// A container, as much of it as a plugin is told.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Container {
    /// The runtime's container id.
    #[prost(string, tag = "1")]
    pub id: String,
    /// Id of the container's pod sandbox.
    #[prost(string, tag = "2")]
    pub pod_sandbox_id: String,
    /// Container name.
    #[prost(string, tag = "3")]
    pub name: String,
    /// Container state.
    #[prost(enumeration = "ContainerState", tag = "4")]
    pub state: i32,
    /// Container labels.
    #[prost(btree_map = "string, string", tag = "5")]
    pub labels: BTreeMap<String, String>,
    /// Container annotations.
    #[prost(btree_map = "string, string", tag = "6")]
    pub annotations: BTreeMap<String, String>,
    /// The process's arguments.
    #[prost(string, repeated, tag = "7")]
    pub args: Vec<String>,
    /// The process's environment, `KEY=VALUE` each.
    #[prost(string, repeated, tag = "8")]
    pub env: Vec<String>,
    /// The container's mounts.
    #[prost(message, repeated, tag = "9")]
    pub mounts: Vec<Mount>,
    /// Linux-specific container data.
    #[prost(message, optional, tag = "11")]
    pub linux: Option<LinuxContainer>,
    /// The container's pid (0 before it starts).
    #[prost(uint32, tag = "12")]
    pub pid: u32,
}

/// The states of a container.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, ::prost::Enumeration)]
#[repr(i32)]
pub enum ContainerState {
    /// Unknown.
    ContainerUnknown = 0,
    /// Created, not started.
    ContainerCreated = 1,
    /// Paused.
    ContainerPaused = 2,
    /// Running.
    ContainerRunning = 3,
    /// Stopped.
    ContainerStopped = 4,
}

/// A container mount.
#[derive(Clone, PartialEq, Eq, ::prost::Message)]
pub struct Mount {
    /// Path inside the container.
    #[prost(string, tag = "1")]
    pub destination: String,
    /// Filesystem type (`bind` for a bind mount).
    #[prost(string, tag = "2")]
    pub r#type: String,
    /// Source path on the host (or device).
    #[prost(string, tag = "3")]
    pub source: String,
    /// Mount options.
    #[prost(string, repeated, tag = "4")]
    pub options: Vec<String>,
}

/// Linux-specific container data.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct LinuxContainer {
    /// The container's namespaces.
    #[prost(message, repeated, tag = "1")]
    pub namespaces: Vec<LinuxNamespace>,
    /// The container's devices.
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<LinuxDevice>,
    /// The container's resources.
    #[prost(message, optional, tag = "3")]
    pub resources: Option<LinuxResources>,
    /// The container's OOM score adjustment.
    #[prost(message, optional, tag = "4")]
    pub oom_score_adj: Option<OptionalInt>,
    /// The container's cgroups path.
    #[prost(string, tag = "5")]
    pub cgroups_path: String,
}

/// A Linux namespace of a container or pod.
#[derive(Clone, PartialEq, Eq, ::prost::Message)]
pub struct LinuxNamespace {
    /// Namespace type (`pid`, `network`, ...).
    #[prost(string, tag = "1")]
    pub r#type: String,
    /// Path of the namespace to join (empty: a new one).
    #[prost(string, tag = "2")]
    pub path: String,
}

/// A device node in a container.
#[derive(Clone, PartialEq, Eq, ::prost::Message)]
pub struct LinuxDevice {
    /// Path inside the container.
    #[prost(string, tag = "1")]
    pub path: String,
    /// Device type (`c`, `b`, ...).
    #[prost(string, tag = "2")]
    pub r#type: String,
    /// Major number.
    #[prost(int64, tag = "3")]
    pub major: i64,
    /// Minor number.
    #[prost(int64, tag = "4")]
    pub minor: i64,
    /// File mode, if set.
    #[prost(message, optional, tag = "5")]
    pub file_mode: Option<OptionalFileMode>,
    /// Owner uid, if set.
    #[prost(message, optional, tag = "6")]
    pub uid: Option<OptionalUInt32>,
    /// Owner gid, if set.
    #[prost(message, optional, tag = "7")]
    pub gid: Option<OptionalUInt32>,
}

/// A container's (Linux) resources.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct LinuxResources {
    /// Memory resources.
    #[prost(message, optional, tag = "1")]
    pub memory: Option<LinuxMemory>,
    /// CPU resources: quota, period, shares, cpuset.
    #[prost(message, optional, tag = "2")]
    pub cpu: Option<LinuxCpu>,
    /// Block I/O class, if set.
    #[prost(message, optional, tag = "4")]
    pub blockio_class: Option<OptionalString>,
    /// RDT class, if set.
    #[prost(message, optional, tag = "5")]
    pub rdt_class: Option<OptionalString>,
    /// Unified (cgroup v2) settings.
    #[prost(btree_map = "string, string", tag = "6")]
    pub unified: BTreeMap<String, String>,
}

/// Memory resources.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct LinuxMemory {
    /// Memory limit in bytes.
    #[prost(message, optional, tag = "1")]
    pub limit: Option<OptionalInt64>,
    /// Memory reservation in bytes.
    #[prost(message, optional, tag = "2")]
    pub reservation: Option<OptionalInt64>,
    /// Memory + swap limit in bytes.
    #[prost(message, optional, tag = "3")]
    pub swap: Option<OptionalInt64>,
}

/// CPU resources (NRI's `LinuxCPU`).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct LinuxCpu {
    /// CPU shares (weight).
    #[prost(message, optional, tag = "1")]
    pub shares: Option<OptionalUInt64>,
    /// CFS quota in microseconds per period.
    #[prost(message, optional, tag = "2")]
    pub quota: Option<OptionalInt64>,
    /// CFS period in microseconds.
    #[prost(message, optional, tag = "3")]
    pub period: Option<OptionalUInt64>,
    /// Realtime runtime in microseconds.
    #[prost(message, optional, tag = "4")]
    pub realtime_runtime: Option<OptionalInt64>,
    /// Realtime period in microseconds.
    #[prost(message, optional, tag = "5")]
    pub realtime_period: Option<OptionalUInt64>,
    /// The cpuset's CPUs (`0-3,8`); empty: unchanged.
    #[prost(string, tag = "6")]
    pub cpus: String,
    /// The cpuset's memory nodes; empty: unchanged.
    #[prost(string, tag = "7")]
    pub mems: String,
}

/// The changes a plugin asks for to a container being created.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ContainerAdjustment {
    /// Annotations to add (a key `-KEY` removes `KEY`).
    #[prost(btree_map = "string, string", tag = "2")]
    pub annotations: BTreeMap<String, String>,
    /// Mounts to add (a destination `-PATH` removes the mount at `PATH`).
    #[prost(message, repeated, tag = "3")]
    pub mounts: Vec<Mount>,
    /// Environment variables to set (a key `-KEY` removes `KEY`).
    #[prost(message, repeated, tag = "4")]
    pub env: Vec<KeyValue>,
    /// Linux-specific adjustments.
    #[prost(message, optional, tag = "6")]
    pub linux: Option<LinuxContainerAdjustment>,
}

/// Linux-specific adjustments of a container being created.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct LinuxContainerAdjustment {
    /// Devices to add.
    #[prost(message, repeated, tag = "1")]
    pub devices: Vec<LinuxDevice>,
    /// Resources to set.
    #[prost(message, optional, tag = "2")]
    pub resources: Option<LinuxResources>,
    /// Cgroups path to set.
    #[prost(string, tag = "3")]
    pub cgroups_path: String,
}

/// An update a plugin asks for to an existing container.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ContainerUpdate {
    /// The container's id.
    #[prost(string, tag = "1")]
    pub container_id: String,
    /// Linux-specific updates.
    #[prost(message, optional, tag = "2")]
    pub linux: Option<LinuxContainerUpdate>,
    /// Whether the runtime may ignore a failure to apply it.
    #[prost(bool, tag = "3")]
    pub ignore_failure: bool,
}

/// Linux-specific updates of an existing container.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct LinuxContainerUpdate {
    /// Resources to update to.
    #[prost(message, optional, tag = "1")]
    pub resources: Option<LinuxResources>,
}

/// A request to evict (stop) a container.
#[derive(Clone, PartialEq, Eq, ::prost::Message)]
pub struct ContainerEviction {
    /// The container's id.
    #[prost(string, tag = "1")]
    pub container_id: String,
    /// Human-readable reason.
    #[prost(string, tag = "2")]
    pub reason: String,
}

/// A key and a value (an environment variable in an adjustment).
#[derive(Clone, PartialEq, Eq, ::prost::Message)]
pub struct KeyValue {
    /// The key.
    #[prost(string, tag = "1")]
    pub key: String,
    /// The value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// An optional string.
#[derive(Clone, PartialEq, Eq, ::prost::Message)]
pub struct OptionalString {
    /// The value.
    #[prost(string, tag = "1")]
    pub value: String,
}

/// An optional signed integer (NRI's `OptionalInt`).
#[derive(Clone, Copy, PartialEq, Eq, ::prost::Message)]
pub struct OptionalInt {
    /// The value.
    #[prost(int64, tag = "1")]
    pub value: i64,
}

/// An optional 64-bit signed integer.
#[derive(Clone, Copy, PartialEq, Eq, ::prost::Message)]
pub struct OptionalInt64 {
    /// The value.
    #[prost(int64, tag = "1")]
    pub value: i64,
}

/// An optional 64-bit unsigned integer (NRI's `OptionalUInt64`).
#[derive(Clone, Copy, PartialEq, Eq, ::prost::Message)]
pub struct OptionalUInt64 {
    /// The value.
    #[prost(uint64, tag = "1")]
    pub value: u64,
}

/// An optional 32-bit unsigned integer (NRI's `OptionalUInt32`).
#[derive(Clone, Copy, PartialEq, Eq, ::prost::Message)]
pub struct OptionalUInt32 {
    /// The value.
    #[prost(uint32, tag = "1")]
    pub value: u32,
}

/// An optional file mode.
#[derive(Clone, Copy, PartialEq, Eq, ::prost::Message)]
pub struct OptionalFileMode {
    /// The mode bits.
    #[prost(uint32, tag = "1")]
    pub value: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// Encodes `m`, decodes the bytes back, and checks both ways agree.
    fn round_trip<M: Message + Default + PartialEq + std::fmt::Debug>(m: &M) -> Vec<u8> {
        let bytes = m.encode_to_vec();
        let back = M::decode(bytes.as_slice()).expect("decode");
        assert_eq!(&back, m);
        bytes
    }

    #[test]
    fn register_request_bytes_are_nris_field_numbers() {
        let m = RegisterPluginRequest {
            plugin_name: "cpuplan".into(),
            plugin_idx: "10".into(),
        };
        // field 1 (string): tag 0x0a; field 2 (string): tag 0x12
        let mut want = vec![0x0a, 7];
        want.extend_from_slice(b"cpuplan");
        want.extend_from_slice(&[0x12, 2]);
        want.extend_from_slice(b"10");
        assert_eq!(round_trip(&m), want);
    }

    #[test]
    fn configure_response_events_is_field_two() {
        let m = ConfigureResponse { events: 0x608 };
        // field 2 varint: tag 0x10; 0x608 = 0b110_0000_1000 -> 0x88 0x0c
        assert_eq!(round_trip(&m), vec![0x10, 0x88, 0x0c]);
    }

    #[test]
    fn adjustment_bytes_are_nris_field_numbers() {
        let mut a = ContainerAdjustment::default();
        a.annotations.insert("a".into(), "b".into());
        a.env.push(KeyValue {
            key: "K".into(),
            value: "V".into(),
        });
        a.linux = Some(LinuxContainerAdjustment {
            resources: Some(LinuxResources {
                cpu: Some(LinuxCpu {
                    cpus: "1-2".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        let want = vec![
            // annotations (2): map entry {1: "a", 2: "b"}
            0x12, 6, 0x0a, 1, b'a', 0x12, 1, b'b', //
            // env (4): KeyValue {1: "K", 2: "V"}
            0x22, 6, 0x0a, 1, b'K', 0x12, 1, b'V', //
            // linux (6) { resources (2) { cpu (2) { cpus (6): "1-2" } } }
            0x32, 9, 0x12, 7, 0x12, 5, 0x32, 3, b'1', b'-', b'2',
        ];
        assert_eq!(round_trip(&a), want);
    }

    #[test]
    fn state_change_event_bytes() {
        let m = StateChangeEvent {
            event: Event::RemoveContainer as i32,
            pod: Some(PodSandbox {
                id: "p".into(),
                ..Default::default()
            }),
            container: Some(Container {
                id: "c".into(),
                state: ContainerState::ContainerStopped as i32,
                ..Default::default()
            }),
        };
        let want = vec![
            0x08, 11, // event (1) = REMOVE_CONTAINER
            0x12, 3, 0x0a, 1, b'p', // pod (2) { id (1) }
            0x1a, 5, 0x0a, 1, b'c', 0x20, 4, // container (3) { id (1), state (4) = STOPPED }
        ];
        assert_eq!(round_trip(&m), want);
    }

    #[test]
    fn synchronize_and_container_fields_round_trip() {
        let mut pod = PodSandbox {
            id: "sb".into(),
            name: "demo".into(),
            uid: "u".into(),
            namespace: "default".into(),
            runtime_handler: "runc".into(),
            pid: 42,
            ..Default::default()
        };
        pod.annotations.insert("x".into(), "y".into());
        pod.labels.insert("l".into(), "v".into());
        pod.linux = Some(LinuxPodSandbox {
            cgroup_parent: "/kubepods".into(),
            ..Default::default()
        });
        let ctr = Container {
            id: "c1".into(),
            pod_sandbox_id: "sb".into(),
            name: "srv".into(),
            state: ContainerState::ContainerRunning as i32,
            args: vec!["sh".into()],
            env: vec!["PATH=/bin".into()],
            mounts: vec![Mount {
                destination: "/d".into(),
                r#type: "bind".into(),
                source: "/s".into(),
                options: vec!["ro".into()],
            }],
            linux: Some(LinuxContainer {
                cgroups_path: "/c1".into(),
                resources: Some(LinuxResources {
                    cpu: Some(LinuxCpu {
                        quota: Some(OptionalInt64 { value: 50_000 }),
                        period: Some(OptionalUInt64 { value: 100_000 }),
                        cpus: "0-3".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                devices: vec![LinuxDevice {
                    path: "/dev/nvidia0".into(),
                    r#type: "c".into(),
                    major: 195,
                    minor: 0,
                    ..Default::default()
                }],
                ..Default::default()
            }),
            pid: 7,
            ..Default::default()
        };
        let req = SynchronizeRequest {
            pods: vec![pod],
            containers: vec![ctr],
            more: true,
        };
        let bytes = round_trip(&req);
        // `more` (field 3, varint true) is the last field written
        assert_eq!(&bytes[bytes.len() - 2..], &[0x18, 1]);
        assert_eq!(
            round_trip(&CreateContainerRequest {
                pod: req.pods.first().cloned(),
                container: req.containers.first().cloned(),
            })
            .len(),
            bytes.len() - 2
        );
    }

    #[test]
    fn unknown_fields_from_newer_runtimes_are_skipped() {
        // ConfigureRequest with config (1) = "c" and an unknown field 6 (string "v1")
        let bytes = [0x0a, 1, b'c', 0x32, 2, b'v', b'1'];
        let m = ConfigureRequest::decode(&bytes[..]).expect("decode");
        assert_eq!(m.config, "c");
    }
}
