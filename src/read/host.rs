//! The host as cpuplan reads it: every host file (proc, cgroups, sysfs, the NVIDIA driver's
//! procfs) is read through a [`Host`], under its roots, so a test points them at a fixture tree.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use cpuplan::{Cgroups, CpuSet, Holder, Process, Setting, StaticTopology, TopologyCache};

use super::devices::{container_gpus_cached, DeviceError, DriverCache, Found};
use super::spec::CharDevice;

/// The host's roots: `/` on a real host; and, for a long-running planner, what it has read of
/// the host's GPUs and cores (which do not change while it runs).
#[derive(Debug, Clone)]
pub struct Host {
    /// Where `/proc` and the cgroup mounts are read.
    pub root: PathBuf,
    /// Where sysfs topology, `/sys/dev/char` and `/proc/driver/nvidia` are read.
    pub topology_root: PathBuf,
    /// The inventory read so far, kept between containers (`None`: read anew every time).
    inventory: Option<Arc<Mutex<Inventory>>>,
}

/// The host's GPU inventory and cores, as read.
#[derive(Debug, Default)]
struct Inventory {
    driver: DriverCache,
    topology: TopologyCache,
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
    /// The host `config` names (its `root` and `topology_root`).
    pub fn of(config: &crate::config::HookConfig) -> Host {
        Host {
            root: config.root.clone(),
            topology_root: config.topology_root.clone(),
            inventory: None,
        }
    }

    /// This host keeping what it reads of the GPUs and cores from one container to the next.
    pub fn keeping_inventory(mut self) -> Host {
        self.inventory = Some(Arc::default());
        self
    }

    /// Forgets the inventory kept (a runtime reconnecting may come with new GPUs).
    pub fn forget_inventory(&self) {
        if let Some(lock) = self.inventory() {
            *lock.unwrap_or_else(|e| e.into_inner()) = Inventory::default();
        }
    }

    fn inventory(&self) -> Option<std::sync::LockResult<MutexGuard<'_, Inventory>>> {
        self.inventory.as_ref().map(|m| m.lock())
    }

    /// The locations of `pid`'s cgroups on every hierarchy.
    pub fn cgroups(&self, pid: u32) -> cpuplan::Result<Cgroups> {
        Cgroups::of(&self.root, Process::Pid(pid))
    }

    /// `pid`'s CPU affinity (`Cpus_allowed_list`).
    pub fn mask_of(&self, pid: u32) -> cpuplan::Result<CpuSet> {
        cpuplan::process_mask(&self.root, Process::Pid(pid))
    }

    /// The host's online CPUs as the topology shows them (what a plan is drawn over).
    pub fn online_cpus(&self) -> cpuplan::Result<CpuSet> {
        cpuplan::online_cpus(&self.topology_root)
    }

    /// The CPUs that are really online on the host the containers run on (under `root`; a root
    /// without sysfs, as a test's fake root, defers to the topology's).
    pub fn running_cpus(&self) -> cpuplan::Result<CpuSet> {
        let cpus = cpuplan::online_cpus(&self.root)?;
        if cpus.is_empty() {
            return self.online_cpus();
        }
        Ok(cpus)
    }

    /// The cgroups a container whose spec names `cgroups_path` has or will have, on every hierarchy.
    pub fn cgroups_at(&self, cgroups_path: &str) -> cpuplan::Result<Cgroups> {
        Cgroups::at_path(&self.root, cgroups_path)
    }

    /// The container's GPUs named by its spec's `devices`, its device `nodes` and its
    /// `NVIDIA_VISIBLE_DEVICES` (`visible`), and the devices left out.
    pub fn gpus(
        &self,
        devices: &[CharDevice],
        nodes: &[CharDevice],
        visible: Option<&str>,
    ) -> Result<Found, DeviceError> {
        match self.inventory() {
            Some(lock) => {
                let mut inventory = lock.unwrap_or_else(|e| e.into_inner());
                container_gpus_cached(
                    &self.topology_root,
                    devices,
                    nodes,
                    visible,
                    &mut inventory.driver,
                )
            }
            None => container_gpus_cached(
                &self.topology_root,
                devices,
                nodes,
                visible,
                &mut DriverCache::default(),
            ),
        }
    }

    /// What a plan with `setting` for workers on `addresses` consults over `mask`, read now.
    pub fn topology(
        &self,
        setting: Setting,
        addresses: &[Option<String>],
        mask: &CpuSet,
    ) -> cpuplan::Result<StaticTopology> {
        let root = &self.topology_root;
        match self.inventory() {
            Some(lock) => {
                let mut inventory = lock.unwrap_or_else(|e| e.into_inner());
                StaticTopology::for_plan_cached(
                    root,
                    setting,
                    addresses,
                    mask,
                    &mut inventory.topology,
                )
            }
            None => StaticTopology::for_plan(root, setting, addresses, mask),
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
        let online = self.online_cpus()?;
        let mut nodes: Vec<(Option<u32>, CpuSet)> = cpuplan::numa_nodes(&self.topology_root)?
            .into_iter()
            .map(|n| (Some(n.id), n.cpus))
            .collect();
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
                let core = cpuplan::smt_siblings(&self.topology_root, cpu)?.intersection(&cpus);
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
        let first = host.gpus(&[device(1)], &[], None).unwrap();
        let addresses = vec![Some(first.gpus[0].address.clone())];
        let topo = host.topology(Setting::Auto, &addresses, &mask).unwrap();
        // The driver's files and sysfs go: a kept inventory still answers the same.
        std::fs::remove_dir_all(root.join("proc/driver")).unwrap();
        std::fs::remove_dir_all(root.join("sys")).unwrap();
        assert_eq!(host.gpus(&[device(1)], &[], None).unwrap(), first);
        let again = host.topology(Setting::Auto, &addresses, &mask).unwrap();
        assert_eq!((again.gpus, again.siblings), (topo.gpus, topo.siblings));
        // Forgotten (a runtime reconnecting), it reads anew: nothing there now.
        host.forget_inventory();
        assert!(host.gpus(&[device(1)], &[], None).is_err());
        // A host that keeps nothing reads every time.
        let plain = Host::of(&HookConfig {
            root: root.clone(),
            topology_root: root,
            ..HookConfig::default()
        });
        assert!(plain.gpus(&[device(1)], &[], None).is_err());
    }
}
