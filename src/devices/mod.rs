//! STUB (replaced by the devices module on branch h3).
use std::path::Path;

/// A char device number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CharDevice {
    /// Major.
    pub major: i64,
    /// Minor.
    pub minor: i64,
}

/// Stub error.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct DeviceError(pub String);

/// The container's GPUs' PCI addresses in address order, counted once.
pub fn container_gpus(
    topology_root: &Path,
    devices: &[CharDevice],
    visible: Option<&str>,
) -> Result<Vec<String>, DeviceError> {
    let _ = (topology_root, devices, visible);
    todo!()
}
