//! The cheap check that a host inventory still describes the host, made at every start.
//!
//! What it looks at, and why each is enough for what the inventory holds:
//! - the text of `sys/devices/system/cpu/online` under the topology root (and under the host
//!   root where that is another tree): a CPU taken offline or brought online changes it, and
//!   with it the CPUs' sibling lists and the nodes' CPUs;
//! - `sys/bus/pci/devices` under the topology root: its entries' names and inode numbers, and
//!   the directory's own inode and change times. A hot-plugged or removed PCI function adds or
//!   removes an entry there;
//! - the NVIDIA driver's `proc/driver/nvidia/gpus` the same way: a driver reload removes and
//!   makes the directory again (a new inode, new times), and a GPU bound to or unbound from
//!   the driver adds or removes its entry;
//! - the host's mount namespace (the `proc/self/ns/mnt` link under the host root) for the
//!   cgroup mounts; and under a root other than `/` (a fixture tree, where the mount table is a
//!   plain file) the inode, size and change time of its `proc/self/mountinfo`.
//!
//! What it does not see: a file rewritten in place inside a PCI function's or the driver's
//! directory without the directory changing (no kernel does that for `class`, `vendor`,
//! `numa_node`, `local_cpulist` or `information`), and a cgroup hierarchy mounted later in the
//! same mount namespace: `cpuplan-hook inventory --refresh` reads the host again.

use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::fsutil::under;

/// What the stamp saw of one directory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirStamp {
    /// Whether it is there.
    pub present: bool,
    /// Its inode number.
    pub ino: u64,
    /// Its change time, in nanoseconds.
    pub ctime_ns: i64,
    /// Its modification time, in nanoseconds.
    pub mtime_ns: i64,
    /// How many entries it has.
    pub entries: u32,
    /// A hash (FNV-1a) of its entries' names and inode numbers, in name order.
    pub names: u64,
}

/// What the stamp saw of the host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    /// The topology root's online CPUs, as the kernel writes them (`-` without the file).
    pub online: String,
    /// The host root's, where it is another tree (empty where it is the same).
    pub running: String,
    /// The PCI devices directory.
    pub pci: DirStamp,
    /// The NVIDIA driver's GPUs directory.
    pub driver: DirStamp,
    /// The mount namespace (`mnt:[…]`), or what the mount table file's metadata says.
    pub mounts: String,
}

/// The online CPUs file under `root`, trimmed, or `-` where there is none.
fn online_text(root: &Path) -> String {
    match crate::fsutil::read_optional(&under(root, "/sys/devices/system/cpu/online")) {
        Ok(Some(t)) => t.trim_end_matches('\0').trim().to_string(),
        Ok(None) => "-".into(),
        Err(e) => format!("unreadable: {e}"),
    }
}

/// The boot id under `root` (`/proc/sys/kernel/random/boot_id`), empty where there is none.
pub fn boot_id(root: &Path) -> String {
    match crate::fsutil::read_optional(&under(root, "/proc/sys/kernel/random/boot_id")) {
        Ok(Some(t)) => t.trim().chars().take(64).collect(),
        _ => String::new(),
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a of `bytes`, continuing from `h`.
pub(crate) fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// FNV-1a of `bytes` from the offset basis.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    fnv1a(FNV_OFFSET, bytes)
}

fn dir_stamp(dir: &Path) -> DirStamp {
    let Ok(meta) = std::fs::metadata(dir) else {
        return DirStamp::default();
    };
    let mut names: Vec<(Vec<u8>, u64)> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .flatten()
            .map(|e| {
                use std::os::unix::ffi::OsStrExt;
                (e.file_name().as_bytes().to_vec(), e.ino())
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    let mut h = FNV_OFFSET;
    for (name, ino) in &names {
        h = fnv1a(h, name);
        h = fnv1a(h, &[0]);
        h = fnv1a(h, &ino.to_le_bytes());
    }
    DirStamp {
        present: true,
        ino: meta.ino(),
        ctime_ns: meta.ctime() * 1_000_000_000 + meta.ctime_nsec(),
        mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
        entries: names.len() as u32,
        names: h,
    }
}

fn mounts_stamp(root: &Path) -> String {
    let ns = match std::fs::read_link(under(root, "/proc/self/ns/mnt")) {
        Ok(link) => link.to_string_lossy().into_owned(),
        Err(_) => "-".into(),
    };
    if root == Path::new("/") {
        // procfs: /proc/self/mountinfo is the reader's own, with new metadata every process.
        return ns;
    }
    match std::fs::metadata(under(root, "/proc/self/mountinfo")) {
        Ok(m) => format!(
            "{ns}, mountinfo ino {} size {} ctime {}.{:09}",
            m.ino(),
            m.size(),
            m.ctime(),
            m.ctime_nsec()
        ),
        Err(_) => format!("{ns}, no mountinfo"),
    }
}

impl Stamp {
    /// What the host under `root` and `topology_root` shows now.
    pub fn read(root: &Path, topology_root: &Path) -> Stamp {
        Stamp {
            online: online_text(topology_root),
            running: if root == topology_root {
                String::new()
            } else {
                online_text(root)
            },
            pci: dir_stamp(&crate::gpus::pci_devices_dir(topology_root)),
            driver: dir_stamp(&topology_root.join(crate::gpu::nvidia::NVIDIA_GPUS_DIR)),
            mounts: mounts_stamp(root),
        }
    }

    /// What differs from `now`, in words (`None` when it still matches).
    pub fn changed(&self, now: &Stamp) -> Option<String> {
        let mut what = Vec::new();
        if self.online != now.online {
            what.push(format!("online CPUs {} -> {}", self.online, now.online));
        }
        if self.running != now.running {
            what.push(format!(
                "host online CPUs {} -> {}",
                self.running, now.running
            ));
        }
        if self.pci != now.pci {
            what.push(format!(
                "PCI devices changed ({} -> {} entries)",
                self.pci.entries, now.pci.entries
            ));
        }
        if self.driver != now.driver {
            what.push("the NVIDIA driver's GPUs directory changed".into());
        }
        if self.mounts != now.mounts {
            what.push(format!("mounts {} -> {}", self.mounts, now.mounts));
        }
        (!what.is_empty()).then(|| what.join(", "))
    }
}
