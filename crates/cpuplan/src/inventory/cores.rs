//! The cores a host inventory keeps: the distinct SMT sibling sets of the online CPUs, kept
//! flat (two allocations for any number of cores, where a `Vec<CpuSet>` makes one per core).

use serde::ser::{Serialize, SerializeSeq, Serializer};

use crate::cpuset::{format_cpu_list, CpuSet, Words, MAX_CPU};

/// The distinct SMT sibling sets of the online CPUs: each set's CPU ids, ascending, one set
/// after another, and where each set ends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cores {
    /// The sets' CPU ids, set after set.
    cpus: Vec<u16>,
    /// Where each set ends in `cpus`.
    ends: Vec<u32>,
}

impl Cores {
    /// How many sets.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Set `i`'s CPU ids, ascending.
    pub fn ids(&self, i: usize) -> Option<&[u16]> {
        let end = *self.ends.get(i)? as usize;
        let start = match i {
            0 => 0,
            _ => self.ends[i - 1] as usize,
        };
        self.cpus.get(start..end)
    }

    /// Set `i` (its bit words, inline up to CPU 255).
    pub fn get(&self, i: usize) -> Option<CpuSet> {
        let ids = self.ids(i)?;
        let Some(top) = ids.last() else {
            return Some(CpuSet::new());
        };
        let mut words = Words::from_elem(0, usize::from(*top) / 64 + 1);
        for id in ids.iter().map(|c| usize::from(*c)) {
            words[id / 64] |= 1 << (id % 64);
        }
        CpuSet::from_words(words)
    }

    /// Each set's CPU ids, in order.
    pub fn iter(&self) -> impl Iterator<Item = &[u16]> + '_ {
        (0..self.len()).filter_map(|i| self.ids(i))
    }

    /// The index of `set`, where it is one of them.
    pub fn position(&self, set: &CpuSet) -> Option<usize> {
        self.iter()
            .position(|ids| ids.iter().map(|c| usize::from(*c)).eq(set.iter()))
    }

    /// Adds `set` as the last one.
    pub fn push(&mut self, set: &CpuSet) {
        self.cpus.extend(set.iter().map(|c| c as u16));
        self.ends.push(self.cpus.len() as u32);
    }

    /// The sets whose sizes are `sizes`, their ids one after another in `cpus`; `None` where
    /// the sizes do not add up to the ids, or a set's ids are not ascending up to [`MAX_CPU`].
    pub(crate) fn from_parts(cpus: Vec<u16>, sizes: &[u16]) -> Option<Cores> {
        let mut ends = Vec::with_capacity(sizes.len());
        let mut end = 0usize;
        for size in sizes {
            let start = end;
            end += usize::from(*size);
            let ids = cpus.get(start..end)?;
            let ascending = ids.windows(2).all(|w| w[0] < w[1]);
            if !ascending || ids.last().is_some_and(|c| usize::from(*c) > MAX_CPU) {
                return None;
            }
            ends.push(end as u32);
        }
        (end == cpus.len()).then_some(Cores { cpus, ends })
    }
}

/// As a list of cpu-list strings (`["0,112", "1,113"]`), for `inventory --json`.
impl Serialize for Cores {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.len()))?;
        for i in 0..self.len() {
            seq.serialize_element(&format_cpu_list(&self.get(i).unwrap_or_default()))?;
        }
        seq.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpuset::parse_cpu_list;

    #[test]
    fn sets_are_kept_flat_and_given_back_whole() {
        let sets: Vec<CpuSet> = ["0,112", "1,113", "8191", "", "64-127"]
            .iter()
            .map(|l| parse_cpu_list(l).unwrap())
            .collect();
        let mut cores = Cores::default();
        for s in &sets {
            cores.push(s);
        }
        assert_eq!(cores.len(), 5);
        for (i, s) in sets.iter().enumerate() {
            assert_eq!(cores.get(i).as_ref(), Some(s), "{i}");
            assert_eq!(cores.position(s), Some(i));
        }
        assert_eq!(cores.get(5), None);
        assert_eq!(cores.ids(0), Some(&[0u16, 112][..]));
        assert_eq!(
            serde_json::to_string(&cores).unwrap(),
            r#"["0,112","1,113","8191","","64-127"]"#
        );
        let sizes: Vec<u16> = cores.iter().map(|ids| ids.len() as u16).collect();
        assert_eq!(Cores::from_parts(cores.cpus.clone(), &sizes), Some(cores));
        assert_eq!(Cores::from_parts(vec![3, 2], &[2]), None, "not ascending");
        assert_eq!(Cores::from_parts(vec![2, 2], &[2]), None, "twice");
        assert_eq!(Cores::from_parts(vec![8192], &[1]), None, "past CPU 8191");
        assert_eq!(Cores::from_parts(vec![1, 2], &[1]), None, "ids left over");
        assert_eq!(Cores::from_parts(vec![1], &[2]), None, "too few ids");
    }
}
