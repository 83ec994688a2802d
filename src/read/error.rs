//! Why a container's inputs could not be read: the read's problem, kept in
//! [`crate::read::Inputs::problem`]; deciding then falls back to the `off` plan carrying it.

use cpuplan::gpu::DeviceError;

use crate::config::ConfigError;

/// Why a container could not be planned from what was read; under `on_error: allow` it starts
/// with the `off` plan carrying this cause.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The hook config is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A host file (cgroup, proc, sysfs) is unreadable or malformed.
    #[error(transparent)]
    Host(#[from] cpuplan::Error),
    /// A GPU named by the container is not on the host, or a device file is malformed.
    #[error(transparent)]
    Devices(#[from] DeviceError),
    /// A setting from the container that does not parse.
    #[error("{origin}: step_thread_core {} is not off, auto or a cpu number", cpuplan::quoted(.value))]
    Setting {
        /// Annotation or env.
        origin: String,
        /// The value.
        value: String,
    },
    /// A `pool_split` from the container that does not parse.
    #[error("{origin}: pool_split {} is not per-process or off", cpuplan::quoted(.value))]
    PoolSplit {
        /// The annotation.
        origin: String,
        /// The value.
        value: String,
    },
    /// The config's cpus and the live mask share no CPU.
    #[error("the container's mask is empty: linux.resources.cpu.cpus shares no CPU with the process's allowed CPUs")]
    EmptyMask,
}
