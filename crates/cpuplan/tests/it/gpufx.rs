//! The GPU seam's tests' fixtures: the fixture host `tests/fixtures/devices/host` and a reader
//! that asks [`cpuplan::gpu::Inventory`] as `src/read/gpus.rs` does.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use cpuplan::gpu::{CharDevice, DeviceError, Inventory, Named, Resolved, Vendor};

/// The fixture host: 8 NVIDIA H100s, an AMD GPU and a few other char devices.
pub fn host() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/devices/host")
}

pub const ADDRS: [&str; 8] = [
    "0000:18:00.0",
    "0000:2a:00.0",
    "0000:3a:00.0",
    "0000:5d:00.0",
    "0000:9a:00.0",
    "0000:ab:00.0",
    "0000:ba:00.0",
    "0000:db:00.0",
];
pub const UUID_3A: &str = "GPU-9c41e2b7-5f08-4d1a-b6c3-e8a27d4f1033";
pub const AMD: &str = "0000:0a:00.0";

pub fn c(major: i64, minor: i64) -> CharDevice {
    CharDevice {
        major,
        minor,
        path: format!("/dev/char-{major}-{minor}"),
    }
}

/// The GPUs `devices` (as a spec's `linux.devices`, where an unlisted node is an error) and
/// `visible` name under `root`, in PCI address order, each once, as a reader asks the seam.
pub fn resolve(
    root: &Path,
    devices: &[CharDevice],
    visible: Option<&str>,
) -> Result<Vec<String>, DeviceError> {
    Ok(resolve_noting(root, devices, visible)?.gpus)
}

/// [`resolve`] with the notes of what names no GPU (the env's and the devices').
pub fn resolve_noting(
    root: &Path,
    devices: &[CharDevice],
    visible: Option<&str>,
) -> Result<Resolved, DeviceError> {
    let mut inventory = Inventory::new(root);
    let mut found = Resolved::default();
    let mut nvidia = false;
    for d in devices {
        match inventory.device(d)? {
            Named::Gpu { address, vendor }
            | Named::Part {
                address, vendor, ..
            } => {
                nvidia |= vendor == Vendor::Nvidia;
                found.gpus.push(address);
            }
            Named::Unlisted(e) => return Err(e),
            Named::Unplaced(why) => found.notes.push(why),
            Named::NotGpu { .. } | Named::Nothing => {}
        }
    }
    let env = inventory.visible(visible, nvidia)?;
    found.gpus.extend(env.gpus);
    found.notes.extend(env.notes);
    found.gpus.sort_by_key(|a| cpuplan::PciAddress::parse(a));
    found.gpus.dedup();
    Ok(found)
}

/// The notes `visible` gets on the fixture host with `devices`.
pub fn notes(devices: &[CharDevice], visible: Option<&str>) -> Vec<String> {
    resolve_noting(&host(), devices, visible).unwrap().notes
}

/// The GPUs of a container with these devices and this `NVIDIA_VISIBLE_DEVICES`.
pub fn gpus(devices: &[CharDevice], visible: Option<&str>) -> Vec<String> {
    resolve(&host(), devices, visible).unwrap()
}

pub fn err(devices: &[CharDevice], visible: Option<&str>) -> DeviceError {
    resolve(&host(), devices, visible).unwrap_err()
}

/// The one note `visible` gets with `devices`, which must resolve to no GPU.
pub fn one_note(devices: &[CharDevice], visible: &str) -> String {
    let found = resolve_noting(&host(), devices, Some(visible)).unwrap();
    assert_eq!(found.notes.len(), 1, "{visible}: {:?}", found.notes);
    found.notes[0].clone()
}
