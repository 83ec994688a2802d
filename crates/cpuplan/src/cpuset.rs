//! CPU sets and the cpu-list text form (`0-3,8,10-11`) that sysfs, cgroups and taskset use.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use smallvec::SmallVec;

/// The highest CPU id a [`CpuSet`] holds (the kernel's default `NR_CPUS` limit is 8192).
pub const MAX_CPU: usize = 8191;

/// A set of CPU ids, 0 to [`MAX_CPU`], iterated in ascending order.
#[derive(PartialEq, Eq, Hash, Default)]
pub struct CpuSet {
    /// Bit i of word w is CPU 64*w+i; trailing zero words are trimmed.
    words: Words,
}

/// A set's bit words: up to 256 CPUs held inline, so that a host's sets (a plan clones one per
/// CPU it consults) are made, cloned and dropped without an allocation; more spill to the heap.
pub(crate) type Words = SmallVec<[u64; 4]>;

/// A copy of the words (`SmallVec`'s own `Clone` collects them one by one; a set's words are
/// `Copy`, so this is one `memcpy`: a plan clones a set for each CPU it consults).
impl Clone for CpuSet {
    fn clone(&self) -> Self {
        CpuSet {
            words: Words::from_slice(&self.words),
        }
    }
}

/// A cpu list that does not parse, with the text quoted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid cpu list {}: {reason}", crate::quoted(.text))]
pub struct CpuListError {
    /// The whole text that was given.
    pub text: String,
    /// What is wrong with it.
    pub reason: String,
}

impl CpuSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// The CPUs `lo..=hi`; an error if `hi` is past [`MAX_CPU`] or `lo > hi`.
    pub fn range(lo: usize, hi: usize) -> Result<Self, CpuListError> {
        let mut s = Self::new();
        s.insert_range(lo, hi).map_err(|reason| CpuListError {
            text: format!("{lo}-{hi}"),
            reason,
        })?;
        Ok(s)
    }

    /// Adds `cpu`; returns false (and adds nothing) if it is past [`MAX_CPU`].
    pub fn insert(&mut self, cpu: usize) -> bool {
        if cpu > MAX_CPU {
            return false;
        }
        let w = cpu / 64;
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        self.words[w] |= 1u64 << (cpu % 64);
        true
    }

    fn insert_range(&mut self, lo: usize, hi: usize) -> Result<(), String> {
        if lo > hi {
            return Err(format!("reversed range {lo}-{hi}"));
        }
        if hi > MAX_CPU {
            return Err(format!("cpu {hi} is past the highest id {MAX_CPU}"));
        }
        let need = hi / 64 + 1;
        if self.words.len() < need {
            self.words.resize(need, 0);
        }
        for w in lo / 64..=hi / 64 {
            let from = if w == lo / 64 { lo % 64 } else { 0 };
            let to = if w == hi / 64 { hi % 64 } else { 63 };
            let bits = if to - from == 63 {
                u64::MAX
            } else {
                ((1u64 << (to - from + 1)) - 1) << from
            };
            self.words[w] |= bits;
        }
        Ok(())
    }

    /// The set whose bit words are `words` (trailing zero words trimmed); `None` past [`MAX_CPU`].
    pub(crate) fn from_words(mut words: Words) -> Option<CpuSet> {
        trim_words(&mut words);
        (words.len() <= MAX_CPU / 64 + 1).then_some(CpuSet { words })
    }

    /// Removes `cpu`; returns whether it was there.
    pub fn remove(&mut self, cpu: usize) -> bool {
        let had = self.contains(cpu);
        if had {
            self.words[cpu / 64] &= !(1u64 << (cpu % 64));
            self.trim();
        }
        had
    }

    /// Whether `cpu` is in the set.
    pub fn contains(&self, cpu: usize) -> bool {
        self.words
            .get(cpu / 64)
            .is_some_and(|w| w & (1u64 << (cpu % 64)) != 0)
    }

    /// How many CPUs the set holds.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set holds no CPU.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }

    /// The lowest CPU, if any.
    pub fn first(&self) -> Option<usize> {
        self.iter().next()
    }

    /// The highest CPU, if any.
    pub fn last(&self) -> Option<usize> {
        self.words
            .iter()
            .enumerate()
            .rev()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| i * 64 + 63 - w.leading_zeros() as usize)
    }

    /// The CPUs in ascending order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            words: &self.words,
            word: 0,
            bits: self.words.first().copied().unwrap_or(0),
        }
    }

    /// The CPUs in both sets.
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        let mut words: Words = self
            .words
            .iter()
            .zip(&other.words)
            .map(|(a, b)| a & b)
            .collect();
        trim_words(&mut words);
        CpuSet { words }
    }

    /// The CPUs in either set.
    pub fn union(&self, other: &CpuSet) -> CpuSet {
        let (long, short) = if self.words.len() >= other.words.len() {
            (self, other)
        } else {
            (other, self)
        };
        let mut words = long.words.clone();
        for (w, s) in words.iter_mut().zip(&short.words) {
            *w |= s;
        }
        CpuSet { words }
    }

    /// The CPUs of `self` that are not in `other`.
    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        let mut words = self.words.clone();
        for (w, o) in words.iter_mut().zip(&other.words) {
            *w &= !o;
        }
        trim_words(&mut words);
        CpuSet { words }
    }

    /// Whether every CPU of `self` is in `other`.
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.words
            .iter()
            .enumerate()
            .all(|(i, w)| w & !other.words.get(i).copied().unwrap_or(0) == 0)
    }

    /// Whether the two sets share a CPU.
    pub fn intersects(&self, other: &CpuSet) -> bool {
        self.words.iter().zip(&other.words).any(|(a, b)| a & b != 0)
    }

    /// Adds every CPU of `other`.
    pub fn extend_from(&mut self, other: &CpuSet) {
        if self.words.len() < other.words.len() {
            self.words.resize(other.words.len(), 0);
        }
        for (w, o) in self.words.iter_mut().zip(&other.words) {
            *w |= o;
        }
    }

    fn trim(&mut self) {
        trim_words(&mut self.words);
    }
}

fn trim_words(words: &mut Words) {
    while words.last() == Some(&0) {
        words.pop();
    }
}

/// Iterator over a [`CpuSet`]'s CPUs in ascending order.
pub struct Iter<'a> {
    words: &'a [u64],
    word: usize,
    bits: u64,
}

impl Iterator for Iter<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        loop {
            if self.bits != 0 {
                let bit = self.bits.trailing_zeros() as usize;
                self.bits &= self.bits - 1;
                return Some(self.word * 64 + bit);
            }
            self.word += 1;
            self.bits = *self.words.get(self.word)?;
        }
    }
}

impl<'a> IntoIterator for &'a CpuSet {
    type Item = usize;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl FromIterator<usize> for CpuSet {
    /// Collects CPU ids; ids past [`MAX_CPU`] are dropped.
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> Self {
        let mut s = CpuSet::new();
        for cpu in iter {
            s.insert(cpu);
        }
        s
    }
}

/// The CPUs in a list such as `0-3,8,10-11` (as sysfs and taskset write them); empty for an empty string.
///
/// Surrounding whitespace, newlines and trailing NUL bytes are tolerated.
pub fn parse_cpu_list(text: &str) -> Result<CpuSet, CpuListError> {
    let err = |reason: String| CpuListError {
        text: text.to_string(),
        reason,
    };
    let body = text.trim_end_matches('\0').trim();
    let mut set = CpuSet::new();
    if body.is_empty() {
        return Ok(set);
    }
    for item in body.split(',') {
        if item.is_empty() {
            return Err(err("empty item".into()));
        }
        let (lo, hi) = match item.split_once('-') {
            Some((a, b)) => (parse_id(a, text)?, parse_id(b, text)?),
            None => {
                let n = parse_id(item, text)?;
                (n, n)
            }
        };
        set.insert_range(lo, hi).map_err(err)?;
    }
    Ok(set)
}

fn parse_id(s: &str, text: &str) -> Result<usize, CpuListError> {
    let err = |reason: String| CpuListError {
        text: text.to_string(),
        reason,
    };
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err(format!("{s:?} is not a cpu id")));
    }
    if s.len() > 5 {
        return Err(err(format!("cpu {s} is past the highest id {MAX_CPU}")));
    }
    let n: usize = s
        .parse()
        .map_err(|_| err(format!("{s:?} is not a cpu id")))?;
    if n > MAX_CPU {
        return Err(err(format!("cpu {n} is past the highest id {MAX_CPU}")));
    }
    Ok(n)
}

/// `cpus` as ranges, the inverse of [`parse_cpu_list`].
pub fn format_cpu_list(cpus: &CpuSet) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let mut it = cpus.iter().peekable();
    while let Some(lo) = it.next() {
        let mut hi = lo;
        while it.peek() == Some(&(hi + 1)) {
            hi += 1;
            it.next();
        }
        if !out.is_empty() {
            out.push(',');
        }
        if hi == lo {
            let _ = write!(out, "{lo}");
        } else {
            let _ = write!(out, "{lo}-{hi}");
        }
    }
    out
}

impl FromStr for CpuSet {
    type Err = CpuListError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_cpu_list(s)
    }
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_cpu_list(self))
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({:?})", format_cpu_list(self))
    }
}

/// As its cpu-list text (`"0-3,8"`) in a human-readable format (JSON: plan files, `--json`);
/// as its bit words, lowest first, in a binary one (the host inventory's file): no text to
/// format or parse.
impl Serialize for CpuSet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(&format_cpu_list(self))
        } else {
            s.collect_seq(self.words.iter())
        }
    }
}

/// From what [`Serialize`] writes: a cpu list parsed where the deserializer holds it (no copy
/// of the text), or at most `MAX_CPU / 64 + 1` bit words.
impl<'de> Deserialize<'de> for CpuSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Form;
        impl<'de> serde::de::Visitor<'de> for Form {
            type Value = CpuSet;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a cpu list (\"0-3,8\") or its bit words")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<CpuSet, E> {
                parse_cpu_list(text).map_err(E::custom)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<CpuSet, A::Error> {
                let mut words = Words::new();
                while let Some(w) = seq.next_element::<u64>()? {
                    if words.len() > MAX_CPU / 64 {
                        return Err(serde::de::Error::custom("a CPU set past the highest CPU"));
                    }
                    words.push(w);
                }
                CpuSet::from_words(words)
                    .ok_or_else(|| serde::de::Error::custom("a CPU set past the highest CPU"))
            }
        }
        if d.is_human_readable() {
            d.deserialize_str(Form)
        } else {
            d.deserialize_seq(Form)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[usize]) -> CpuSet {
        ids.iter().copied().collect()
    }

    #[test]
    fn parses_sysfs_forms() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11").unwrap(),
            set(&[0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list(" 0-1\n").unwrap(), set(&[0, 1]));
        assert_eq!(parse_cpu_list("0-1\n\0").unwrap(), set(&[0, 1]));
        assert_eq!(parse_cpu_list("").unwrap(), CpuSet::new());
        assert_eq!(parse_cpu_list("\n").unwrap(), CpuSet::new());
        assert_eq!(parse_cpu_list("8191").unwrap(), set(&[8191]));
        assert_eq!(parse_cpu_list("5-5").unwrap(), set(&[5]));
    }

    #[test]
    fn rejects_bad_lists_quoting_the_text() {
        for bad in [
            "3-1",
            "1,,2",
            "a",
            "1-2-3",
            "-1",
            "8192",
            "0-8192",
            ",",
            "1,",
            " 1, 2",
            "+1",
            "99999999999999999999",
        ] {
            let e = parse_cpu_list(bad).unwrap_err();
            assert_eq!(e.text, bad);
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn formats_runs_as_ranges() {
        assert_eq!(
            format_cpu_list(&set(&[0, 1, 2, 3, 8, 10, 11])),
            "0-3,8,10-11"
        );
        assert_eq!(format_cpu_list(&set(&[5])), "5");
        assert_eq!(format_cpu_list(&CpuSet::new()), "");
        assert_eq!(format_cpu_list(&set(&[63, 64])), "63-64");
        assert_eq!(CpuSet::range(0, 223).unwrap().to_string(), "0-223");
    }

    #[test]
    fn set_algebra() {
        let a = parse_cpu_list("0-9").unwrap();
        let b = parse_cpu_list("5-200").unwrap();
        assert_eq!(a.intersection(&b).to_string(), "5-9");
        assert_eq!(a.union(&b).to_string(), "0-200");
        assert_eq!(a.difference(&b).to_string(), "0-4");
        assert_eq!(b.difference(&a).to_string(), "10-200");
        assert!(parse_cpu_list("6-7").unwrap().is_subset(&a));
        assert!(!b.is_subset(&a));
        assert!(a.intersects(&b));
        assert_eq!(b.len(), 196);
        assert_eq!(b.first(), Some(5));
        assert_eq!(b.last(), Some(200));
        assert_eq!(CpuSet::new().last(), None);
        let mut c = a.clone();
        assert!(c.remove(9));
        assert!(!c.remove(9));
        assert!(!c.insert(MAX_CPU + 1));
        assert_eq!(c.to_string(), "0-8");
        // Trimmed representation keeps equality structural.
        let mut d = set(&[1, 300]);
        d.remove(300);
        assert_eq!(d, set(&[1]));
    }

    #[test]
    fn sets_across_the_inline_words_behave_as_one_set() {
        use std::collections::hash_map::DefaultHasher;
        use std::hash::{Hash, Hasher};
        let hash = |s: &CpuSet| {
            let mut h = DefaultHasher::new();
            s.hash(&mut h);
            h.finish()
        };
        // 255 is the last CPU held inline, 256 the first that spills to the heap.
        for top in [63, 64, 255, 256, 1023, MAX_CPU] {
            let mut s = set(&[0, 10, top]);
            assert_eq!(s.last(), Some(top));
            assert_eq!(s.iter().collect::<Vec<_>>(), vec![0, 10, top]);
            let spilled = s.union(&set(&[MAX_CPU]));
            // A clone is equal and its own: changing it leaves the original as it was.
            for original in [&s, &spilled] {
                let mut copy = original.clone();
                assert_eq!(&copy, original);
                copy.insert(1);
                assert_ne!(&copy, original);
                assert!(!original.contains(1));
            }
            assert_eq!(spilled.intersection(&s), s);
            assert_eq!(
                spilled.difference(&set(&[MAX_CPU])),
                s.difference(&set(&[MAX_CPU]))
            );
            // Removing the highest CPU trims back to the same value, inline or not.
            assert!(s.remove(top));
            assert_eq!(s, set(&[0, 10]));
            assert_eq!(hash(&s), hash(&set(&[0, 10])));
            assert_eq!(s.to_string(), "0,10");
            let mut grown = set(&[0]);
            grown.extend_from(&set(&[10, top]));
            grown.remove(top);
            assert_eq!(grown, set(&[0, 10]));
        }
        let words = Words::from_vec(vec![1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(CpuSet::from_words(words), Some(set(&[0])));
        let past = Words::from_elem(1, MAX_CPU / 64 + 2);
        assert_eq!(CpuSet::from_words(past), None);
    }

    #[test]
    fn serde_uses_the_list_form() {
        let s = set(&[1, 2, 3, 7]);
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"1-3,7\"");
        let back: CpuSet = serde_json::from_str("\"1-3,7\"").unwrap();
        assert_eq!(back, s);
        assert!(serde_json::from_str::<CpuSet>("\"3-1\"").is_err());
    }
}
