//! The GPUs a process sees, as CUDA numbers them (`cuda:0` first): what the shims (the Python
//! package's `cuda:N`) ask inside a container, where the host's view is not theirs.
//!
//! 1. Where a plan names its workers' devices (the hook's plan: the container's GPUs in PCI
//!    address order), those.
//! 2. Else the host's NVIDIA GPUs in PCI address order: the entries of `/proc/driver/nvidia/gpus`
//!    (which the NVIDIA container runtime narrows to the container's GPUs), else the NVIDIA
//!    display-class functions in sysfs; narrowed by `NVIDIA_VISIBLE_DEVICES` (indices, `GPU-`
//!    uuids, PCI bus ids, a MIG form's parent; `all`; `none`, `void` or empty for none), unless
//!    `/proc` already lists exactly as many GPUs as the variable names (the runtime narrowed it).
//! 3. Else none are known (`None`).
//!
//! `CUDA_VISIBLE_DEVICES` then narrows and reorders that list as CUDA does: indices or `GPU-`
//! uuid prefixes, up to the first entry that names no GPU (or one named twice); empty for none.
//! Every file is read under `root`, and a file that cannot be read counts as absent: a process
//! asking where its GPUs are is never failed by the host's files.

use std::collections::BTreeSet;
use std::path::Path;

use super::visible::{parse_id, DeviceId};
use super::NVIDIA_VENDOR;
use crate::fsutil::read_file;
use crate::gpus::pci_devices_dir;
use crate::pci::PciAddress;

/// The most bytes of a small sysfs or procfs file read.
const MAX_FILE: usize = 64 << 10;

/// The GPUs a process sees, as CUDA numbers them (see the module): `plan_devices` the plan's
/// workers' devices (empty without a plan), `nvidia_visible` and `cuda_visible` the process's
/// `NVIDIA_VISIBLE_DEVICES` and `CUDA_VISIBLE_DEVICES` (`None` when unset).
pub fn cuda_gpus(
    root: &Path,
    plan_devices: &[String],
    nvidia_visible: Option<&str>,
    cuda_visible: Option<&str>,
) -> Option<Vec<String>> {
    let base = if plan_devices.is_empty() {
        let proc = proc_gpus(root);
        let from_proc = proc.as_ref().is_some_and(|p| !p.is_empty());
        let listed = match proc {
            Some(p) if !p.is_empty() => p,
            _ => sysfs_gpus(root),
        };
        if listed.is_empty() {
            return None;
        }
        narrow_nvidia(root, listed, from_proc, nvidia_visible)
    } else {
        sorted(plan_devices.iter().map(String::as_str))
    };
    Some(narrow_cuda(root, base, cuda_visible))
}

/// Canonical PCI addresses, deduplicated, in numeric address order (others dropped).
fn sorted<'a>(addresses: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let set: BTreeSet<((u32, u8, u8, u8), String)> = addresses
        .into_iter()
        .filter_map(|a| {
            let canonical = PciAddress::canonical(a)?;
            Some((PciAddress::parse(&canonical)?.key(), canonical))
        })
        .collect();
    set.into_iter().map(|(_, a)| a).collect()
}

/// The GPUs `/proc/driver/nvidia/gpus` lists, in PCI order; `None` without that directory.
fn proc_gpus(root: &Path) -> Option<Vec<String>> {
    let entries = std::fs::read_dir(root.join(super::NVIDIA_GPUS_DIR)).ok()?;
    let names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    Some(sorted(names.iter().map(String::as_str)))
}

/// A small file's text, `None` if it cannot be read.
fn text(path: &Path) -> Option<String> {
    read_file(path, MAX_FILE)
        .ok()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// A sysfs hex id (`0x10de`).
fn hex(path: &Path) -> Option<u32> {
    let t = text(path)?;
    let t = t.trim();
    u32::from_str_radix(t.strip_prefix("0x").unwrap_or(t), 16).ok()
}

/// The NVIDIA functions of the display base class (0x03) in sysfs, in PCI order.
fn sysfs_gpus(root: &Path) -> Vec<String> {
    let dir = pci_devices_dir(root);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| {
            let f = dir.join(name);
            hex(&f.join("vendor")) == Some(NVIDIA_VENDOR)
                && hex(&f.join("class")).is_some_and(|c| c >> 16 == 0x03)
        })
        .collect();
    sorted(names.iter().map(String::as_str))
}

/// Each of `gpus` with its `GPU-` uuid (lower case) where its `information` file gives one.
fn uuids(root: &Path, gpus: &[String]) -> Vec<(String, String)> {
    gpus.iter()
        .filter_map(|a| {
            let t = text(
                &root
                    .join(super::NVIDIA_GPUS_DIR)
                    .join(a)
                    .join("information"),
            )?;
            let uuid = t.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == "GPU UUID" && !v.trim().is_empty()).then(|| v.trim().to_lowercase())
            })?;
            Some((a.clone(), uuid))
        })
        .collect()
}

/// `gpus` narrowed by `NVIDIA_VISIBLE_DEVICES` (see the module).
fn narrow_nvidia(
    root: &Path,
    gpus: Vec<String>,
    from_proc: bool,
    value: Option<&str>,
) -> Vec<String> {
    let Some(value) = value.filter(|v| v.trim() != "all") else {
        return gpus;
    };
    let entries: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    if matches!(value.trim(), "none" | "void") || entries.is_empty() {
        return Vec::new();
    }
    let distinct: BTreeSet<&str> = entries.iter().copied().collect();
    if from_proc && gpus.len() == distinct.len() {
        return gpus; // the NVIDIA runtime already narrowed /proc to the container's GPUs
    }
    let uuids = uuids(root, &gpus);
    let named: Vec<String> = entries
        .iter()
        .filter_map(|e| match parse_id(e)? {
            DeviceId::Pci(a) => gpus.contains(&a).then_some(a),
            DeviceId::Index(i) => gpus.get(i as usize).cloned(),
            DeviceId::Uuid(u) => uuids
                .iter()
                .find(|(_, v)| v.eq_ignore_ascii_case(&u))
                .map(|(a, _)| a.clone()),
            DeviceId::Mig(_) => None,
        })
        .collect();
    sorted(named.iter().map(String::as_str))
}

/// `gpus` as `CUDA_VISIBLE_DEVICES` narrows and orders them (see the module).
fn narrow_cuda(root: &Path, gpus: Vec<String>, value: Option<&str>) -> Vec<String> {
    let Some(value) = value else {
        return gpus;
    };
    let mut uuids: Option<Vec<(String, String)>> = None;
    let mut out: Vec<String> = Vec::new();
    for entry in value.split(',').map(str::trim) {
        let found = if !entry.is_empty() && entry.bytes().all(|b| b.is_ascii_digit()) {
            entry
                .parse::<usize>()
                .ok()
                .and_then(|i| gpus.get(i).cloned())
        } else if entry.to_lowercase().starts_with("gpu-") {
            let prefix = entry.to_lowercase();
            let known = uuids.get_or_insert_with(|| self::uuids(root, &gpus));
            let matches: Vec<&String> = known
                .iter()
                .filter(|(_, u)| u.starts_with(&prefix))
                .map(|(a, _)| a)
                .collect();
            (matches.len() == 1).then(|| matches[0].clone())
        } else {
            None
        };
        match found {
            Some(a) if !out.contains(&a) => out.push(a),
            _ => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_devices_come_first_and_cuda_visible_devices_narrows_them() {
        let root = Path::new("/nonexistent");
        let plan = [
            "0000:2A:00.0".to_string(),
            "0000:18:00.0".into(),
            "junk".into(),
        ];
        assert_eq!(
            cuda_gpus(root, &plan, Some("none"), None).unwrap(),
            ["0000:18:00.0", "0000:2a:00.0"]
        );
        assert_eq!(
            cuda_gpus(root, &plan, None, Some("1,0,7")).unwrap(),
            ["0000:2a:00.0", "0000:18:00.0"]
        );
        assert_eq!(
            cuda_gpus(root, &plan, None, Some("")).unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(cuda_gpus(root, &[], None, None), None, "nothing known");
    }

    #[test]
    fn nvidia_visible_devices_narrows_the_hosts_list_by_any_id_form() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/host");
        let uuid = "GPU-3FA842B9-ce2c-478e-6c95-fe7254322c73"; // 0000:2a:00.0's, in any case
        let got = cuda_gpus(&root, &[], Some(&format!("6,{uuid},0000:9A:00.0")), None);
        assert_eq!(
            got.unwrap(),
            ["0000:2a:00.0", "0000:9a:00.0", "0000:ba:00.0"]
        );
        let got = cuda_gpus(&root, &[], None, Some("GPU-3fa842b9,1"));
        assert_eq!(
            got.unwrap(),
            ["0000:2a:00.0"],
            "a prefix, then a repeat stops"
        );
    }
}
