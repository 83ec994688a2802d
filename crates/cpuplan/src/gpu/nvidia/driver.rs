//! The host's NVIDIA GPUs as the driver lists them in `/proc/driver/nvidia/gpus/<pci>/information`.

use std::io::ErrorKind;
use std::path::Path;

use crate::fsutil::read_file;
use crate::gpu::DeviceError;
use crate::pci::PciAddress;

/// Where the NVIDIA driver lists its GPUs, one directory per PCI address.
pub const NVIDIA_GPUS_DIR: &str = "proc/driver/nvidia/gpus";

/// One NVIDIA GPU: its PCI address, device minor (`/dev/nvidia<minor>`) and uuid.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NvidiaGpu {
    /// PCI address, lowercase `0000:2a:00.0`.
    pub address: String,
    /// `Device Minor` of the information file: N of `/dev/nvidiaN`.
    pub minor: Option<u32>,
    /// `GPU UUID` of the information file, `GPU-` and lowercase hex; `None` where the driver shows none.
    pub uuid: Option<String>,
}

/// The PCI addresses of the host's NVIDIA GPUs, in address order, from the names of the
/// driver's directories alone (no `information` file is read); empty without the driver.
pub fn nvidia_gpu_addresses(topology_root: &Path) -> Result<Vec<String>, DeviceError> {
    Ok(listing(topology_root)?
        .into_iter()
        .map(|(a, _)| a)
        .collect())
}

/// Each GPU directory of the driver: its normalized address and its path, in address order.
fn listing(topology_root: &Path) -> Result<Vec<(String, std::path::PathBuf)>, DeviceError> {
    let dir = topology_root.join(NVIDIA_GPUS_DIR);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
            return Ok(Vec::new())
        }
        Err(e) => return Err(DeviceError::io(&dir)(e)),
    };
    let mut addresses = Vec::new();
    for entry in entries {
        let entry = entry.map_err(DeviceError::io(&dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(address) = PciAddress::canonical(&name) else {
            return Err(DeviceError::malformed(
                entry.path(),
                "a GPU directory not named by a PCI address",
                name,
            ));
        };
        addresses.push((address, entry.path()));
    }
    addresses.sort_by_key(|(a, _)| PciAddress::parse(a));
    Ok(addresses)
}

/// The host's NVIDIA GPUs (`<topology_root>/proc/driver/nvidia/gpus/*/information`), in PCI address order.
pub fn nvidia_gpus(topology_root: &Path) -> Result<Vec<NvidiaGpu>, DeviceError> {
    let mut gpus = Vec::new();
    for (address, dir) in listing(topology_root)? {
        let path = dir.join("information");
        let text = read_information(&path)?;
        let (minor, uuid) = parse_information(&path, &text)?;
        gpus.push(NvidiaGpu {
            address,
            minor: Some(minor),
            uuid,
        });
    }
    Ok(gpus)
}

/// The most bytes of an `information` file read (the driver writes about 500).
const MAX_INFORMATION: usize = 64 << 10;

/// An `information` file's text, read bounded and without blocking.
fn read_information(path: &Path) -> Result<String, DeviceError> {
    read_file(path, MAX_INFORMATION)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .map_err(DeviceError::io(path))
}

/// The `Device Minor` (required) and `GPU UUID` of an information file's `Key: value` lines; `path` names it in errors.
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
                let parsed = value
                    .parse::<u32>()
                    .ok()
                    .filter(|_| value.bytes().all(|b| b.is_ascii_digit()));
                minor = Some(parsed.ok_or_else(|| {
                    DeviceError::malformed(
                        path.to_path_buf(),
                        "Device Minor is not a number",
                        value.to_string(),
                    )
                })?);
            }
            "GPU UUID" => uuid = gpu_uuid(value),
            _ => {}
        }
    }
    let minor = minor.ok_or_else(|| {
        DeviceError::malformed(
            path.to_path_buf(),
            "no \"Device Minor:\" line",
            text.to_string(),
        )
    })?;
    Ok((minor, uuid))
}

/// `GPU-<hex and dashes>` with the hex lowercased; `None` for anything else (`??`, `N/A`).
pub(crate) fn gpu_uuid(value: &str) -> Option<String> {
    let rest = strip_prefix_ignore_case(value, "GPU-")?;
    let ok = !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    ok.then(|| format!("GPU-{}", rest.to_ascii_lowercase()))
}

/// `s` without `prefix`, compared without regard to ASCII case.
pub(crate) fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

#[cfg(test)]
mod tests {
    use super::*;

    const H100: &str = "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ: \t\t 123\nGPU UUID: \t GPU-5D8A1B2C-3E4F-5061-7283-94A5B6C7D8E9\nVideo BIOS: \t 96.00.74.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t 0000:18:00.0\nDevice Minor: \t 5\nGPU Excluded:\t No\n";

    #[test]
    fn the_driver_format_parses() {
        let (minor, uuid) = parse_information(Path::new("/x/information"), H100).unwrap();
        assert_eq!(minor, 5);
        assert_eq!(
            uuid.as_deref(),
            Some("GPU-5d8a1b2c-3e4f-5061-7283-94a5b6c7d8e9")
        );
    }

    #[test]
    fn a_missing_or_bad_minor_names_the_file() {
        let path = Path::new("/fx/proc/driver/nvidia/gpus/0000:18:00.0/information");
        let no_minor = H100.replace("Device Minor: \t 5\n", "");
        let e = parse_information(path, &no_minor).unwrap_err().to_string();
        assert!(
            e.contains("0000:18:00.0/information") && e.contains("Device Minor"),
            "{e}"
        );
        for bad in ["-1", "x", "", "4294967296", "+3"] {
            let text = H100.replace("Device Minor: \t 5", &format!("Device Minor: \t {bad}"));
            let e = parse_information(path, &text).unwrap_err().to_string();
            assert!(
                e.contains("information") && e.contains(&format!("{bad:?}")),
                "{e}"
            );
        }
    }

    #[test]
    fn a_uuid_the_driver_does_not_know_is_none() {
        let text = H100.replace("GPU-5D8A1B2C-3E4F-5061-7283-94A5B6C7D8E9", "??");
        assert_eq!(parse_information(Path::new("i"), &text).unwrap(), (5, None));
    }
}
