//! Cores as the planner sees them: a CPU's SMT siblings within a set of CPUs, ordered by their lowest CPU.
//!
//! The kernel writes the same sibling list for every thread of a core, so cores
//! partition the CPUs. On a sysfs whose lists disagree, a CPU already in a lower
//! core is left out of later ones, so cores never overlap whatever sysfs says.
//! Each CPU's siblings are read from the topology at most once, and one read
//! serves every thread of a core.

use crate::cpuset::CpuSet;
use crate::error::Result;
use crate::topology::Topology;

/// The `p` lowest and `p` highest cores of a set, or how many cores it has when it has fewer than `2p`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ends {
    /// At least `2p` cores: the `p` lowest, lowest first, and the `p` highest, highest first.
    Enough {
        /// The `p` lowest cores, lowest first.
        bottom: Vec<CpuSet>,
        /// The `p` highest cores, highest first.
        top: Vec<CpuSet>,
    },
    /// Fewer than `2p` cores: how many.
    Short(usize),
}

/// The cores of CPU sets on a topology, with each CPU's siblings read at most once.
pub(crate) struct Cores<'a> {
    topo: &'a dyn Topology,
    /// Siblings read but reaching outside the set they were read for, per CPU.
    siblings: Vec<Option<CpuSet>>,
    /// Ends already computed, by the CPU set and `p`.
    ends: Vec<(CpuSet, usize, Ends)>,
}

impl<'a> Cores<'a> {
    /// Cores on `topo`.
    pub(crate) fn new(topo: &'a dyn Topology) -> Self {
        Cores {
            topo,
            siblings: Vec::new(),
            ends: Vec::new(),
        }
    }

    /// `cpu`'s siblings within `within`, `cpu` included.
    fn core_of(&mut self, cpu: usize, within: &CpuSet) -> Result<CpuSet> {
        let mut core = match self.siblings.get_mut(cpu).and_then(Option::take) {
            Some(sib) => sib,
            None => self.topo.smt_siblings(cpu)?,
        };
        if !core.is_subset(within) {
            let cached = core;
            core = cached.intersection(within);
            self.keep(cpu, cached);
        }
        core.insert(cpu);
        Ok(core)
    }

    /// Keeps `cpu`'s siblings for a later set that holds the ones outside this one.
    fn keep(&mut self, cpu: usize, siblings: CpuSet) {
        if self.siblings.len() <= cpu {
            self.siblings.resize(cpu + 1, None);
        }
        self.siblings[cpu] = Some(siblings);
    }

    /// Every core of `cpus` (each a CPU's siblings within `cpus`), ordered by lowest CPU.
    pub(crate) fn all(&mut self, cpus: &CpuSet) -> Result<Vec<CpuSet>> {
        let mut covered = CpuSet::new();
        let mut cores = Vec::new();
        for cpu in cpus {
            if covered.contains(cpu) {
                continue;
            }
            // Every CPU of `cpus` below `cpu` is covered, so `cpu` is this core's lowest.
            let mut core = self.core_of(cpu, cpus)?;
            if core.intersects(&covered) {
                core = core.difference(&covered);
            }
            covered.extend_from(&core);
            cores.push(core);
        }
        Ok(cores)
    }

    /// The `p` lowest cores of `cpus`, lowest first, and its `p` highest, highest first; or how many cores it has when fewer than `2p`.
    ///
    /// Proving which cores are highest takes the siblings of every CPU above
    /// them (with Linux numbering, the upper half of the set), so the whole set
    /// is read; the answer is kept for the next worker on the same CPUs.
    pub(crate) fn ends(&mut self, cpus: &CpuSet, p: usize) -> Result<Ends> {
        if let Some((_, _, e)) = self.ends.iter().find(|(s, q, _)| *q == p && s == cpus) {
            return Ok(e.clone());
        }
        let all = self.all(cpus)?;
        let e = if all.len() < 2 * p {
            Ends::Short(all.len())
        } else {
            Ends::Enough {
                bottom: all[..p].to_vec(),
                top: all[all.len() - p..].iter().rev().cloned().collect(),
            }
        };
        self.ends.push((cpus.clone(), p, e.clone()));
        Ok(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpuset::parse_cpu_list;
    use crate::topology::StaticTopology;

    fn set(s: &str) -> CpuSet {
        parse_cpu_list(s).unwrap()
    }

    /// 8 CPUs, siblings n and n+4.
    fn topo() -> StaticTopology {
        StaticTopology {
            siblings: (0..8)
                .map(|c| set(&format!("{},{}", c % 4, c % 4 + 4)))
                .collect(),
            gpus: vec![],
        }
    }

    #[test]
    fn cores_are_siblings_within_the_set_by_lowest_cpu() {
        let t = topo();
        let got = Cores::new(&t).all(&set("0-2,5-7")).unwrap();
        assert_eq!(got, vec![set("0"), set("1,5"), set("2,6"), set("7")]);
    }

    #[test]
    fn inconsistent_siblings_never_overlap() {
        let t = StaticTopology {
            siblings: vec![set("0-1"), set("1-2"), set("1-2")],
            gpus: vec![],
        };
        let got = Cores::new(&t).all(&set("0-2")).unwrap();
        assert_eq!(got, vec![set("0-1"), set("2")]);
    }

    #[test]
    fn ends_match_the_full_list() {
        let t = topo();
        let mut c = Cores::new(&t);
        assert_eq!(
            c.ends(&set("0-7"), 2).unwrap(),
            Ends::Enough {
                bottom: vec![set("0,4"), set("1,5")],
                top: vec![set("3,7"), set("2,6")],
            }
        );
        assert_eq!(c.ends(&set("0-7"), 3).unwrap(), Ends::Short(4));
        assert_eq!(c.ends(&set("0-2,5-7"), 2).unwrap(), {
            Ends::Enough {
                bottom: vec![set("0"), set("1,5")],
                top: vec![set("7"), set("2,6")],
            }
        });
        assert_eq!(c.ends(&CpuSet::new(), 1).unwrap(), Ends::Short(0));
    }

    #[test]
    fn ends_order_the_top_by_lowest_cpu_not_highest() {
        // Cores {0,9} {1} {2,3}: by lowest CPU the top is {2,3}, though 9 is the highest CPU.
        let mut siblings = vec![CpuSet::new(); 10];
        siblings[0] = set("0,9");
        siblings[9] = set("0,9");
        siblings[2] = set("2-3");
        siblings[3] = set("2-3");
        let t = StaticTopology {
            siblings,
            gpus: vec![],
        };
        let mut c = Cores::new(&t);
        let cpus = set("0-3,9");
        assert_eq!(
            c.all(&cpus).unwrap(),
            vec![set("0,9"), set("1"), set("2-3")]
        );
        assert_eq!(
            c.ends(&cpus, 1).unwrap(),
            Ends::Enough {
                bottom: vec![set("0,9")],
                top: vec![set("2-3")],
            }
        );
    }

    /// Counts sibling reads.
    struct Counting(StaticTopology, std::cell::Cell<usize>);

    impl Topology for Counting {
        fn smt_siblings(&self, cpu: usize) -> Result<CpuSet> {
            self.1.set(self.1.get() + 1);
            self.0.smt_siblings(cpu)
        }
        fn host_gpus(&self, like: &str) -> Result<Vec<crate::gpus::HostGpu>> {
            self.0.host_gpus(like)
        }
    }

    #[test]
    fn ends_read_each_core_once_and_cache_it() {
        // 112 cores, siblings n and n+112.
        let t = Counting(
            StaticTopology {
                siblings: (0..224)
                    .map(|c| [c % 112, c % 112 + 112].into_iter().collect())
                    .collect(),
                gpus: vec![],
            },
            std::cell::Cell::new(0),
        );
        let mut c = Cores::new(&t);
        let node0 = set("0-55,112-167");
        let Ends::Enough { bottom, top } = c.ends(&node0, 4).unwrap() else {
            panic!("short")
        };
        assert_eq!(bottom[3], set("3,115"));
        assert_eq!(top[0], set("55,167"));
        assert_eq!(top[3], set("52,164"));
        let reads = t.1.get();
        // One read per core of the set: the lower threads' lists name the upper ones.
        assert_eq!(reads, 56);
        c.ends(&node0, 4).unwrap();
        assert_eq!(t.1.get(), reads);
    }
}
