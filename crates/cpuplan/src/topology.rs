//! Where the planner learns the host's SMT siblings and GPUs: sysfs, or an in-memory snapshot.

use std::io;
use std::path::{Path, PathBuf};

pub use crate::cpu_node::{numa_nodes, online_cpus, NumaNode};
use crate::cpuset::CpuSet;
use crate::error::{Error, Result};
use crate::gpus::HostGpu;

/// The host facts `deployment_plan` needs.
pub trait Topology {
    /// The hardware threads of `cpu`'s core, `cpu` included.
    fn smt_siblings(&self, cpu: usize) -> Result<CpuSet>;
    /// The host's GPUs like the device at `like`, in PCI address order.
    fn host_gpus(&self, like: &str) -> Result<Vec<HostGpu>>;
}

/// A [`Topology`] read from sysfs under a root.
#[derive(Debug, Clone)]
pub struct SysfsTopology {
    /// The host root (`/` on a real host).
    pub root: PathBuf,
}

impl SysfsTopology {
    /// Sysfs under `root`.
    pub fn new(root: &Path) -> Self {
        SysfsTopology {
            root: root.to_path_buf(),
        }
    }
}

/// A [`Topology`] held in memory.
#[derive(Debug, Clone, Default)]
pub struct StaticTopology {
    /// Siblings per cpu (a cpu not listed is its own core).
    pub siblings: Vec<CpuSet>,
    /// The host's GPUs, in address order.
    pub gpus: Vec<HostGpu>,
}

impl StaticTopology {
    /// A snapshot of sysfs under `root`: every online CPU's siblings, and the GPUs like the device at `like`.
    pub fn from_sysfs(root: &Path, like: &str) -> Result<Self> {
        let online = online_cpus(root)?;
        let mut siblings = vec![CpuSet::new(); online.last().map_or(0, |c| c + 1)];
        for cpu in &online {
            siblings[cpu] = crate::smt::smt_siblings(root, cpu)?;
        }
        Ok(StaticTopology {
            siblings,
            gpus: crate::gpus::host_gpus(root, like)?,
        })
    }
}

/// Host topology already read: the GPUs like a device, and CPUs' SMT siblings.
#[derive(Debug, Clone, Default)]
pub struct TopologyCache {
    gpus: Vec<(String, Vec<HostGpu>)>,
    siblings: Vec<Option<CpuSet>>,
}

impl TopologyCache {
    /// The host's GPUs like the device at `like`, read under `root` the first time.
    pub(crate) fn host_gpus(&mut self, root: &Path, like: &str) -> Result<Vec<HostGpu>> {
        if let Some((_, gpus)) = self.gpus.iter().find(|(l, _)| l == like) {
            return Ok(gpus.clone());
        }
        let gpus = crate::gpus::host_gpus(root, like)?;
        self.gpus.push((like.to_string(), gpus.clone()));
        Ok(gpus)
    }

    /// `cpu`'s siblings, read under `root` the first time (one read serves every sibling of
    /// it in `within`, as the kernel writes one list per core).
    pub(crate) fn siblings(&mut self, root: &Path, cpu: usize, within: &CpuSet) -> Result<CpuSet> {
        self.siblings_with(cpu, within, |cpu| crate::smt::smt_siblings(root, cpu))
    }

    /// `cpu`'s siblings, asked of `read` the first time, with the same one-read-per-core rule
    /// as [`TopologyCache::siblings`] (a host inventory answers for sysfs).
    pub(crate) fn siblings_with(
        &mut self,
        cpu: usize,
        within: &CpuSet,
        read: impl FnOnce(usize) -> Result<CpuSet>,
    ) -> Result<CpuSet> {
        if let Some(Some(core)) = self.siblings.get(cpu) {
            return Ok(core.clone());
        }
        let core = read(cpu)?;
        let top = core.last().unwrap_or(cpu).max(cpu);
        if self.siblings.len() <= top {
            self.siblings.resize(top + 1, None);
        }
        for sib in core.intersection(within).iter() {
            self.siblings[sib] = Some(core.clone());
        }
        self.siblings[cpu] = Some(core.clone());
        Ok(core)
    }
}

impl Topology for SysfsTopology {
    fn smt_siblings(&self, cpu: usize) -> Result<CpuSet> {
        crate::smt::smt_siblings(&self.root, cpu)
    }

    fn host_gpus(&self, like: &str) -> Result<Vec<HostGpu>> {
        crate::gpus::host_gpus(&self.root, like)
    }
}

impl Topology for StaticTopology {
    /// The listed siblings (with `cpu` itself); `{cpu}` for a cpu not listed.
    fn smt_siblings(&self, cpu: usize) -> Result<CpuSet> {
        let mut set = self.siblings.get(cpu).cloned().unwrap_or_default();
        set.insert(cpu);
        Ok(set)
    }

    /// The snapshot's GPUs whatever `like`, provided `like` is one of them; else a `NotFound` error naming it, as sysfs gives for an absent device.
    fn host_gpus(&self, like: &str) -> Result<Vec<HostGpu>> {
        if self.gpus.iter().any(|g| g.address == like) {
            Ok(self.gpus.clone())
        } else {
            Err(Error::Io {
                path: PathBuf::from(like),
                source: io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("no GPU {like:?} in the static topology"),
                ),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpuset::parse_cpu_list;
    use crate::fsutil::under;
    use crate::gpus::is_not_found;

    fn cpu_file(root: &Path, rel: &str, text: &str) {
        let p = under(root, format!("/sys/devices/system/cpu/{rel}"));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn online_cpus_prefers_the_online_file() {
        let d = tempfile::tempdir().unwrap();
        cpu_file(d.path(), "online", "4-20\n");
        cpu_file(d.path(), "cpu0/topology/core_id", "0\n");
        assert_eq!(
            online_cpus(d.path()).unwrap(),
            parse_cpu_list("4-20").unwrap()
        );
    }

    #[test]
    fn online_cpus_falls_back_to_cpu_directories() {
        let d = tempfile::tempdir().unwrap();
        for c in [0, 1, 11] {
            cpu_file(d.path(), &format!("cpu{c}/topology/core_id"), "0\n");
        }
        cpu_file(d.path(), "cpufreq/x", "");
        cpu_file(d.path(), "cpuidle/x", "");
        assert_eq!(
            online_cpus(d.path()).unwrap(),
            parse_cpu_list("0-1,11").unwrap()
        );
        let empty = tempfile::tempdir().unwrap();
        assert!(online_cpus(empty.path()).unwrap().is_empty());
    }

    #[test]
    fn static_topology_answers_from_memory() {
        let t = StaticTopology {
            siblings: vec![parse_cpu_list("0,2").unwrap(), CpuSet::new()],
            gpus: vec![HostGpu {
                address: "0000:01:00.0".into(),
                node: Some(0),
                local: None,
                cpu_node: None,
            }],
        };
        assert_eq!(t.smt_siblings(0).unwrap(), parse_cpu_list("0,2").unwrap());
        assert_eq!(t.smt_siblings(1).unwrap(), parse_cpu_list("1").unwrap());
        assert_eq!(t.smt_siblings(99).unwrap(), parse_cpu_list("99").unwrap());
        assert_eq!(t.host_gpus("0000:01:00.0").unwrap().len(), 1);
        let e = t.host_gpus("0000:02:00.0").unwrap_err();
        assert!(
            is_not_found(&e) && e.to_string().contains("0000:02:00.0"),
            "{e}"
        );
    }

    #[test]
    fn from_sysfs_snapshots_siblings_and_gpus() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        cpu_file(r, "online", "0-3\n");
        cpu_file(r, "cpu0/topology/thread_siblings_list", "0,2\n");
        cpu_file(r, "cpu2/topology/thread_siblings_list", "0,2\n");
        let dev = under(r, "/sys/bus/pci/devices/0000:01:00.0");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("vendor"), "0x10de\n").unwrap();
        std::fs::write(dev.join("class"), "0x030200\n").unwrap();
        let t = StaticTopology::from_sysfs(r, "0000:01:00.0").unwrap();
        assert_eq!(t.siblings.len(), 4);
        assert_eq!(t.siblings[2], parse_cpu_list("0,2").unwrap());
        assert_eq!(t.siblings[3], parse_cpu_list("3").unwrap());
        assert_eq!(t.gpus[0].address, "0000:01:00.0");
        assert_eq!(
            t.smt_siblings(0).unwrap(),
            SysfsTopology::new(r).smt_siblings(0).unwrap()
        );
    }
}
