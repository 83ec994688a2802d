//! The host inventory: the host-wide facts a plan consults, read once per boot.
//!
//! What it holds ([`HostInventory`]): the online CPUs (under the topology root, and under the
//! host root where the containers run), each online CPU's SMT siblings, the NUMA nodes and
//! their CPUs, the PCI functions that may be GPUs (base class display `0x03` or processing
//! accelerator `0x12`: address, class, vendor, NUMA node, local CPUs) and the class of every
//! other function, what the NVIDIA driver lists (each GPU's address, device minor and uuid;
//! the `nvidia-caps` char major) and the host's cgroup mounts. What a container brings (its
//! state, spec, cgroup limits, its pid's mask and status, its `/dev`) is never in it, nor what
//! changes without a reboot or a driver reload and has no cheap stamp (MIG instances, AMD
//! partitions and the kfd topology, a char device's sysfs link): those are read per start.
//!
//! The one-shot hook keeps it in a file ([`store`], one [`format`]) checked against a cheap
//! [`Stamp`] at every start; the long-running NRI plugin keeps it in memory. Both ask it the
//! same questions, and where it holds no answer (a CPU it did not list, a device that is no
//! GPU) the caller reads sysfs as it would without it, so a plan is the same with it or without.

pub mod cores;
pub mod format;
pub mod stamp;
pub mod store;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cgroup::CgroupMounts;
use crate::cpu_node::{cpu_nodes, CpuNode};
use crate::cpuset::CpuSet;
use crate::error::Error;
use crate::gpu::nvidia::{mig, nvidia_gpus, NvidiaGpu};
use crate::gpu::DeviceError;
use crate::gpus::{locality, pci_class, pci_devices_dir, pci_functions, pci_vendor, HostGpu};
use crate::mountinfo::MountInfo;
use crate::topology::NumaNode;
pub use cores::Cores;
pub use stamp::Stamp;

/// Why a host inventory could not be read, loaded or kept.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    /// A host file it reads could not be read or held what the kernel never writes.
    #[error("reading the host inventory: {0}")]
    Host(#[source] Error),
    /// The NVIDIA driver's files could not be read or parsed.
    #[error("reading the host inventory: {0}")]
    Driver(#[source] DeviceError),
    /// The inventory file or its directory cannot be trusted (owner, mode, type, link).
    #[error("{path}: not trusted: {why}", path = path.display())]
    Untrusted {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// The file is not a whole inventory of this format (truncated, corrupt, another version).
    #[error("{path}: {why}", path = path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// The file or its directory could not be opened, read or written.
    #[error("{path}: {source}", path = path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl InventoryError {
    /// Whether it is a file that is simply not there (nothing to say but "written now").
    pub fn is_missing(&self) -> bool {
        matches!(self, InventoryError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// A PCI function as the inventory keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PciFunction {
    /// Its address as sysfs names it (`0000:2a:00.0`).
    pub address: String,
    /// Its `class` (`0x030200`), `None` without the file.
    pub class: Option<u32>,
    /// Its `vendor`, read only for a display or accelerator function.
    pub vendor: Option<u32>,
    /// Its NUMA node, read only for a display or accelerator function.
    pub node: Option<u32>,
    /// Its local CPUs, read only for a display or accelerator function.
    pub local: Option<CpuSet>,
    /// Where it is placed when its node has no CPUs ([`HostGpu::cpu_node`]).
    pub cpu_node: Option<CpuNode>,
}

/// The PCI base classes whose functions the inventory keeps whole: display and accelerators.
const GPU_CLASSES: [u32; 2] = [0x03, 0x12];

pub(crate) fn may_be_gpu(class: Option<u32>) -> bool {
    class.is_some_and(|c| GPU_CLASSES.contains(&(c >> 16)))
}

/// The host-wide facts a plan consults, read under a host root and a topology root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostInventory {
    /// The boot it describes (`/proc/sys/kernel/random/boot_id` under the root; empty where there is none).
    pub boot_id: String,
    /// The host root it was read under (proc, cgroups).
    pub root: PathBuf,
    /// The topology root it was read under (sysfs topology, the NVIDIA driver's procfs).
    pub topology_root: PathBuf,
    /// What the stamp saw when it was read.
    pub stamp: Stamp,
    /// The online CPUs under the topology root.
    pub online: CpuSet,
    /// The online CPUs under the host root (the topology's where the root has no sysfs).
    pub running: CpuSet,
    /// The distinct SMT sibling lists of the online CPUs.
    pub cores: Cores,
    /// For each CPU id up to the highest online one, the index of its list in `cores`.
    pub core_of: Vec<Option<u32>>,
    /// The NUMA nodes with online CPUs, by id.
    pub nodes: Vec<NumaNode>,
    /// The PCI functions, in address order.
    pub pci: Vec<PciFunction>,
    /// The NVIDIA driver's GPUs, in address order.
    pub nvidia: Vec<NvidiaGpu>,
    /// The `nvidia-caps` char major, where `/proc/devices` lists one.
    pub caps_major: Option<i64>,
    /// The host's cgroup and cgroup2 mounts (`<root>/proc/self/mountinfo`; `None` where the
    /// root has no mount table).
    pub cgroup_mounts: Option<Vec<MountInfo>>,
}

impl HostInventory {
    /// Reads the host under `root` and `topology_root` now (the stamp first: a change while it
    /// reads leaves a stamp the next start sees differ). Any file it cannot read or parse fails
    /// the whole read: the caller then reads afresh as it would without an inventory.
    pub fn read(root: &Path, topology_root: &Path) -> Result<HostInventory, InventoryError> {
        let stamp = Stamp::read(root, topology_root);
        let boot_id = stamp::boot_id(root);
        let online = crate::topology::online_cpus(topology_root).map_err(InventoryError::Host)?;
        // The host root's online CPUs, read only where it is another tree.
        let root_online = match root == topology_root {
            true => CpuSet::new(),
            false => crate::topology::online_cpus(root).map_err(InventoryError::Host)?,
        };
        let running = if root_online.is_empty() {
            online.clone()
        } else {
            root_online
        };
        let mut cores = Cores::default();
        let mut core_of = vec![None; online.last().map_or(0, |c| c + 1)];
        for cpu in &online {
            let core =
                crate::smt::smt_siblings(topology_root, cpu).map_err(InventoryError::Host)?;
            let i = match cores.position(&core) {
                Some(i) => i,
                None => {
                    cores.push(&core);
                    cores.len() - 1
                }
            };
            core_of[cpu] = Some(i as u32);
        }
        let nodes = crate::topology::numa_nodes(topology_root).map_err(InventoryError::Host)?;
        let pci = read_pci(topology_root)?;
        let nvidia = nvidia_gpus(topology_root).map_err(InventoryError::Driver)?;
        let caps_major =
            mig::char_major(topology_root, mig::CAPS_DEVICE).map_err(InventoryError::Driver)?;
        let cgroup_mounts = match crate::fsutil::under(root, "/proc/self/mountinfo").exists() {
            true => Some(
                CgroupMounts::read(root)
                    .map_err(InventoryError::Host)?
                    .mounts()
                    .to_vec(),
            ),
            false => None,
        };
        Ok(HostInventory {
            boot_id,
            root: root.to_path_buf(),
            topology_root: topology_root.to_path_buf(),
            stamp,
            online,
            running,
            cores,
            core_of,
            nodes,
            pci,
            nvidia,
            caps_major,
            cgroup_mounts,
        })
    }

    /// Whether it was read under these roots.
    pub fn is_of(&self, root: &Path, topology_root: &Path) -> bool {
        self.root == root && self.topology_root == topology_root
    }

    /// `cpu`'s SMT siblings as [`crate::smt_siblings`] gives them, or `None` for a CPU that was not online.
    pub fn siblings(&self, cpu: usize) -> Option<CpuSet> {
        let i = (*self.core_of.get(cpu)?)?;
        self.cores.get(i as usize)
    }

    /// The host's GPUs like the device at `like`, as [`crate::host_gpus`] gives them; `None`
    /// where the inventory cannot say (`like` is no display or accelerator function it lists,
    /// or lacks a vendor): the caller asks sysfs, which gives its answer or its error.
    pub fn host_gpus(&self, like: &str) -> Option<Vec<HostGpu>> {
        let f = self.pci.iter().find(|f| f.address == like)?;
        let (Some(class), Some(vendor)) = (f.class, f.vendor) else {
            return None;
        };
        if !may_be_gpu(Some(class)) {
            return None;
        }
        Some(
            self.pci
                .iter()
                .filter(|g| {
                    g.class.is_some_and(|c| c >> 8 == class >> 8) && g.vendor == Some(vendor)
                })
                .map(|g| HostGpu {
                    address: g.address.clone(),
                    node: g.node,
                    local: g.local.clone(),
                    cpu_node: g.cpu_node.clone(),
                })
                .collect(),
        )
    }

    /// The cgroups a container at cgroup path `path` has or will have, as
    /// [`CgroupMounts::cgroups_at`] gives them; `None` where the root has no mount table.
    pub fn cgroups_at(&self, path: &str) -> Option<crate::Cgroups> {
        let mounts = self.cgroup_mounts.as_ref()?;
        Some(crate::cgroup::cgroups_at_among(&self.root, mounts, path))
    }

    /// `proc`'s cgroups as [`crate::Cgroups::of`] gives them, its `/proc/<pid>/cgroup` read
    /// now; `None` where the root has no mount table (the caller reads it and gets its error).
    pub fn cgroups_of(&self, proc: crate::Process) -> Option<crate::Result<crate::Cgroups>> {
        let mounts = self.cgroup_mounts.as_ref()?;
        Some(crate::cgroup::cgroups_among(&self.root, mounts, proc))
    }
}

/// Every PCI function under the topology root, in address order: the class of each, and the
/// vendor and locality of each display or accelerator function.
fn read_pci(topology_root: &Path) -> Result<Vec<PciFunction>, InventoryError> {
    let devices = pci_devices_dir(topology_root);
    let entries = match pci_functions(&devices) {
        Ok(e) => e,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(Vec::new())
        }
        Err(source) => {
            return Err(InventoryError::Io {
                path: devices,
                source,
            })
        }
    };
    let mut found = Vec::with_capacity(entries.len());
    for (address, dir) in entries {
        let class = pci_class(&dir).map_err(InventoryError::Host)?;
        let mut f = PciFunction {
            address,
            class,
            vendor: None,
            node: None,
            local: None,
            cpu_node: None,
        };
        if may_be_gpu(class) {
            f.vendor = pci_vendor(&dir).map_err(InventoryError::Host)?;
            (f.node, f.local) = locality(&dir).map_err(InventoryError::Host)?;
        }
        found.push(f);
    }
    let asked: Vec<(Option<u32>, Option<&CpuSet>)> =
        found.iter().map(|f| (f.node, f.local.as_ref())).collect();
    let placed = cpu_nodes(Some(topology_root), &asked);
    for (f, c) in found.iter_mut().zip(placed) {
        f.cpu_node = c;
    }
    Ok(found)
}

#[cfg(test)]
pub(crate) mod tests;
