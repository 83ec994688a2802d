//! The cheap check that a host inventory still describes the host, made at every start.
//!
//! What it looks at, and why each is enough for what the inventory holds:
//! - the text of `sys/devices/system/cpu/online` under the topology root (and under the host
//!   root where that is another tree): a CPU taken offline or brought online changes it, and
//!   with it the CPUs' sibling lists and the nodes' CPUs;
//! - `sys/bus/pci/devices` under the topology root: its entries' names and inode numbers, and
//!   the directory's own inode number. A hot-plugged or removed PCI function adds or removes an
//!   entry there;
//! - the NVIDIA driver's `proc/driver/nvidia/gpus` the same way (a GPU bound to or unbound from
//!   the driver adds or removes its entry), and the inode number of the driver's
//!   `sys/module/nvidia`: sysfs numbers a directory anew each time it is made, without reusing
//!   a number soon, so a driver reload changes it (procfs may give the remade `gpus` directory
//!   its old number);
//! - the host's mount namespace (the `proc/self/ns/mnt` link under the host root) for the
//!   cgroup mounts; and under a root other than `/` (a fixture tree, where the mount table is a
//!   plain file) the inode, size and change time of its `proc/self/mountinfo`.
//!
//! Never a sysfs or procfs directory's times: the kernel sets them when it makes the directory's
//! in-memory inode, and makes it again whenever memory pressure evicted it, so they change with
//! nothing changed on the host (a stamp over them read "PCI devices changed (17 -> 17 entries)"
//! from one start to the next).
//!
//! What it does not see: a file rewritten in place inside a PCI function's or the driver's
//! directory without the directory changing (no kernel does that for `class`, `vendor`,
//! `numa_node`, `local_cpulist` or `information`), and a cgroup hierarchy mounted later in the
//! same mount namespace: `cpuplan inventory --refresh` reads the host again.

use std::ffi::OsStr;
use std::fs::File;
use std::ops::ControlFlow;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::fsutil::{read_record_into, under};

/// What the stamp saw of one directory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirStamp {
    /// Whether it is there.
    pub present: bool,
    /// Its inode number.
    pub ino: u64,
    /// How many entries it has.
    pub entries: u32,
    /// A hash of its entries' names and inode numbers: the sum of each entry's FNV-1a, so
    /// that the order the kernel lists them in does not matter.
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
    /// The inode number of the driver's module directory (`sys/module/nvidia`), 0 without it.
    pub module: u64,
    /// The mount namespace (`mnt:[…]`), or what the mount table file's metadata says.
    pub mounts: String,
}

/// The NVIDIA driver's module directory under the topology root.
const NVIDIA_MODULE_DIR: &str = "sys/module/nvidia";

/// Paths under one root, built in one buffer that each file the stamp reads reuses.
struct Under {
    buf: Vec<u8>,
    root: usize,
}

impl Under {
    fn new(root: &Path) -> Under {
        let mut buf = Vec::with_capacity(root.as_os_str().len() + 48);
        buf.extend_from_slice(root.as_os_str().as_bytes());
        if !buf.is_empty() && !buf.ends_with(b"/") {
            buf.push(b'/');
        }
        Under {
            root: buf.len(),
            buf,
        }
    }

    /// `rel` (no leading `/`) under the root, as [`under`] joins it.
    fn path(&mut self, rel: &str) -> &Path {
        self.buf.truncate(self.root);
        self.buf.extend_from_slice(rel.as_bytes());
        Path::new(OsStr::from_bytes(&self.buf))
    }
}

/// Opens `path` for reading without blocking (`flags` added).
fn open(path: &Path, flags: i32) -> std::io::Result<File> {
    crate::fsutil::open(path, nix::libc::O_RDONLY | nix::libc::O_NONBLOCK | flags, 0)
}

/// The online CPUs file under the root, trimmed, or `-` where there is none.
fn online_text(root: &mut Under, buf: &mut [u8]) -> String {
    let path = root.path("sys/devices/system/cpu/online");
    match read_record_into(path, buf) {
        Ok(Some(t)) => String::from_utf8_lossy(t)
            .trim_end_matches('\0')
            .trim()
            .to_string(),
        Ok(None) => "-".into(),
        Err(e) => format!("unreadable: {e}"),
    }
}

/// The boot id under `root` (`/proc/sys/kernel/random/boot_id`), empty where there is none.
pub fn boot_id(root: &Path) -> String {
    let mut buf = [0u8; 128];
    match read_record_into(&under(root, "/proc/sys/kernel/random/boot_id"), &mut buf) {
        Ok(Some(t)) => String::from_utf8_lossy(t).trim().chars().take(64).collect(),
        _ => String::new(),
    }
}

/// FNV-1a 64's offset basis.
pub(crate) const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a 64's prime.
pub(crate) const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

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

/// The stamp of `dir`: one open, a `statx` of the descriptor, and its listing (each name is
/// hashed as it is read, none kept).
fn dir_stamp(dir: &Path) -> DirStamp {
    let Ok(f) = open(dir, nix::libc::O_DIRECTORY) else {
        return DirStamp::default();
    };
    let Ok(meta) = f.metadata() else {
        return DirStamp::default();
    };
    let (mut entries, mut names) = (0u32, 0u64);
    // A read that fails ends the listing: the stamp holds the entries read before it.
    let _ = crate::dirents::each(&f, |name, ino| {
        entries += 1;
        let h = fnv1a(fnv1a(FNV_OFFSET, name), &[0]);
        names = names.wrapping_add(fnv1a(h, &ino.to_le_bytes()));
        ControlFlow::Continue(())
    });
    DirStamp {
        present: true,
        ino: meta.ino(),
        entries,
        names,
    }
}

fn mounts_stamp(root: &Path, under: &mut Under) -> String {
    let ns = match crate::mntns::own_mnt_ns(root) {
        Some(link) => link.to_string_lossy().into_owned(),
        None => "-".into(),
    };
    if root == Path::new("/") {
        // procfs: /proc/self/mountinfo is the reader's own, with new metadata every process.
        return ns;
    }
    match std::fs::metadata(under.path("proc/self/mountinfo")) {
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
        // One buffer for the online files.
        let mut buf = [0u8; 8192];
        let mut topo = Under::new(topology_root);
        let online = online_text(&mut topo, &mut buf);
        let pci = dir_stamp(topo.path(crate::gpus::PCI_DEVICES_DIR));
        let driver = dir_stamp(topo.path(crate::gpu::nvidia::NVIDIA_GPUS_DIR));
        let module = std::fs::metadata(topo.path(NVIDIA_MODULE_DIR)).map_or(0, |m| m.ino());
        let same = root == topology_root;
        let mut host = if same { topo } else { Under::new(root) };
        Stamp {
            online,
            running: if same {
                String::new()
            } else {
                online_text(&mut host, &mut buf)
            },
            pci,
            driver,
            module,
            mounts: mounts_stamp(root, &mut host),
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
            what.push(match (self.pci.entries, now.pci.entries) {
                (a, b) if a != b => format!("PCI devices changed ({a} -> {b} entries)"),
                (a, _) => format!("PCI devices changed ({a} entries, other names or inodes)"),
            });
        }
        if self.driver != now.driver {
            what.push("the NVIDIA driver's GPUs directory changed".into());
        }
        if self.module != now.module {
            what.push("the NVIDIA driver was loaded again".into());
        }
        if self.mounts != now.mounts {
            what.push(format!("mounts {} -> {}", self.mounts, now.mounts));
        }
        (!what.is_empty()).then(|| what.join(", "))
    }
}
