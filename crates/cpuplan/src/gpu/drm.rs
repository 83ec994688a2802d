//! DRM devices (AMD, Intel) and every other char device sysfs places on a PCI function.
//!
//! `/dev/dri/cardN` and `/dev/dri/renderDN` (major 226) link from `/sys/dev/char/226:N` to
//! their PCI function; such a device names a GPU when the function's base class is display
//! (0x03) or processing accelerator (0x12), so an RDMA device of a NIC beside a GPU does not.
//! An Intel SR-IOV VF is a PCI function of its own (with its own `numa_node` and CPUs): its
//! nodes name the VF. AMD's `/dev/kfd` has no PCI parent: it names no GPU by itself (its
//! render nodes do). An MI300 partition's nodes sit on a platform device, `amdgpu_xcp_<n>`
//! (`amdgpu_xcp.<n>` on older kernels), not on the GPU: they are placed on their PCI GPU
//! through the [`super::kfd`] topology by render minor, or named in a note where it cannot.

use std::path::Path;

use super::kfd::Topology;
use super::sysfs_char::pci_function;
use super::{char_device_parent, CharDevice, DeviceError, Named, Vendor};

/// The DRM char major: card nodes (minors 0–63) and render nodes (128–191).
pub const DRM_MAJOR: i64 = 226;

/// The first render node minor (`renderD128`).
const FIRST_RENDER_MINOR: i64 = 128;

/// The PCI base classes of GPUs: display controllers and processing accelerators.
pub const GPU_CLASSES: [u8; 2] = [0x03, 0x12];

/// Whether `/dev/dri/<name>` is named as a DRM node: `card<N>` or `renderD<N>`.
pub fn is_node_name(name: &str) -> bool {
    let digits = name
        .strip_prefix("renderD")
        .or_else(|| name.strip_prefix("card"));
    digits.is_some_and(|n| !n.is_empty() && n.len() <= 4 && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether a char device `/dev/dri/<name>` of major `major` is a DRM node.
pub fn is_node(name: &str, major: i64) -> bool {
    major == DRM_MAJOR && is_node_name(name)
}

/// The name of an AMD partition's platform device (`amdgpu_xcp_3`, `amdgpu_xcp.3`), if `dir` is one.
pub fn partition_name(dir: &Path) -> Option<&str> {
    let name = dir.file_name()?.to_str()?;
    let n = name
        .strip_prefix("amdgpu_xcp_")
        .or_else(|| name.strip_prefix("amdgpu_xcp."))?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then_some(name)
}

/// What `d` (of any major but NVIDIA's) names, read under `topology_root`.
pub(crate) fn device(
    topology_root: &Path,
    kfd: &mut Topology,
    d: &CharDevice,
) -> Result<Named, DeviceError> {
    let Some(parent) = char_device_parent(topology_root, d.major, d.minor)? else {
        return Ok(Named::Nothing);
    };
    if let Some(function) = pci_function(parent.clone()) {
        return Ok(match crate::gpus::pci_base_class(&function.dir)? {
            Some(class) if GPU_CLASSES.contains(&class) => Named::Gpu {
                address: function.address,
                vendor: Vendor::Drm,
            },
            class => Named::NotGpu {
                address: function.address,
                class,
            },
        });
    }
    let Some(name) = partition_name(&parent) else {
        return Ok(Named::Nothing);
    };
    let node = format!(
        "{} ({}:{}) is partition {name}",
        crate::quote::quoted(&d.path),
        d.major,
        d.minor
    );
    let placed = render_minor(topology_root, d)
        .and_then(|minor| kfd.gpu_of_render_minor(topology_root, minor));
    Ok(match placed {
        Ok(address) => Named::Part {
            address,
            vendor: Vendor::Drm,
            part: format!("partition {name}"),
        },
        Err(why) => Named::Unplaced(format!("{node}, not placed on a PCI GPU: {why}")),
    })
}

/// The render minor of a partition's node `d`: its own for a render node, else that of the
/// render node beside it in its device's `drm` directory.
fn render_minor(topology_root: &Path, d: &CharDevice) -> Result<i64, String> {
    if d.major == DRM_MAJOR && d.minor >= FIRST_RENDER_MINOR {
        return Ok(d.minor);
    }
    let link = topology_root.join(format!("sys/dev/char/{}:{}", d.major, d.minor));
    let class_dir = std::fs::canonicalize(&link).map_err(|e| format!("{}: {e}", link.display()))?;
    let drm = class_dir
        .parent()
        .ok_or_else(|| format!("{} has no parent", class_dir.display()))?;
    let entries = std::fs::read_dir(drm).map_err(|e| format!("{}: {e}", drm.display()))?;
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let minor = name
                .to_str()?
                .strip_prefix("renderD")?
                .parse::<i64>()
                .ok()?;
            Some(minor)
        })
        .min()
        .ok_or_else(|| format!("no render node beside it in {}", drm.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drm_node_names() {
        for yes in ["card0", "card12", "renderD128", "renderD191"] {
            assert!(is_node_name(yes), "{yes}");
        }
        for no in [
            "card",
            "renderD",
            "cardx",
            "render128",
            "by-path",
            "card00000",
        ] {
            assert!(!is_node_name(no), "{no}");
        }
        assert!(is_node("renderD128", 226) && !is_node("renderD128", 195));
    }

    #[test]
    fn partition_names_of_both_kernels() {
        for (dir, name) in [
            ("/sys/devices/platform/amdgpu_xcp_3", Some("amdgpu_xcp_3")),
            ("/sys/devices/platform/amdgpu_xcp.12", Some("amdgpu_xcp.12")),
            ("/sys/devices/platform/amdgpu_xcp_", None),
            ("/sys/devices/platform/serial8250", None),
        ] {
            assert_eq!(partition_name(Path::new(dir)), name, "{dir}");
        }
    }
}
