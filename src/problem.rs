//! A planning problem: anything that stops the hook from planning a container, with its cause.

use crate::config::ConfigError;
use crate::hook::cpuset::CpusetError;
use crate::hook::identity::IdentityError;
use crate::hook::rootfs::RootfsError;
use crate::read::bundle::BundleError;
use cpuplan::gpu::DeviceError;

/// Why a container could not be planned; under `on_error: allow` it starts with the `off` plan carrying this cause.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    /// The hook config is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The bundle config is unusable.
    #[error(transparent)]
    Bundle(#[from] BundleError),
    /// A host file (cgroup, proc, sysfs) is unreadable or malformed.
    #[error(transparent)]
    Host(#[from] cpuplan::Error),
    /// The setting cannot be honoured by the mask.
    #[error(transparent)]
    Plan(#[from] cpuplan::CpuPlanError),
    /// A GPU named by the container is not on the host, or a device file is malformed.
    #[error(transparent)]
    Devices(#[from] DeviceError),
    /// The state's pid is not in the container's own cgroup: nothing is written for it.
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// The cpuset write was refused.
    #[error(transparent)]
    Cpuset(#[from] CpusetError),
    /// The plan files could not be written.
    #[error(transparent)]
    Write(#[from] RootfsError),
    /// A setting from the container that does not parse.
    #[error("{origin}: step_thread_core {} is not off, auto or a cpu number", cpuplan::quoted(.value))]
    Setting {
        /// Annotation or env.
        origin: String,
        /// The value.
        value: String,
    },
    /// The config's cpus and the live mask share no CPU.
    #[error("the container's mask is empty: linux.resources.cpu.cpus shares no CPU with the process's allowed CPUs")]
    EmptyMask,
}
