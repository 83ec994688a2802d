//! Char devices that are PCI functions, found through `/sys/dev/char/MAJ:MIN/device`.

use std::path::Path;

use crate::devices::pci::normalize_pci;
use crate::devices::DeviceError;

/// The PCI address of char device `major:minor` under `topology_root`, if `/sys/dev/char/MAJ:MIN/device` leads to a PCI function.
///
/// The links are resolved with the topology root as `/`: their targets are relative
/// (`../../devices/pci0000:00/0000:00:01.0/0000:0a:00.0/drm/renderD128`), and only the last
/// component of the resolved `device` path is taken, so nothing outside sysfs is read.
pub fn char_device_pci(
    topology_root: &Path,
    major: i64,
    minor: i64,
) -> Result<Option<String>, DeviceError> {
    if major < 0 || minor < 0 {
        return Ok(None);
    }
    let link = cpuplan::fsutil::under(
        topology_root,
        format!("/sys/dev/char/{major}:{minor}/device"),
    );
    match std::fs::canonicalize(&link) {
        Ok(target) => {
            if !target.starts_with(topology_root) {
                return Ok(None);
            }
            Ok(target
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| normalize_pci(n).filter(|_| n.contains(':'))))
        }
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(None)
        }
        Err(source) => Err(DeviceError::Read { path: link, source }),
    }
}
