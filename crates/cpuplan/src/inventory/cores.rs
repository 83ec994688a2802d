//! The cores a host inventory keeps: the distinct SMT sibling sets of the online CPUs, kept
//! flat (two allocations for any number of cores, where a `Vec<CpuSet>` makes one per core).

use serde::de::{Deserialize, Deserializer, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeSeq, Serializer};

use crate::cpuset::{format_cpu_list, CpuSet, Words};

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
    /// the sizes do not add up to the ids, or a set's ids are not ascending up to [`crate::cpuset::MAX_CPU`].
    pub(crate) fn from_parts(cpus: Vec<u16>, sizes: &[u16]) -> Option<Cores> {
        let mut ends = Vec::with_capacity(sizes.len());
        let mut end = 0usize;
        for size in sizes {
            let start = end;
            end += usize::from(*size);
            let ids = cpus.get(start..end)?;
            let ascending = ids.windows(2).all(|w| w[0] < w[1]);
            if !ascending
                || ids
                    .last()
                    .is_some_and(|c| usize::from(*c) > crate::cpuset::MAX_CPU)
            {
                return None;
            }
            ends.push(end as u32);
        }
        (end == cpus.len()).then_some(Cores { cpus, ends })
    }
}

/// In a human-readable format (`inventory --json`) as a list of cpu-list strings (`["0,112",
/// "1,113"]`); in a binary one (the inventory's file, [`super::format`]) as it is kept: all the
/// CPU ids, then each set's size.
impl Serialize for Cores {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if !s.is_human_readable() {
            let sizes: Vec<u16> = self.iter().map(|ids| ids.len() as u16).collect();
            return (&self.cpus, sizes).serialize(s);
        }
        let mut seq = s.serialize_seq(Some(self.len()))?;
        for i in 0..self.len() {
            seq.serialize_element(&format_cpu_list(&self.get(i).unwrap_or_default()))?;
        }
        seq.end()
    }
}

/// From what [`Serialize`] writes: each set parsed as a [`CpuSet`], or the ids and sizes
/// checked as [`Cores::from_parts`] checks them (each set ascending, up to
/// [`crate::cpuset::MAX_CPU`]).
impl<'de> Deserialize<'de> for Cores {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Sets;
        impl<'de> Visitor<'de> for Sets {
            type Value = Cores;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list of cpu lists")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Cores, A::Error> {
                let mut cores = Cores::default();
                while let Some(set) = seq.next_element::<CpuSet>()? {
                    cores.push(&set);
                }
                Ok(cores)
            }
        }
        if d.is_human_readable() {
            return d.deserialize_seq(Sets);
        }
        let (cpus, sizes) = <(Vec<u16>, Vec<u16>)>::deserialize(d)?;
        Cores::from_parts(cpus, &sizes)
            .ok_or_else(|| serde::de::Error::custom("a core's CPUs out of order"))
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
        assert_eq!(
            Cores::from_parts(cores.cpus.clone(), &sizes),
            Some(cores.clone())
        );
        assert_eq!(Cores::from_parts(vec![3, 2], &[2]), None, "not ascending");
        assert_eq!(Cores::from_parts(vec![2, 2], &[2]), None, "twice");
        assert_eq!(Cores::from_parts(vec![8192], &[1]), None, "past CPU 8191");
        assert_eq!(Cores::from_parts(vec![1, 2], &[1]), None, "ids left over");
        assert_eq!(Cores::from_parts(vec![1], &[2]), None, "too few ids");
        // Both serde forms give them back: the text one and the binary one.
        let bytes = postcard::to_allocvec(&cores).unwrap();
        assert_eq!(postcard::from_bytes::<Cores>(&bytes).unwrap(), cores);
        let bad = postcard::to_allocvec(&(vec![5u16, 5], vec![2u16])).unwrap();
        assert!(postcard::from_bytes::<Cores>(&bad).is_err(), "a core 5,5");
        let json = serde_json::to_string(&cores).unwrap();
        assert_eq!(serde_json::from_str::<Cores>(&json).unwrap(), cores);
        for bad in [r#"["3-2"]"#, r#"["8192"]"#, r#"["0,,1"]"#, r#""0""#] {
            assert!(serde_json::from_str::<Cores>(bad).is_err(), "{bad}");
        }
    }
}
