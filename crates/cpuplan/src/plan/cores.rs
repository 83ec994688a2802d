//! Cores as the planner sees them: a CPU's SMT siblings within the mask, ordered by their lowest CPU, each computed once.

use crate::cpuset::CpuSet;
use crate::error::Result;
use crate::topology::Topology;

/// The cores of a mask, with each CPU's siblings read from the topology at most once.
pub(crate) struct Cores<'a> {
    topo: &'a dyn Topology,
    mask: &'a CpuSet,
    /// Siblings per CPU, read on first use.
    siblings: Vec<Option<CpuSet>>,
    /// Core lists already computed, by the CPU set they cover.
    lists: Vec<(CpuSet, Vec<CpuSet>)>,
}

impl<'a> Cores<'a> {
    /// Cores of `mask` on `topo`.
    pub(crate) fn new(topo: &'a dyn Topology, mask: &'a CpuSet) -> Self {
        Cores {
            topo,
            mask,
            siblings: Vec::new(),
            lists: Vec::new(),
        }
    }

    /// `cpu`'s siblings, from the cache or the topology.
    fn siblings(&mut self, cpu: usize) -> Result<&CpuSet> {
        if self.siblings.len() <= cpu {
            let len = self.mask.last().map_or(0, |l| l + 1).max(cpu + 1);
            self.siblings.resize(len, None);
        }
        if self.siblings[cpu].is_none() {
            self.siblings[cpu] = Some(self.topo.smt_siblings(cpu)?);
        }
        Ok(self.siblings[cpu].get_or_insert_with(CpuSet::new))
    }

    /// The cores of the CPUs of `cpus` that are in the mask, ordered by their lowest CPU.
    ///
    /// A core is a CPU's siblings in the mask; on a sysfs whose sibling lists
    /// disagree, a CPU already in an earlier core is left out of later ones, so
    /// the cores never overlap.
    pub(crate) fn cores_in(&mut self, cpus: &CpuSet) -> Result<&[CpuSet]> {
        let cpus = cpus.intersection(self.mask);
        if let Some(i) = self.lists.iter().position(|(set, _)| *set == cpus) {
            return Ok(&self.lists[i].1);
        }
        let mask = self.mask;
        let mut covered = CpuSet::new();
        let mut cores = Vec::new();
        for cpu in &cpus {
            if covered.contains(cpu) {
                continue;
            }
            let mut core = self.siblings(cpu)?.intersection(mask);
            core.insert(cpu);
            let core = core.difference(&covered);
            covered.extend_from(&core);
            cores.push(core);
        }
        cores.sort_by_key(|c| c.first());
        self.lists.push((cpus, cores));
        Ok(self.lists.last().map_or(&[], |(_, c)| c.as_slice()))
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
    fn cores_are_siblings_in_the_mask_by_lowest_cpu() {
        let t = topo();
        let mask = set("0-2,5-7");
        let mut cores = Cores::new(&t, &mask);
        let got = cores.cores_in(&set("0-7")).unwrap().to_vec();
        assert_eq!(got, vec![set("0"), set("1,5"), set("2,6"), set("7")]);
    }

    #[test]
    fn a_core_reaches_siblings_outside_the_given_cpus() {
        let t = topo();
        let mask = set("0-7");
        let mut cores = Cores::new(&t, &mask);
        let got = cores.cores_in(&set("5-6")).unwrap().to_vec();
        assert_eq!(got, vec![set("1,5"), set("2,6")]);
    }

    #[test]
    fn inconsistent_siblings_never_overlap() {
        let t = StaticTopology {
            siblings: vec![set("0-1"), set("1-2"), set("1-2")],
            gpus: vec![],
        };
        let mask = set("0-2");
        let mut cores = Cores::new(&t, &mask);
        let got = cores.cores_in(&mask).unwrap().to_vec();
        assert_eq!(got, vec![set("0-1"), set("2")]);
    }
}
