//! DRM devices (AMD, Intel) and every other char device sysfs places on a PCI function.
//!
//! `/dev/dri/cardN` and `/dev/dri/renderDN` (major 226) link from `/sys/dev/char/226:N` to
//! their PCI function; such a device names a GPU when the function's base class is display
//! (0x03) or processing accelerator (0x12), so an RDMA device of a NIC beside a GPU does not.
//! AMD's `/dev/kfd` has no PCI parent: it names no GPU by itself (its render nodes do).

use std::path::Path;

use super::{char_device_function, CharDevice, DeviceError, Named, Vendor};

/// The DRM char major: card nodes (minors 0–63) and render nodes (128–191).
pub const DRM_MAJOR: i64 = 226;

/// The PCI base classes of GPUs: display controllers and processing accelerators.
pub const GPU_CLASSES: [u8; 2] = [0x03, 0x12];

/// What `d` (of any major but NVIDIA's) names, read under `topology_root`.
pub(crate) fn device(topology_root: &Path, d: &CharDevice) -> Result<Named, DeviceError> {
    let Some(function) = char_device_function(topology_root, d.major, d.minor)? else {
        return Ok(Named::Nothing);
    };
    Ok(match crate::gpus::pci_base_class(&function.dir)? {
        Some(class) if GPU_CLASSES.contains(&class) => Named::Gpu {
            address: function.address,
            vendor: Vendor::Drm,
        },
        class => Named::NotGpu {
            address: function.address,
            class,
        },
    })
}
