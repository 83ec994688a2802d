//! The inventory file's one format: a magic line with the version, a line with the body's
//! length and checksum, and the body (the inventory in a compact little-endian binary layout).
//!
//! ```text
//! cpuplan-inventory 5
//! 2311 9f1c0b2a77e4d1c3
//! <2311 bytes>
//! ```
//!
//! The length is the body's in bytes and the checksum ([`checksum`]) in hex: a truncated,
//! padded or altered file, or one of another version (a version 2 file's body is JSON, a
//! version 3 file's checksum is byte-wise FNV-1a 64, a version 4 file's PCI functions have no
//! CPU node), is refused whole ([`decode`]), never
//! half-used.
//!
//! The body, every integer little-endian, in this order (`str` is a `u32` byte length and the
//! bytes; `set` a CPU set: a `u16` count of ranges, then each range's first and last CPU as
//! `u16`s, ascending, neither overlapping nor touching, none past CPU 8191, so that one set has
//! one spelling; `opt<T>` a byte 0 (none) or 1 and then a `T`; `list<T>` a `u32` count and the
//! items):
//!
//! | field | layout |
//! |---|---|
//! | `boot_id`, `root`, `topology_root` | `str` each |
//! | `stamp` | `str` online, `str` running, the PCI and driver directories (`u8` present, `u64` inode, `i64` ctime ns, `i64` mtime ns, `u32` entries, `u64` names hash), `str` mounts |
//! | `online`, `running` | `set` each |
//! | `cores` | `list<u16>` of each core's number of CPUs, then all the cores' CPU ids as `u16`s (each core's ascending) |
//! | `core_of` | `u8` 0 where each CPU's core is the one that lists it (what sysfs gives: the cores say it all), else 1 and a `list<u16>`, `0xffff` for a CPU that was not online |
//! | `nodes` | `list<(u32 id, set cpus)>` |
//! | `pci` | `list<(str address, opt<u32> class, opt<u32> vendor, opt<u32> node, opt<set> local, opt<cpu_node>)>`; a `cpu_node` is a `u8` 0 and `u32` node, `set` cpus, `opt<str>` note (the nearest node with CPUs), or a `u8` 1 and `str` why (unplaced) |
//! | `nvidia` | `list<(str address, opt<u32> minor, opt<str> uuid)>` |
//! | `caps_major` | `opt<i64>` |
//! | `cgroup_mounts` | `opt<list<(str root, str mount point, str type, str source, str super options)>>` |
//!
//! Decoding is bounded and total: every length and count is checked against the bytes left
//! before anything is allocated for it (each item takes at least one byte, so no list can
//! reserve more than a small multiple of the file's size), a text that is not UTF-8, a set that
//! is not canonical, a tag that is neither 0 nor 1 or bytes left over refuse the file.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

use super::stamp::{DirStamp, Stamp, FNV_OFFSET, FNV_PRIME};
use super::{Cores, HostInventory, PciFunction};
use crate::cpu_node::CpuNode;
use crate::cpuset::{CpuSet, Words, MAX_CPU};
use crate::gpu::nvidia::NvidiaGpu;
use crate::mountinfo::MountInfo;
use crate::topology::NumaNode;

/// The first line's word.
pub const MAGIC: &str = "cpuplan-inventory";

/// The format's version: a file of another version is read afresh and written again.
pub const FORMAT_VERSION: u32 = 5;

/// The most bytes an inventory file may have (a host with 8192 CPUs and 1000 PCI functions fits).
pub const MAX_FILE: usize = 1 << 20;

/// `core_of`'s word for a CPU that was not online (a host has at most 8192 cores).
const NO_CORE: u16 = u16::MAX;

/// The inventory as the file holds it.
pub fn encode(inv: &HostInventory) -> Vec<u8> {
    let mut w = Writer(Vec::with_capacity(4096));
    w.str(inv.boot_id.as_bytes());
    w.str(inv.root.as_os_str().as_bytes());
    w.str(inv.topology_root.as_os_str().as_bytes());
    w.stamp(&inv.stamp);
    w.set(&inv.online);
    w.set(&inv.running);
    w.count(inv.cores.len());
    for ids in inv.cores.iter() {
        w.u16(ids.len() as u16);
    }
    for id in inv.cores.iter().flatten() {
        w.u16(*id);
    }
    // Where each CPU's core is the one that lists it (sysfs as the kernel writes it), the
    // cores say it all; else (a fixture's odd lists) each CPU's core is written out.
    if derived_core_of(&inv.cores) == inv.core_of {
        w.0.push(0);
    } else {
        w.0.push(1);
        w.count(inv.core_of.len());
        for c in &inv.core_of {
            w.u16(c.and_then(|c| u16::try_from(c).ok()).unwrap_or(NO_CORE));
        }
    }
    w.count(inv.nodes.len());
    for n in &inv.nodes {
        w.u32(n.id);
        w.set(&n.cpus);
    }
    w.count(inv.pci.len());
    for f in &inv.pci {
        w.str(f.address.as_bytes());
        w.opt(f.class, Writer::u32);
        w.opt(f.vendor, Writer::u32);
        w.opt(f.node, Writer::u32);
        w.opt(f.local.as_ref(), Writer::set);
        w.opt(f.cpu_node.as_ref(), Writer::cpu_node);
    }
    w.count(inv.nvidia.len());
    for g in &inv.nvidia {
        w.str(g.address.as_bytes());
        w.opt(g.minor, Writer::u32);
        w.opt(g.uuid.as_deref().map(str::as_bytes), Writer::str);
    }
    w.opt(inv.caps_major, |w, v| {
        w.0.extend_from_slice(&v.to_le_bytes())
    });
    w.opt(inv.cgroup_mounts.as_deref(), |w, mounts| {
        w.count(mounts.len());
        for m in mounts {
            for s in [
                &m.root,
                &m.mount_point,
                &m.fs_type,
                &m.source,
                &m.super_options,
            ] {
                w.str(s.as_bytes());
            }
        }
    });
    let body = w.0;
    let mut out = format!(
        "{MAGIC} {FORMAT_VERSION}\n{} {:016x}\n",
        body.len(),
        checksum(&body)
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
}

/// The body's checksum: FNV-1a 64 over its 8-byte little-endian words (the last one padded
/// with zeros) and then its length, each product folded (`h ^= h >> 32`) so that a word's
/// high bits reach the low ones. Every step is a bijection of the sum so far, so a change to
/// any one word always changes the result; it takes one multiply per eight bytes where
/// byte-wise FNV-1a takes eight (a start checks a file of a few KB).
pub fn checksum(body: &[u8]) -> u64 {
    let step = |h: u64, w: u64| {
        let h = (h ^ w).wrapping_mul(FNV_PRIME);
        h ^ (h >> 32)
    };
    let mut words = body.chunks_exact(8);
    let mut h = FNV_OFFSET;
    for w in &mut words {
        h = step(h, u64::from_le_bytes(w.try_into().unwrap_or_default()));
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        let mut last = [0u8; 8];
        last[..tail.len()].copy_from_slice(tail);
        h = step(h, u64::from_le_bytes(last));
    }
    step(h, body.len() as u64)
}

/// The inventory a file's bytes hold, or why they hold none (in words).
pub fn decode(bytes: &[u8]) -> Result<HostInventory, String> {
    let (magic, rest) = split_line(bytes).ok_or("no header line")?;
    if !is_header(magic) {
        return Err(format!(
            "not a version {FORMAT_VERSION} inventory (header {:?})",
            String::from_utf8_lossy(&magic[..magic.len().min(40)])
        ));
    }
    let (frame, body) = split_line(rest).ok_or("no length line")?;
    let (len, sum) = parse_frame(frame).ok_or("the length line is not a length and a checksum")?;
    if body.len() != len {
        return Err(format!(
            "the body has {} bytes, the header says {len} (truncated or padded)",
            body.len()
        ));
    }
    if checksum(body) != sum {
        return Err("the body's checksum does not match".into());
    }
    let mut r = Reader { b: body, at: 0 };
    let inv = r
        .inventory()
        .map_err(|what| format!("the body does not parse: {what} at byte {}", r.at))?;
    if r.at != body.len() {
        return Err(format!(
            "the body does not parse: {} bytes after its end",
            body.len() - r.at
        ));
    }
    Ok(inv)
}

/// Whether `line` is `cpuplan-inventory <FORMAT_VERSION>`.
fn is_header(line: &[u8]) -> bool {
    line.strip_prefix(MAGIC.as_bytes())
        .and_then(|l| l.strip_prefix(b" "))
        .and_then(parse_decimal)
        == Some(FORMAT_VERSION as usize)
}

/// The frame line's length (decimal) and checksum (16 lowercase hex digits), as [`encode`]
/// writes them and in no other spelling.
fn parse_frame(line: &[u8]) -> Option<(usize, u64)> {
    let space = line.iter().position(|b| *b == b' ')?;
    let (len, sum) = (&line[..space], &line[space + 1..]);
    if sum.len() != 16 {
        return None;
    }
    let mut h = 0u64;
    for b in sum {
        let v = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => return None,
        };
        h = h << 4 | u64::from(v);
    }
    Some((parse_decimal(len)?, h))
}

/// A decimal number without sign or leading zero (a length never has 12 digits).
fn parse_decimal(digits: &[u8]) -> Option<usize> {
    if digits.is_empty() || digits.len() > 12 || (digits[0] == b'0' && digits.len() > 1) {
        return None;
    }
    digits.iter().try_fold(0usize, |n, b| {
        b.is_ascii_digit().then(|| n * 10 + usize::from(b - b'0'))
    })
}

fn split_line(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let nl = bytes.iter().take(128).position(|b| *b == b'\n')?;
    Some((&bytes[..nl], &bytes[nl + 1..]))
}

/// Each CPU's core where every CPU is in the one core that lists it: up to the highest CPU
/// listed, `None` for a CPU no core lists.
fn derived_core_of(cores: &Cores) -> Vec<Option<u32>> {
    let top = cores
        .iter()
        .flatten()
        .max()
        .map_or(0, |c| usize::from(*c) + 1);
    let mut core_of = vec![None; top];
    for (i, ids) in cores.iter().enumerate() {
        for id in ids {
            core_of[usize::from(*id)] = Some(i as u32);
        }
    }
    core_of
}

/// The body being written.
struct Writer(Vec<u8>);

impl Writer {
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    /// A list's count (an inventory never has 4 billion of anything).
    fn count(&mut self, n: usize) {
        self.u32(u32::try_from(n).unwrap_or(u32::MAX));
    }

    fn str(&mut self, s: &[u8]) {
        self.count(s.len());
        self.0.extend_from_slice(s);
    }

    /// `set` as its ranges of consecutive CPUs.
    fn set(&mut self, set: &CpuSet) {
        let mut ranges: Vec<(u16, u16)> = Vec::new();
        for cpu in set.iter().map(|c| c as u16) {
            match ranges.last_mut() {
                Some((_, hi)) if *hi + 1 == cpu => *hi = cpu,
                _ => ranges.push((cpu, cpu)),
            }
        }
        self.u16(ranges.len() as u16);
        for (lo, hi) in ranges {
            self.u16(lo);
            self.u16(hi);
        }
    }

    fn cpu_node(&mut self, c: &CpuNode) {
        match c {
            CpuNode::Nearest { node, cpus, note } => {
                self.0.push(0);
                self.u32(*node);
                self.set(cpus);
                self.opt(note.as_deref().map(str::as_bytes), Writer::str);
            }
            CpuNode::Unplaced { why } => {
                self.0.push(1);
                self.str(why.as_bytes());
            }
        }
    }

    fn opt<T>(&mut self, v: Option<T>, put: impl FnOnce(&mut Self, T)) {
        match v {
            None => self.0.push(0),
            Some(v) => {
                self.0.push(1);
                put(self, v);
            }
        }
    }

    fn dir(&mut self, d: &DirStamp) {
        self.0.push(u8::from(d.present));
        self.u64(d.ino);
        self.u64(d.ctime_ns as u64);
        self.u64(d.mtime_ns as u64);
        self.u32(d.entries);
        self.u64(d.names);
    }

    fn stamp(&mut self, s: &Stamp) {
        self.str(s.online.as_bytes());
        self.str(s.running.as_bytes());
        self.dir(&s.pci);
        self.dir(&s.driver);
        self.str(s.mounts.as_bytes());
    }
}

/// What in the body is out of place (the reader knows where).
type Bad = &'static str;

/// The body being read: every read checks the bytes left first.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Bad> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.b.len());
        let end = end.ok_or("a field runs past the end")?;
        let out = &self.b[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn left(&self) -> usize {
        self.b.len() - self.at
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Bad> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, Bad> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, Bad> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, Bad> {
        self.array().map(u64::from_le_bytes)
    }

    /// A list's count, refused where its items (each at least `min` bytes) cannot fit in
    /// what is left: nothing is ever reserved for items that are not there.
    fn count(&mut self, min: usize) -> Result<usize, Bad> {
        let n = self.u32()? as usize;
        if n > self.left() / min {
            return Err("a count larger than the bytes left");
        }
        Ok(n)
    }

    fn bytes(&mut self) -> Result<&'a [u8], Bad> {
        let n = self.count(1)?;
        self.take(n)
    }

    fn string(&mut self) -> Result<String, Bad> {
        let b = self.bytes()?;
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| "a text that is not UTF-8")
    }

    fn path(&mut self) -> Result<PathBuf, Bad> {
        Ok(PathBuf::from(OsString::from_vec(self.bytes()?.to_vec())))
    }

    fn u16(&mut self) -> Result<u16, Bad> {
        self.array().map(u16::from_le_bytes)
    }

    /// A set's ranges, as [`Writer::set`] writes them, into its bit words (inline up to CPU
    /// 255).
    fn set(&mut self) -> Result<CpuSet, Bad> {
        let n = usize::from(self.u16()?);
        let raw = self.take(n * 4)?;
        let at = |i: usize| usize::from(u16::from_le_bytes([raw[i], raw[i + 1]]));
        let Some(top) = n.checked_sub(1).map(|last| at(4 * last + 2)) else {
            return Ok(CpuSet::new());
        };
        if top > MAX_CPU {
            return Err("a CPU set past the highest CPU");
        }
        let mut words = Words::from_elem(0, top / 64 + 1);
        let mut next = 0;
        for r in 0..n {
            let (lo, hi) = (at(4 * r), at(4 * r + 2));
            if lo > hi || lo < next || hi > top {
                return Err("a CPU set's ranges out of order");
            }
            next = hi + 2;
            for (w, word) in words.iter_mut().enumerate().take(hi / 64 + 1).skip(lo / 64) {
                let from = if w == lo / 64 { lo % 64 } else { 0 };
                let to = if w == hi / 64 { hi % 64 } else { 63 };
                *word |= (u64::MAX >> (63 - (to - from))) << from;
            }
        }
        CpuSet::from_words(words).ok_or("a CPU set past the highest CPU")
    }

    fn opt<T>(&mut self, get: impl FnOnce(&mut Self) -> Result<T, Bad>) -> Result<Option<T>, Bad> {
        match self.u8()? {
            0 => Ok(None),
            1 => get(self).map(Some),
            _ => Err("a tag that is neither 0 nor 1"),
        }
    }

    fn cpu_node(&mut self) -> Result<CpuNode, Bad> {
        match self.u8()? {
            0 => Ok(CpuNode::Nearest {
                node: self.u32()?,
                cpus: self.set()?,
                note: self.opt(Self::string)?,
            }),
            1 => Ok(CpuNode::Unplaced {
                why: self.string()?,
            }),
            _ => Err("a CPU node kind that is neither 0 nor 1"),
        }
    }

    fn dir(&mut self) -> Result<DirStamp, Bad> {
        let present = match self.u8()? {
            0 => false,
            1 => true,
            _ => return Err("a tag that is neither 0 nor 1"),
        };
        Ok(DirStamp {
            present,
            ino: self.u64()?,
            ctime_ns: self.u64()? as i64,
            mtime_ns: self.u64()? as i64,
            entries: self.u32()?,
            names: self.u64()?,
        })
    }

    fn stamp(&mut self) -> Result<Stamp, Bad> {
        Ok(Stamp {
            online: self.string()?,
            running: self.string()?,
            pci: self.dir()?,
            driver: self.dir()?,
            mounts: self.string()?,
        })
    }

    /// A list of `count(min)` items each read by `item`.
    fn list<T>(
        &mut self,
        min: usize,
        mut item: impl FnMut(&mut Self) -> Result<T, Bad>,
    ) -> Result<Vec<T>, Bad> {
        let n = self.count(min)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(item(self)?);
        }
        Ok(out)
    }

    /// The cores' sizes, then their ids (two allocations).
    fn cores(&mut self) -> Result<Cores, Bad> {
        let sizes: Vec<u16> = self.list(2, Self::u16)?;
        let total: usize = sizes.iter().map(|s| usize::from(*s)).sum();
        if total > self.left() / 2 {
            return Err("a count larger than the bytes left");
        }
        let ids = self
            .take(total * 2)?
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        Cores::from_parts(ids, &sizes).ok_or("a core's CPUs out of order")
    }

    fn inventory(&mut self) -> Result<HostInventory, Bad> {
        let boot_id = self.string()?;
        let root = self.path()?;
        let topology_root = self.path()?;
        let stamp = self.stamp()?;
        let online = self.set()?;
        let running = self.set()?;
        let cores = self.cores()?;
        let core_of = match self.u8()? {
            0 => derived_core_of(&cores),
            1 => self.list(2, |r| match r.u16()? {
                NO_CORE => Ok(None),
                i if usize::from(i) < cores.len() => Ok(Some(u32::from(i))),
                _ => Err("a CPU's core past the cores"),
            })?,
            _ => return Err("a tag that is neither 0 nor 1"),
        };
        let nodes = self.list(6, |r| {
            Ok(NumaNode {
                id: r.u32()?,
                cpus: r.set()?,
            })
        })?;
        let pci = self.list(9, |r| {
            Ok(PciFunction {
                address: r.string()?,
                class: r.opt(Self::u32)?,
                vendor: r.opt(Self::u32)?,
                node: r.opt(Self::u32)?,
                local: r.opt(Self::set)?,
                cpu_node: r.opt(Self::cpu_node)?,
            })
        })?;
        let nvidia = self.list(6, |r| {
            Ok(NvidiaGpu {
                address: r.string()?,
                minor: r.opt(Self::u32)?,
                uuid: r.opt(Self::string)?,
            })
        })?;
        let caps_major = self.opt(|r| r.u64().map(|v| v as i64))?;
        let cgroup_mounts = self.opt(|r| {
            r.list(20, |r| {
                Ok(MountInfo {
                    root: r.string()?,
                    mount_point: r.string()?,
                    fs_type: r.string()?,
                    source: r.string()?,
                    super_options: r.string()?,
                })
            })
        })?;
        Ok(HostInventory {
            boot_id,
            root,
            topology_root,
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
}

#[cfg(test)]
mod tests;
