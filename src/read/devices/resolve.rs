//! The container's GPUs: everything in its devices and `NVIDIA_VISIBLE_DEVICES` that names one, counted once.

use std::path::Path;

use super::char_dev::char_device_function;
use super::nvidia_info::{nvidia_gpu_addresses, nvidia_gpus, NvidiaGpu, NVIDIA_GPUS_DIR};
use super::visible::{entries, parse_visible_devices, DeviceId, VisibleDevices};
use super::{DeviceError, Gpu, GpuSource};
use crate::read::nodes::Node;
use crate::read::spec::CharDevice;
use cpuplan::PciAddress;

/// The NVIDIA driver's char major: `/dev/nvidiaN` is `195:N`, `/dev/nvidia-modeset` `195:254`, `/dev/nvidiactl` `195:255`.
pub const NVIDIA_MAJOR: i64 = 195;

/// The minor of `/dev/nvidia-modeset`, which names no GPU unless the driver lists a GPU with it.
const MODESET_MINOR: i64 = 254;

/// The PCI base classes of GPUs: display controllers and processing accelerators.
const GPU_CLASSES: [u8; 2] = [0x03, 0x12];

/// The container's GPUs and what was left out, with why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    /// Its GPUs in PCI address order, each counted once with every source that names it.
    pub gpus: Vec<Gpu>,
    /// Devices that name no GPU (a NIC's RDMA device, a node the driver does not list), and why.
    pub notes: Vec<String>,
}

/// The container's GPUs in PCI address order, each counted once with every source that names it.
///
/// `devices` are the char devices of `linux.devices`, `nodes` the GPU device nodes present in
/// its `/dev` (those not the runtime's name their GPUs as [`GpuSource::TenantNode`]); `visible` is `NVIDIA_VISIBLE_DEVICES` from `process.env` (`None` when unset).
/// A device of another PCI class than display or processing accelerator is no GPU (an RDMA
/// device of a NIC beside a GPU): it is left out with a note. Host files are read under
/// `topology_root`.
pub fn container_gpus(
    topology_root: &Path,
    devices: &[CharDevice],
    nodes: &[Node],
    visible: Option<&str>,
) -> Result<Found, DeviceError> {
    container_gpus_cached(
        topology_root,
        devices,
        nodes,
        visible,
        &mut DriverCache::default(),
    )
}

/// What the NVIDIA driver lists, read at most once over the life of the cache (a long-running
/// planner's: a GPU added to the host needs the cache dropped).
#[derive(Debug, Clone, Default)]
pub struct DriverCache {
    /// The driver's GPUs with their minors and UUIDs (its `information` files).
    gpus: Option<Vec<NvidiaGpu>>,
    /// Their addresses alone (its directory names): what indices and PCI ids need.
    addresses: Option<Vec<String>>,
}

/// [`container_gpus`] reading the driver's files at most once over the life of `cache`.
pub fn container_gpus_cached(
    topology_root: &Path,
    devices: &[CharDevice],
    nodes: &[Node],
    visible: Option<&str>,
    cache: &mut DriverCache,
) -> Result<Found, DeviceError> {
    let DriverCache {
        gpus: host,
        addresses,
    } = cache;
    let mut found: Vec<(String, GpuSource)> = Vec::new();
    let mut notes = Vec::new();
    let mut nvidia_in_devices = false;

    let tagged = devices
        .iter()
        .map(|d| (d, GpuSource::Devices))
        .chain(nodes.iter().map(|n| match n.untrusted {
            None => (&n.device, GpuSource::Nodes),
            Some(_) => (&n.device, GpuSource::TenantNode),
        }));
    for (d, source) in tagged {
        if d.major != NVIDIA_MAJOR {
            let Some(function) = char_device_function(topology_root, d.major, d.minor)? else {
                continue;
            };
            let address = function.address;
            match cpuplan::pci_base_class(&function.dir)? {
                Some(class) if GPU_CLASSES.contains(&class) => found.push((address, source)),
                class => notes.push(format!(
                    "{} {}:{} ({}) is PCI function {address} of class {}, not a GPU: ignored",
                    source,
                    d.major,
                    d.minor,
                    crate::logging::escape(&d.path),
                    class.map_or_else(|| "unknown".into(), |c| format!("0x{c:02x}"))
                )),
            }
            continue;
        }
        if !(0..MODESET_MINOR + 1).contains(&d.minor) {
            if d.minor == MODESET_MINOR + 1 {
                continue; // /dev/nvidiactl
            }
            return Err(DeviceError::Device {
                major: d.major,
                minor: d.minor,
                why: "not an NVIDIA device minor (0 to 255)".into(),
            });
        }
        let gpus = nvidia(host, topology_root)?;
        match gpus
            .iter()
            .find(|g| g.minor.map(i64::from) == Some(d.minor))
        {
            Some(g) => {
                found.push((g.address.clone(), source));
                nvidia_in_devices = true;
            }
            None if d.minor == MODESET_MINOR => {} // /dev/nvidia-modeset
            None if source != GpuSource::Devices => notes.push(format!(
                "{} is 195:{}, which no GPU of the driver has: ignored",
                crate::logging::escape(&d.path),
                d.minor
            )),
            None => {
                return Err(DeviceError::Device {
                    major: d.major,
                    minor: d.minor,
                    why: format!(
                        "no GPU in {} has Device Minor {}",
                        topology_root.join(NVIDIA_GPUS_DIR).display(),
                        d.minor
                    ),
                })
            }
        }
    }

    match parse_visible_devices(visible)? {
        VisibleDevices::Unset | VisibleDevices::None => {}
        VisibleDevices::All => {
            found.extend(
                listed(addresses, host, topology_root)?
                    .iter()
                    .map(|a| (a.clone(), GpuSource::Env)),
            );
        }
        VisibleDevices::List(_) => {
            let value = visible.unwrap_or_default();
            for (entry, id) in entries(value)? {
                let unknown = |why: String| DeviceError::VisibleUnknown {
                    value: value.to_string(),
                    entry: entry.to_string(),
                    why,
                };
                let address = match &id {
                    DeviceId::Index(i) => {
                        let all = listed(addresses, host, topology_root)?;
                        all.get(*i as usize).ok_or_else(|| {
                            unknown(format!("the host has {} NVIDIA GPUs", all.len()))
                        })?
                    }
                    DeviceId::Uuid(uuid) => {
                        &nvidia(host, topology_root)?
                            .iter()
                            .find(|g| g.uuid.as_deref() == Some(uuid.as_str()))
                            .ok_or_else(|| unknown(listed_by_driver(topology_root, "GPU UUID")))?
                            .address
                    }
                    DeviceId::Pci(address) => listed(addresses, host, topology_root)?
                        .iter()
                        .find(|a| *a == address)
                        .ok_or_else(|| unknown(listed_by_driver(topology_root, "PCI address")))?,
                    DeviceId::Mig(_) if nvidia_in_devices => continue, // its parent came with linux.devices
                    DeviceId::Mig(_) => {
                        return Err(DeviceError::BareMig {
                            value: value.to_string(),
                            entry: entry.to_string(),
                        })
                    }
                };
                found.push((address.clone(), GpuSource::Env));
            }
        }
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

/// The host's NVIDIA GPUs, read once.
fn nvidia<'a>(
    host: &'a mut Option<Vec<NvidiaGpu>>,
    topology_root: &Path,
) -> Result<&'a [NvidiaGpu], DeviceError> {
    if host.is_none() {
        *host = Some(nvidia_gpus(topology_root)?);
    }
    Ok(host.as_deref().unwrap_or_default())
}

/// The host's NVIDIA GPU addresses: from the GPUs already read, else the driver's directory names.
fn listed<'a>(
    addresses: &'a mut Option<Vec<String>>,
    host: &Option<Vec<NvidiaGpu>>,
    topology_root: &Path,
) -> Result<&'a [String], DeviceError> {
    if addresses.is_none() {
        *addresses = Some(match host {
            Some(gpus) => gpus.iter().map(|g| g.address.clone()).collect(),
            None => nvidia_gpu_addresses(topology_root)?,
        });
    }
    Ok(addresses.as_deref().unwrap_or_default())
}

/// Why an id matched nothing: no GPU the driver lists under the topology root has it.
fn listed_by_driver(topology_root: &Path, what: &str) -> String {
    format!(
        "no GPU in {} has that {what}",
        topology_root.join(NVIDIA_GPUS_DIR).display()
    )
}
