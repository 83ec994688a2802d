//! The host facts a plan consults, read ahead into a [`StaticTopology`]: a long-running
//! planner reads them once, and a plan made from the snapshot reads no file.

use std::path::Path;

use super::Setting;
use crate::cpuset::CpuSet;
use crate::error::Result;
use crate::inventory::HostInventory;
use crate::topology::{StaticTopology, TopologyCache};

impl StaticTopology {
    /// A snapshot of what [`crate::deployment_plan`] with `setting` for workers on `addresses`
    /// consults over `mask` or any subset of it, read under `root`: the host's GPUs like the
    /// first worker's (when a worker has an address), and the siblings of the CPUs it may look at
    /// (none for `off`, the whole mask for a CPU number, the mask's CPUs local to the workers'
    /// GPUs for `auto`). One sibling list is read per core.
    pub fn for_plan(
        root: &Path,
        setting: Setting,
        addresses: &[Option<String>],
        mask: &CpuSet,
    ) -> Result<Self> {
        Self::for_plan_cached(
            root,
            setting,
            addresses,
            mask,
            &mut TopologyCache::default(),
        )
    }

    /// [`StaticTopology::for_plan`] reading each file at most once over the life of `cache` (a
    /// long-running planner's: the host's GPUs and cores do not change while it runs).
    pub fn for_plan_cached(
        root: &Path,
        setting: Setting,
        addresses: &[Option<String>],
        mask: &CpuSet,
        cache: &mut TopologyCache,
    ) -> Result<Self> {
        let gpus = match addresses.iter().flatten().next() {
            Some(like) => cache.host_gpus(root, like)?,
            None => Vec::new(),
        };
        let cpus = consulted(setting, addresses, mask, &gpus);
        let mut siblings: Vec<CpuSet> = vec![CpuSet::new(); cpus.last().map_or(0, |c| c + 1)];
        for cpu in &cpus {
            if siblings[cpu].is_empty() {
                siblings[cpu] = cache.siblings(root, cpu, &cpus)?;
            }
        }
        Ok(StaticTopology { siblings, gpus })
    }

    /// [`StaticTopology::for_plan`] answered by a host inventory: what it holds is not read
    /// again, and what it does not hold (a CPU that was not online, a device it cannot place)
    /// is read under its topology root as `for_plan` reads it, so the snapshot is the same.
    pub fn for_plan_on(
        inv: &HostInventory,
        setting: Setting,
        addresses: &[Option<String>],
        mask: &CpuSet,
    ) -> Result<Self> {
        let root = inv.topology_root.as_path();
        let mut cache = TopologyCache::default();
        let gpus = match addresses.iter().flatten().next() {
            Some(like) => match inv.host_gpus(like) {
                Some(gpus) => gpus,
                None => cache.host_gpus(root, like)?,
            },
            None => Vec::new(),
        };
        let cpus = consulted(setting, addresses, mask, &gpus);
        let mut siblings: Vec<CpuSet> = vec![CpuSet::new(); cpus.last().map_or(0, |c| c + 1)];
        // The same one-read-per-core rule as the cache's, without the cache: a core found for
        // one CPU is set at once for its siblings among those consulted (each set cloned once).
        for cpu in &cpus {
            if !siblings[cpu].is_empty() {
                continue;
            }
            let core = match inv.siblings(cpu) {
                Some(core) => core,
                None => crate::smt::smt_siblings(root, cpu)?,
            };
            for sib in core.iter().filter(|s| *s != cpu && cpus.contains(*s)) {
                siblings[sib] = core.clone();
            }
            siblings[cpu] = core;
        }
        Ok(StaticTopology { siblings, gpus })
    }
}

/// The CPUs whose siblings a plan with `setting` over `mask` may look at: none for `off`, the
/// whole mask for a CPU number, the mask's CPUs local to the workers' GPUs for `auto`.
fn consulted(
    setting: Setting,
    addresses: &[Option<String>],
    mask: &CpuSet,
    gpus: &[crate::gpus::HostGpu],
) -> CpuSet {
    match setting {
        Setting::Off => CpuSet::new(),
        Setting::Cpu(_) => mask.clone(),
        Setting::Auto => {
            let mut local = CpuSet::new();
            for g in gpus
                .iter()
                .filter(|g| addresses.iter().flatten().any(|a| *a == g.address))
            {
                if let Some(l) = g.placement_cpus() {
                    local.extend_from(l);
                }
            }
            local.intersection(mask)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::{may_be_gpu, tests::fixture_hosts};

    #[test]
    fn a_snapshot_from_the_inventory_is_the_one_sysfs_gives() {
        let mut compared = 0;
        for (_, topo) in fixture_hosts() {
            let inv = HostInventory::read(&topo, &topo).unwrap();
            let mask = inv.online.clone();
            let gpus: Vec<Option<String>> = inv
                .pci
                .iter()
                .filter(|f| may_be_gpu(f.class) && f.vendor.is_some())
                .map(|f| Some(f.address.clone()))
                .chain([None])
                .collect();
            for setting in [Setting::Auto, Setting::Cpu(0), Setting::Off] {
                let from_sysfs = StaticTopology::for_plan(&topo, setting, &gpus, &mask);
                let from_inv = StaticTopology::for_plan_on(&inv, setting, &gpus, &mask);
                match (from_sysfs, from_inv) {
                    (Ok(a), Ok(b)) => {
                        assert_eq!(a.siblings, b.siblings, "{} {setting:?}", topo.display());
                        assert_eq!(a.gpus, b.gpus, "{} {setting:?}", topo.display());
                        compared += usize::from(!a.siblings.is_empty());
                    }
                    (a, b) => assert_eq!(a.is_err(), b.is_err(), "{}", topo.display()),
                }
            }
        }
        assert!(
            compared >= 10,
            "{compared} snapshots with siblings compared"
        );
    }
}
