//! The host as cpuplan reads it: every host file (proc, cgroups, sysfs, the NVIDIA driver's
//! procfs) is read through a [`Host`], under its roots, so a test points them at a fixture tree.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cpuplan::inventory::store::{Came, Obtained};
use cpuplan::inventory::HostInventory;
use cpuplan::{CgroupMounts, Cgroups, CpuSet, Holder, Process, Setting, StaticTopology};

use cpuplan::gpu::{DeviceError, Inventory};

use super::gpus::{container_gpus, Found};
use super::spec::CharDevice;

/// The host's roots: `/` on a real host; and the host inventory (`cpuplan::inventory`) its
/// host-wide facts are taken from: one given for a start (the hook's file), or one read the
/// first time and kept from one container to the next (the NRI plugin's).
#[derive(Debug, Clone)]
pub struct Host {
    /// Where `/proc` and the cgroup mounts are read.
    pub root: PathBuf,
    /// Where sysfs topology, `/sys/dev/char` and `/proc/driver/nvidia` are read.
    pub topology_root: PathBuf,
    /// The inventory given for this start (`None`: none given).
    given: Option<Arc<HostInventory>>,
    /// What is kept between containers (`None`: nothing is kept).
    kept: Option<Arc<Mutex<Kept>>>,
    /// Counts the reads of the inventory kept, where one is given.
    reads: Option<Arc<AtomicU64>>,
}

/// The host inventory and the GPU inventory seeded from it, as kept between containers.
#[derive(Debug, Default)]
struct Kept {
    /// `None`: not read yet; `Some(None)`: it could not be read (the host is read afresh).
    host: Option<Option<Arc<HostInventory>>>,
    gpus: Option<Inventory>,
}

/// Logs how the inventory of a start came, for `container`: at debug level where the file
/// served or was written (once a boot: the info level keeps one line per container), a warning
/// where none could be kept or used.
pub fn log_inventory(container: &str, got: &Obtained) {
    let line = got.describe();
    match got.came {
        Came::File => log::debug!("container {container}: {line}"),
        Came::Written(_) => log::debug!("container {container}: {line}"),
        Came::NotKept(_) | Came::Fresh(_) => log::warn!("container {container}: {line}"),
    }
}

/// One NUMA node (or the CPUs in none) with its cores, for drawing a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCores {
    /// The node id, `None` for CPUs sysfs places on no node.
    pub node: Option<u32>,
    /// The node's online CPUs.
    pub cpus: CpuSet,
    /// Its cores: each core's hardware threads within the node, lowest CPU first.
    pub cores: Vec<CpuSet>,
}

impl Host {
    /// The host `config` names (its `root` and `topology_root`), read afresh every time.
    pub fn of(config: &crate::config::HookConfig) -> Host {
        Host {
            root: config.root.clone(),
            topology_root: config.topology_root.clone(),
            given: None,
            kept: None,
            reads: None,
        }
    }

    /// The host `config` names, answering from the inventory kept in its `inventory_dir`
    /// (read and written there where there is none that can be trusted and still describes the
    /// host; `refresh`: read now whatever is there), with how the inventory came.
    pub fn stored(config: &crate::config::HookConfig, refresh: bool) -> (Host, Obtained) {
        let mut got = cpuplan::inventory::store::obtain(
            &config.inventory_dir,
            &config.root,
            &config.topology_root,
            refresh,
        );
        let inventory = got.inventory.take();
        (Host::of(config).with_inventory(inventory), got)
    }

    /// [`Host::stored`] for a command that only looks (`explain`): the inventory file is used
    /// where it can be trusted and still describes the host, and never written.
    pub fn stored_read_only(config: &crate::config::HookConfig) -> (Host, Obtained) {
        let mut got = cpuplan::inventory::store::obtain_read_only(
            &config.inventory_dir,
            &config.root,
            &config.topology_root,
        );
        let inventory = got.inventory.take();
        (Host::of(config).with_inventory(inventory), got)
    }

    /// This host answering from `inventory` where it holds the answer (it must have been read
    /// under this host's roots; one of other roots is not used).
    pub fn with_inventory(mut self, inventory: Option<HostInventory>) -> Host {
        self.given = inventory
            .filter(|i| i.is_of(&self.root, &self.topology_root))
            .map(Arc::new);
        self
    }

    /// This host reading its inventory the first time it is needed and keeping it, with the
    /// GPUs the vendor modules find, from one container to the next.
    pub fn keeping_inventory(mut self) -> Host {
        self.kept = Some(Arc::default());
        self
    }

    /// This host counting in `reads` every read of the inventory it keeps (the NRI plugin's
    /// metrics).
    pub fn counting_reads(mut self, reads: Arc<AtomicU64>) -> Host {
        self.reads = Some(reads);
        self
    }

    /// Forgets the inventory kept (a runtime reconnecting may come with new GPUs).
    pub fn forget_inventory(&self) {
        if let Some(kept) = &self.kept {
            *kept.lock().unwrap_or_else(|e| e.into_inner()) = Kept::default();
        }
    }

    /// The host inventory it answers from, if any (read now the first time where it keeps one).
    pub fn inventory(&self) -> Option<Arc<HostInventory>> {
        if let Some(given) = &self.given {
            return Some(given.clone());
        }
        let mut kept = self
            .kept
            .as_ref()?
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        kept.host
            .get_or_insert_with(
                || match HostInventory::read(&self.root, &self.topology_root) {
                    Ok(inv) => {
                        if let Some(reads) = &self.reads {
                            reads.fetch_add(1, Ordering::Relaxed);
                        }
                        Some(Arc::new(inv))
                    }
                    Err(e) => {
                        log::warn!("{e}: the host is read afresh for every container");
                        None
                    }
                },
            )
            .clone()
    }

    /// The GPU inventory for one read: seeded from the host inventory's driver listing.
    fn gpu_inventory(&self, inventory: Option<&HostInventory>) -> Inventory {
        match inventory {
            Some(i) => Inventory::seeded(&self.topology_root, i.nvidia.clone(), i.caps_major),
            None => Inventory::new(&self.topology_root),
        }
    }

    /// The locations of `pid`'s cgroups on every hierarchy.
    pub fn cgroups(&self, pid: u32) -> cpuplan::Result<Cgroups> {
        if let Some(found) = self
            .inventory()
            .and_then(|i| i.cgroups_of(Process::Pid(pid)))
        {
            return found;
        }
        Cgroups::of(&self.root, Process::Pid(pid))
    }

    /// `pid`'s CPU affinity (`Cpus_allowed_list`).
    pub fn mask_of(&self, pid: u32) -> cpuplan::Result<CpuSet> {
        cpuplan::process_mask(&self.root, Process::Pid(pid))
    }

    /// The host's online CPUs as the topology shows them (what a plan is drawn over).
    pub fn online_cpus(&self) -> cpuplan::Result<CpuSet> {
        match self.inventory() {
            Some(i) => Ok(i.online.clone()),
            None => cpuplan::online_cpus(&self.topology_root),
        }
    }

    /// The CPUs that are really online on the host the containers run on (under `root`; a root
    /// without sysfs, as a test's fake root, defers to the topology's).
    pub fn running_cpus(&self) -> cpuplan::Result<CpuSet> {
        if let Some(i) = self.inventory() {
            return Ok(i.running.clone());
        }
        let cpus = cpuplan::online_cpus(&self.root)?;
        if cpus.is_empty() {
            return cpuplan::online_cpus(&self.topology_root);
        }
        Ok(cpus)
    }

    /// The cgroups a container whose spec names `cgroups_path` has or will have, on every hierarchy.
    pub fn cgroups_at(&self, cgroups_path: &str) -> cpuplan::Result<Cgroups> {
        if let Some(c) = self.inventory().and_then(|i| i.cgroups_at(cgroups_path)) {
            return Ok(c);
        }
        Ok(CgroupMounts::read(&self.root)?.cgroups_at(cgroups_path))
    }

    /// The container's GPUs named by its spec's `devices`, its device `nodes`, its spec's
    /// `mounts` and its `NVIDIA_VISIBLE_DEVICES` (`visible`), and what was left out.
    pub fn gpus(
        &self,
        devices: &[CharDevice],
        nodes: &[super::nodes::Node],
        mounts: &[super::spec::SpecMount],
        visible: Option<&str>,
    ) -> Result<Found, DeviceError> {
        let inventory = self.inventory();
        match &self.kept {
            Some(kept) => {
                let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
                let gpus = kept
                    .gpus
                    .get_or_insert_with(|| self.gpu_inventory(inventory.as_deref()));
                container_gpus(gpus, devices, nodes, mounts, visible)
            }
            None => container_gpus(
                &mut self.gpu_inventory(inventory.as_deref()),
                devices,
                nodes,
                mounts,
                visible,
            ),
        }
    }

    /// What a plan with `setting` for workers on `addresses` consults over `mask`.
    pub fn topology(
        &self,
        setting: Setting,
        addresses: &[Option<String>],
        mask: &CpuSet,
    ) -> cpuplan::Result<StaticTopology> {
        match self.inventory() {
            Some(i) => StaticTopology::for_plan_on(&i, setting, addresses, mask),
            None => StaticTopology::for_plan(&self.topology_root, setting, addresses, mask),
        }
    }

    /// A claim holder for `container` of `scope` whose init is `pid`, or `None` if the pid is gone or a zombie.
    pub fn holder(
        &self,
        container: &str,
        scope: &str,
        pid: u32,
    ) -> Result<Option<Holder>, cpuplan::ClaimError> {
        Holder::of_pid(&self.root, container, scope, pid)
    }

    /// The host's NUMA nodes (and the online CPUs on none) with their cores, for the drawing.
    pub fn nodes(&self) -> cpuplan::Result<Vec<NodeCores>> {
        let inventory = self.inventory();
        let online = self.online_cpus()?;
        let numa = match &inventory {
            Some(i) => i.nodes.clone(),
            None => cpuplan::numa_nodes(&self.topology_root)?,
        };
        let mut nodes: Vec<(Option<u32>, CpuSet)> =
            numa.into_iter().map(|n| (Some(n.id), n.cpus)).collect();
        let covered = nodes.iter().fold(CpuSet::new(), |acc, (_, c)| acc.union(c));
        let rest = online.difference(&covered);
        if !rest.is_empty() {
            nodes.push((None, rest));
        }
        let mut out = Vec::with_capacity(nodes.len());
        for (node, cpus) in nodes {
            let mut seen = CpuSet::new();
            let mut cores = Vec::new();
            for cpu in cpus.iter() {
                if seen.contains(cpu) {
                    continue;
                }
                let siblings = match inventory.as_ref().and_then(|i| i.siblings(cpu)) {
                    Some(s) => s,
                    None => cpuplan::smt_siblings(&self.topology_root, cpu)?,
                };
                let core = siblings.intersection(&cpus);
                let core = if core.contains(cpu) {
                    core.difference(&seen)
                } else {
                    [cpu].into_iter().collect()
                };
                seen.extend_from(&core);
                cores.push(core);
            }
            out.push(NodeCores { node, cpus, cores });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HookConfig;

    fn device(minor: i64) -> CharDevice {
        CharDevice {
            major: 195,
            minor,
            path: format!("/dev/nvidia{minor}"),
        }
    }

    /// A copy of the example host (8 GPUs) in a temp dir, which the test may then break.
    fn example_host(t: &std::path::Path) -> PathBuf {
        let root = t.join("host");
        let copied = std::process::Command::new("cp")
            .arg("-a")
            .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/host"))
            .arg(&root)
            .status()
            .unwrap();
        assert!(copied.success());
        root
    }

    /// A cgroup2 mount at `/sys/fs/cgroup` in `root`'s mount table, with a pod cgroup limited
    /// to 1 CPU; returns the mount table's path.
    fn cgroup_mount(root: &std::path::Path) -> PathBuf {
        let pod = root.join("sys/fs/cgroup/kubepods");
        std::fs::create_dir_all(&pod).unwrap();
        std::fs::write(pod.join("cpu.max"), "100000 100000\n").unwrap();
        let mountinfo = root.join("proc/self/mountinfo");
        std::fs::create_dir_all(mountinfo.parent().unwrap()).unwrap();
        std::fs::write(
            &mountinfo,
            "30 1 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n",
        )
        .unwrap();
        mountinfo
    }

    #[test]
    fn a_kept_inventory_reads_the_gpus_and_cores_once_until_forgotten() {
        let t = tempfile::tempdir().unwrap();
        let root = example_host(t.path());
        let host = Host::of(&HookConfig {
            root: root.clone(),
            topology_root: root.clone(),
            ..HookConfig::default()
        })
        .keeping_inventory();
        let mask: CpuSet = "0-223".parse().unwrap();
        let mounts = cgroup_mount(&root);
        let first = host.gpus(&[device(1)], &[], &[], None).unwrap();
        let addresses = vec![Some(first.gpus[0].address.clone())];
        let topo = host.topology(Setting::Auto, &addresses, &mask).unwrap();
        let running = host.running_cpus().unwrap();
        assert_eq!(running.len(), 224);
        let pod = host.cgroups_at("/kubepods/pod1/c1").unwrap();
        assert_eq!(pod.quota().unwrap(), Some(1.0));
        // The driver's files, sysfs and the mount table go: a kept inventory still answers the same.
        std::fs::remove_dir_all(root.join("proc/driver")).unwrap();
        std::fs::remove_dir_all(root.join("sys/devices")).unwrap();
        std::fs::remove_file(&mounts).unwrap();
        assert_eq!(host.gpus(&[device(1)], &[], &[], None).unwrap(), first);
        let again = host.topology(Setting::Auto, &addresses, &mask).unwrap();
        assert_eq!((again.gpus, again.siblings), (topo.gpus, topo.siblings));
        assert_eq!(host.running_cpus().unwrap(), running);
        assert_eq!(host.cgroups_at("/kubepods/pod1/c1").unwrap(), pod);
        // Forgotten (a runtime reconnecting), it reads anew: nothing there now.
        host.forget_inventory();
        assert!(host.gpus(&[device(1)], &[], &[], None).is_err());
        assert_eq!(
            host.cgroups_at("/kubepods/pod1/c1").unwrap(),
            Cgroups::default()
        );
        // A host that keeps nothing reads every time.
        let plain = Host::of(&HookConfig {
            root: root.clone(),
            topology_root: root,
            ..HookConfig::default()
        });
        assert!(plain.gpus(&[device(1)], &[], &[], None).is_err());
    }
}
