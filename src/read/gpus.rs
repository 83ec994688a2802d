//! The container's GPUs: everything in its devices, its `/dev` and `NVIDIA_VISIBLE_DEVICES`
//! that names one, counted once, each with every source that names it.
//!
//! Which GPU a device or an env names is the vendor seam's ([`cpuplan::gpu::Inventory`]); this
//! module tags each device with its source (the spec's `linux.devices`, the runtime's or the
//! tenant's device node), keeps what names no GPU as a note, and merges the GPUs in PCI
//! address order (the worker order).

use cpuplan::gpu::{CharDevice, DeviceError, Inventory, Named, Vendor};
use cpuplan::PciAddress;

use crate::config::GpuSource;
use crate::read::nodes::Node;

/// One of the container's GPUs: its PCI address and what named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// PCI address, lowercase `0000:2a:00.0`.
    pub address: String,
    /// Every source that names it, in [`GpuSource`] order.
    pub sources: Vec<GpuSource>,
}

/// The container's GPUs and what was left out, with why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    /// Its GPUs in PCI address order, each counted once with every source that names it.
    pub gpus: Vec<Gpu>,
    /// Devices that name no GPU (a NIC's RDMA device, a node the driver does not list), and why.
    pub notes: Vec<String>,
}

/// The container's GPUs in PCI address order, each counted once with every source that names
/// it, asked of `inventory`.
///
/// `devices` are the char devices of `linux.devices`, `nodes` the GPU device nodes present in
/// its `/dev` (those not the runtime's name their GPUs as [`GpuSource::TenantNode`]); `visible`
/// is `NVIDIA_VISIBLE_DEVICES` from `process.env` (`None` when unset). A device of another PCI
/// class than display or processing accelerator is no GPU (an RDMA device of a NIC beside a
/// GPU): it is left out with a note.
pub fn container_gpus(
    inventory: &mut Inventory,
    devices: &[CharDevice],
    nodes: &[Node],
    visible: Option<&str>,
) -> Result<Found, DeviceError> {
    let mut found: Vec<(String, GpuSource)> = Vec::new();
    let mut notes = Vec::new();
    let mut nvidia_named = false;

    let tagged = devices
        .iter()
        .map(|d| (d, GpuSource::Devices))
        .chain(nodes.iter().map(|n| match n.untrusted {
            None => (&n.device, GpuSource::Nodes),
            Some(_) => (&n.device, GpuSource::TenantNode),
        }));
    for (d, source) in tagged {
        match inventory.device(d)? {
            Named::Gpu { address, vendor } => {
                nvidia_named |= vendor == Vendor::Nvidia;
                found.push((address, source));
            }
            Named::Nothing => {}
            Named::NotGpu { address, class } => notes.push(format!(
                "{} {}:{} ({}) is PCI function {address} of class {}, not a GPU: ignored",
                source,
                d.major,
                d.minor,
                crate::logging::escape(&d.path),
                class.map_or_else(|| "unknown".into(), |c| format!("0x{c:02x}"))
            )),
            // The operator's spec names a GPU the driver does not have: the read fails.
            Named::Unlisted(e) if source == GpuSource::Devices => return Err(e),
            Named::Unlisted(_) => notes.push(format!(
                "{} is {}:{}, which no GPU of the driver has: ignored",
                crate::logging::escape(&d.path),
                d.major,
                d.minor
            )),
        }
    }
    for address in inventory.visible(visible, nvidia_named)? {
        found.push((address, GpuSource::Env));
    }
    Ok(Found {
        gpus: merge(found),
        notes,
    })
}

/// `found` in PCI address order, one [`Gpu`] per address with its sources in order.
fn merge(mut found: Vec<(String, GpuSource)>) -> Vec<Gpu> {
    found.sort_by_key(|(a, s)| (PciAddress::parse(a), *s));
    let mut gpus: Vec<Gpu> = Vec::new();
    for (address, source) in found {
        match gpus.last_mut() {
            Some(g) if g.address == address => {
                if !g.sources.contains(&source) {
                    g.sources.push(source);
                }
            }
            _ => gpus.push(Gpu {
                address,
                sources: vec![source],
            }),
        }
    }
    gpus
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixture host: 8 NVIDIA H100s, an AMD GPU and a few other char devices.
    fn inventory() -> Inventory {
        Inventory::new(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/devices/host"),
        )
    }

    fn c(major: i64, minor: i64) -> CharDevice {
        CharDevice {
            major,
            minor,
            path: format!("/dev/char-{major}-{minor}"),
        }
    }

    #[test]
    fn each_gpu_records_every_source_that_names_it() {
        let list = container_gpus(
            &mut inventory(),
            &[c(195, 2)],
            &[],
            Some("2,GPU-9c41e2b7-5f08-4d1a-b6c3-e8a27d4f1033"),
        )
        .unwrap()
        .gpus;
        let env = |a: &str| Gpu {
            address: a.into(),
            sources: vec![GpuSource::Env],
        };
        assert_eq!(
            list,
            vec![
                env("0000:3a:00.0"),
                Gpu {
                    address: "0000:5d:00.0".into(),
                    sources: vec![GpuSource::Devices],
                },
            ]
        );
        let node = |untrusted: Option<&str>| Node {
            device: c(195, 0),
            untrusted: untrusted.map(String::from),
        };
        let both = container_gpus(&mut inventory(), &[c(195, 0)], &[node(None)], Some("0"));
        assert_eq!(
            both.unwrap().gpus[0].sources,
            [GpuSource::Devices, GpuSource::Nodes, GpuSource::Env]
        );
        // A node that is not the runtime's names its GPU as the tenant's, never a trusted source.
        let tenant = container_gpus(&mut inventory(), &[], &[node(Some("a volume"))], None);
        assert_eq!(tenant.unwrap().gpus[0].sources, [GpuSource::TenantNode]);
    }

    #[test]
    fn what_names_no_gpu_is_a_note_and_an_unlisted_node_only_a_spec_s_error() {
        // GPUDirect: GPU 0 and the RDMA device of the NIC on its PCIe switch.
        let found = container_gpus(&mut inventory(), &[c(195, 0), c(231, 192)], &[], None);
        let found = found.unwrap();
        assert_eq!(found.gpus.len(), 1);
        assert_eq!(found.notes.len(), 1, "{:?}", found.notes);
        let note = &found.notes[0];
        assert!(
            note.contains("linux.devices 231:192")
                && note.contains("0000:19:00.0")
                && note.contains("class 0x02"),
            "{note}"
        );
        // A minor the driver does not list: the spec's is an error, a node in /dev a note.
        let e = container_gpus(&mut inventory(), &[c(195, 9)], &[], None).unwrap_err();
        assert!(e.to_string().contains("Device Minor 9"), "{e}");
        let node = Node {
            device: CharDevice {
                path: "/dev/nvidia9".into(),
                ..c(195, 9)
            },
            untrusted: None,
        };
        let found = container_gpus(&mut inventory(), &[], &[node], None).unwrap();
        assert!(found.gpus.is_empty());
        assert!(
            found.notes[0].contains("/dev/nvidia9 is 195:9, which no GPU of the driver has"),
            "{:?}",
            found.notes
        );
    }
}
