//! NVIDIA GPUs as the driver lists them in `/proc/driver/nvidia/gpus/<pci>/information`.

use std::path::{Path, PathBuf};

use crate::devices::pci::{normalize_pci, pci_sort_key};
use crate::devices::DeviceError;

/// One NVIDIA GPU of the host: its PCI address, device minor (`/dev/nvidia<minor>`) and UUID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvidiaGpu {
    /// PCI address, lowercase with a 4-digit domain.
    pub address: String,
    /// `Device Minor`.
    pub minor: Option<u32>,
    /// `GPU UUID` (`GPU-…`).
    pub uuid: Option<String>,
}

/// `Device Minor` and `GPU UUID` of one information file's text; a missing or bad minor is an error naming `path`.
pub fn parse_information(path: &Path, text: &str) -> Result<(u32, Option<String>), DeviceError> {
    let mut minor = None;
    let mut uuid = None;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key.trim() {
            "Device Minor" => {
                minor = Some(value.parse::<u32>().map_err(|_| DeviceError::Info {
                    path: path.to_path_buf(),
                    message: format!("Device Minor {value:?} is not a number"),
                })?)
            }
            "GPU UUID" => uuid = Some(value.to_string()),
            _ => {}
        }
    }
    let minor = minor.ok_or_else(|| DeviceError::Info {
        path: path.to_path_buf(),
        message: "no \"Device Minor\" line".into(),
    })?;
    Ok((minor, uuid))
}

/// The host's NVIDIA GPUs under `topology_root`, in PCI address order; empty without the driver.
pub fn nvidia_gpus(topology_root: &Path) -> Result<Vec<NvidiaGpu>, DeviceError> {
    let dir = cpuplan::fsutil::under(topology_root, "/proc/driver/nvidia/gpus");
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(DeviceError::Read { path: dir, source }),
    };
    let mut gpus = Vec::new();
    for e in entries {
        let e = e.map_err(|source| DeviceError::Read {
            path: dir.clone(),
            source,
        })?;
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(address) = normalize_pci(&name) else {
            continue;
        };
        let path: PathBuf = e.path().join("information");
        let text = std::fs::read_to_string(&path).map_err(|source| DeviceError::Read {
            path: path.clone(),
            source,
        })?;
        let (minor, uuid) = parse_information(&path, &text)?;
        gpus.push(NvidiaGpu {
            address,
            minor: Some(minor),
            uuid,
        });
    }
    gpus.sort_by_key(|g| pci_sort_key(&g.address));
    Ok(gpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ: \t\t 150\nGPU UUID: \t GPU-5d1b2c3e-0000-4a6f-9c1d-3b0000000000\nVideo BIOS: \t 96.00.99.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t 0000:3b:00.0\nDevice Minor: \t 3\nGPU Excluded:\t No\n";

    #[test]
    fn parses_the_driver_format() {
        let (minor, uuid) = parse_information(Path::new("/i"), INFO).unwrap();
        assert_eq!(minor, 3);
        assert_eq!(
            uuid.as_deref(),
            Some("GPU-5d1b2c3e-0000-4a6f-9c1d-3b0000000000")
        );
    }

    #[test]
    fn a_missing_or_bad_minor_names_the_file() {
        let e = parse_information(Path::new("/x/information"), "Model: A\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/x/information") && e.contains("Device Minor"),
            "{e}"
        );
        let e = parse_information(Path::new("/x/information"), "Device Minor: \t x1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"x1\""), "{e}");
    }
}
