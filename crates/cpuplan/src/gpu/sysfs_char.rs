//! The PCI function behind a char device, from `/sys/dev/char/MAJ:MIN/device`: how every
//! vendor but NVIDIA (whose nodes sysfs does not place) maps a device node to its GPU.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::DeviceError;
use crate::pci::PciAddress;

/// The PCI address of the device behind char device `major:minor`, or `None` where sysfs places it on no PCI function.
///
/// `<topology_root>/sys/dev/char/MAJ:MIN` links to the device's class directory (such as
/// `.../0000:0a:00.0/drm/renderD128`), whose `device` links to its parent device; that is
/// a GPU if the link ends in a PCI address. A device sysfs does not know, or one without
/// a parent (`/dev/null`, `/dev/nvidia-uvm`), is `None`.
pub fn char_device_pci(
    topology_root: &Path,
    major: i64,
    minor: i64,
) -> Result<Option<String>, DeviceError> {
    Ok(char_device_function(topology_root, major, minor)?.map(|f| f.address))
}

/// A PCI function as sysfs shows it: its canonical address and its directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciFunction {
    /// Its address, `0000:0a:00.0`.
    pub address: String,
    /// Its sysfs directory (where `class` and `vendor` are).
    pub dir: std::path::PathBuf,
}

/// The PCI function behind char device `major:minor` ([`char_device_pci`]), with its directory.
pub fn char_device_function(
    topology_root: &Path,
    major: i64,
    minor: i64,
) -> Result<Option<PciFunction>, DeviceError> {
    Ok(char_device_parent(topology_root, major, minor)?.and_then(pci_function))
}

/// `dir` as a PCI function, if its name is a PCI address.
pub(crate) fn pci_function(dir: PathBuf) -> Option<PciFunction> {
    let address = dir
        .file_name()
        .and_then(|name| name.to_str())
        // sysfs names PCI functions in full (`0000:0a:00.0`), never in the short form.
        .filter(|name| name.matches(':').count() == 2)
        .and_then(PciAddress::canonical)?;
    Some(PciFunction { address, dir })
}

/// The sysfs directory of the device behind char device `major:minor` (the target of
/// `/sys/dev/char/MAJ:MIN/device`, links resolved: a PCI function, a platform device such as
/// `amdgpu_xcp_3`), or `None` where sysfs gives it no parent.
pub fn char_device_parent(
    topology_root: &Path,
    major: i64,
    minor: i64,
) -> Result<Option<PathBuf>, DeviceError> {
    if major < 0 || minor < 0 || major > u32::MAX.into() || minor > u32::MAX.into() {
        return Err(DeviceError::Device {
            major,
            minor,
            why: "not a device number".into(),
        });
    }
    let link = topology_root.join(format!("sys/dev/char/{major}:{minor}/device"));
    match std::fs::canonicalize(&link) {
        Ok(target) => Ok(Some(target)),
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => Ok(None),
        Err(e) => Err(DeviceError::io(&link)(e)),
    }
}
