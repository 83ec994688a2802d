//! The GPU device nodes a container has in its `/dev` at createRuntime (NVIDIA's legacy hook and
//! runtime inject GPUs that way without touching `config.json`; `/dev/dri`'s card and render
//! nodes are looked at too), and whether each is the runtime's.
//!
//! A node counts as the runtime's (a trusted `nodes` source) only when the spec mounts `/dev` as
//! the runtime's own tmpfs and no mount of the spec has the node, or a directory above it under
//! `/dev`, as its destination: at createRuntime the container's process has not run yet, so that
//! tmpfs holds only what the runtime and the operator's hooks put there. A `/dev` from the image
//! (no tmpfs), from a volume (an image's `Volumes`, an emptyDir), or a tmpfs that copies the
//! image's `/dev` up (`tmpcopyup`) is the tenant's, and so is a node a mount puts there. As the
//! runtime follows links in the rootfs when it mounts (`/x/nvidia1` with an image's `/x` ->
//! `/dev`), every mount's destination is also resolved in the container's root: one that lands
//! on `/dev` (other than the tmpfs) or on the node makes it the tenant's too. A node that is not
//! the runtime's is planned for but never claimed.

use std::ops::ControlFlow;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{openat, openat2, AtFlags, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fstat, fstatat, major, minor, FileStat, Mode, SFlag};

use super::own;
use super::spec::{CharDevice, SpecMount};
use cpuplan::gpu::Inventory;
use cpuplan::quoted;

/// The most entries of the container's `/dev` looked at (a runtime's `/dev` holds a few dozen).
const MAX_ENTRIES: usize = 4096;

/// A GPU device node in the container's `/dev`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// The node (`/dev/nvidiaN`, `195:N`).
    pub device: CharDevice,
    /// Why it is not the runtime's, where it may not be (then it names no GPU to claim).
    pub untrusted: Option<String>,
}

/// The GPU char devices under `rootfs` (an fd on the container's root as the hook opened it):
/// `/dev/nvidiaN` (major 195) and `/dev/dri/cardN`, `/dev/dri/renderDN` (major 226), each with
/// why it is not the runtime's under the spec's `mounts` and, where `table` names the
/// container's mount table (its init's `/proc/<pid>/mountinfo`), under what is really mounted
/// at its `/dev`, where it may not be: `dev` and `dri` are opened without following a link,
/// each entry is `fstatat`ed without following one, and only char devices count. Nothing
/// readable: none.
pub fn gpu_nodes(rootfs: BorrowedFd<'_>, mounts: &[SpecMount], table: Option<&Path>) -> Vec<Node> {
    let Some(dir) = open_dir(rootfs.as_raw_fd(), "dev") else {
        return Vec::new();
    };
    let dirfd = dir.as_raw_fd();
    let mut found: Vec<(CharDevice, FileStat)> = scan(&dir, "/dev", false);
    let mut dri_dir = None;
    if let Some(dri) = open_dir(dirfd, "dri") {
        found.extend(scan(&dri, "/dev/dri", true));
        dri_dir = fstat(dri.as_raw_fd()).ok();
    }
    found.sort_by_key(|(a, _)| (a.major, a.minor));
    if found.is_empty() {
        return Vec::new();
    }
    let dev = fstat(dirfd).map_err(|e| format!("cannot stat its /dev: {e}"));
    let landed = dev
        .as_ref()
        .map_err(Clone::clone)
        .and_then(|dev| landings(rootfs, mounts, dev, dri_dir.as_ref(), &found));
    // What is really mounted at its /dev, read once, and only where the spec's rules leave a
    // node the runtime's.
    let mut mounted: Option<Option<String>> = None;
    let mut mounted_untrusted = || {
        mounted
            .get_or_insert_with(|| match (&dev, table) {
                (_, None) => None,
                (Err(why), Some(_)) => Some(why.clone()),
                (Ok(dev), Some(table)) => table_untrusted(table, dev),
            })
            .clone()
    };
    found
        .into_iter()
        .enumerate()
        .map(|(i, (device, _))| {
            let untrusted = spec_untrusted(mounts, &device.path)
                .or_else(|| match &landed {
                    Err(why) => Some(why.clone()),
                    Ok(on) => on[i].clone(),
                })
                .or_else(&mut mounted_untrusted);
            Node { device, untrusted }
        })
        .collect()
}

/// The directory `name` below `dirfd`, opened without following a link (none where it is not
/// a directory or cannot be opened).
fn open_dir(dirfd: RawFd, name: &str) -> Option<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    openat(Some(dirfd), name, flags, Mode::empty())
        .ok()
        .map(own)
}

/// The GPU char devices among the entries of `dir` (the container's `at`: `/dev`, or
/// `/dev/dri` with `dri`), each with its `stat`; at most [`MAX_ENTRIES`] entries are looked at.
fn scan(dir: &OwnedFd, at: &str, dri: bool) -> Vec<(CharDevice, FileStat)> {
    let dirfd = dir.as_raw_fd();
    let mut found = Vec::new();
    let mut seen = 0;
    // A read that fails ends the listing: the nodes found before it count.
    let _ = cpuplan::dirents::each(dir, |name, _| {
        seen += 1;
        if seen > MAX_ENTRIES {
            return ControlFlow::Break(());
        }
        let Ok(name) = std::str::from_utf8(name) else {
            return ControlFlow::Continue(());
        };
        if !Inventory::is_gpu_node_name(name, dri) {
            return ControlFlow::Continue(());
        }
        let Ok(st) = fstatat(Some(dirfd), name, AtFlags::AT_SYMLINK_NOFOLLOW) else {
            return ControlFlow::Continue(());
        };
        let is_char = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFCHR;
        let dev_major = major(st.st_rdev) as i64;
        if is_char && Inventory::is_gpu_node(name, dri, dev_major) {
            let device = CharDevice {
                major: dev_major,
                minor: minor(st.st_rdev) as i64,
                path: format!("{at}/{name}"),
            };
            found.push((device, st));
        }
        ControlFlow::Continue(())
    });
    found
}

/// Why the node at `path` (`/dev/nvidiaN`) is not the runtime's under the spec's `mounts`, if it
/// may not be: the last mount on `/` or `/dev` must be a tmpfs on `/dev` that copies nothing
/// up, and no mount may have the node, or a directory above it below `/dev`, as its destination.
pub fn spec_untrusted(mounts: &[SpecMount], path: &str) -> Option<String> {
    let mut dev: Option<&SpecMount> = None;
    for m in mounts {
        let d = m.clean.as_str();
        if d == path || (d.starts_with("/dev/") && path.starts_with(&format!("{d}/"))) {
            return Some(format!(
                "the spec mounts {} ({}) on it",
                quoted(&m.destination),
                kind(m)
            ));
        }
        if d == "/dev" || d == "/" {
            dev = Some(m);
        }
    }
    match dev {
        None => Some("the spec mounts no tmpfs on /dev: it is the image's".into()),
        Some(m) if m.clean == "/" => Some(format!(
            "the spec mounts {} ({}) over /dev",
            quoted(&m.destination),
            kind(m)
        )),
        Some(m) if m.kind != "tmpfs" => Some(format!(
            "/dev is a {} mount, not the runtime's tmpfs",
            kind(m)
        )),
        // A runtime binds whatever the type string says (runc ignores it under MS_BIND).
        Some(m) if m.binds || m.source.starts_with('/') => Some(format!(
            "the spec mounts /dev from {} as a bind ({} typed {}), not the runtime's tmpfs",
            quoted(&m.source),
            if m.binds {
                "a bind option"
            } else {
                "a path as source"
            },
            kind(m)
        )),
        Some(m) if m.copies_up => {
            Some("/dev is a tmpfs that copies the image's /dev up (tmpcopyup)".into())
        }
        Some(_) => None,
    }
}

/// The most bytes of the container's mount table read (a host's table, which a new mount
/// namespace copies, of a few thousand mounts fits).
const MAX_TABLE: usize = 4 << 20;

/// Why the container's `/dev` (`dev`, as `fstat` gives it) is not a fresh tmpfs of the
/// runtime's by the mount table at `table` (the init's `/proc/<pid>/mountinfo`, read bounded and
/// without blocking), if it is not: the filesystem its `/dev` is on must be a tmpfs mounted
/// exactly once in that table, whole (mount root `/`), at a `/dev`. A bind of a host directory
/// (any filesystem mounted elsewhere too, or a directory of one), of another tmpfs, or of
/// anything but a tmpfs is the tenant's, whatever the spec's type string says.
pub fn table_untrusted(table: &Path, dev: &FileStat) -> Option<String> {
    let text = match cpuplan::read_file(table, MAX_TABLE) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => {
            return Some(format!(
                "its mount table {} cannot be read: {e}",
                table.display()
            ))
        }
    };
    let (maj, min) = (major(dev.st_dev), minor(dev.st_dev));
    let mounts = cpuplan::mounts_of_device(&text, maj, min);
    let at_dev = |p: &str| p == "/dev" || p.ends_with("/dev");
    match mounts.as_slice() {
        [] => Some(format!(
            "its /dev (device {maj}:{min}) is on no mount of its mount table"
        )),
        [m] if m.fs_type == "tmpfs" && m.root == "/" && at_dev(&m.mount_point) => None,
        [m] if m.fs_type != "tmpfs" => Some(format!(
            "its mount table shows its /dev on a {} filesystem, not the runtime's tmpfs",
            quoted(&m.fs_type)
        )),
        [m] => Some(format!(
            "its mount table shows its /dev as {} of a tmpfs at {}, not a fresh tmpfs",
            quoted(&m.root),
            quoted(&m.mount_point)
        )),
        more => Some(format!(
            "its mount table shows the filesystem of its /dev ({}) mounted {} times: a bind, not a fresh tmpfs",
            quoted(&more[0].fs_type),
            more.len()
        )),
    }
}

/// A mount's type in words.
fn kind(m: &SpecMount) -> String {
    if m.kind.is_empty() {
        "no type".into()
    } else {
        quoted(&m.kind).to_string()
    }
}

/// For each of `nodes`, why a mount of the spec lands on it (or, for a node of `/dev/dri`, on
/// `dri`) once its destination is resolved in the container's root as the runtime resolved it
/// (links followed, within the root), if one does; and as the reason of every node, a second
/// mount landing on `/dev` (`dev`) itself, or a destination that cannot be resolved other than
/// by being absent.
fn landings(
    rootfs: BorrowedFd<'_>,
    mounts: &[SpecMount],
    dev: &FileStat,
    dri: Option<&FileStat>,
    nodes: &[(CharDevice, FileStat)],
) -> Result<Vec<Option<String>>, String> {
    let same = |a: &FileStat, b: &FileStat| a.st_dev == b.st_dev && a.st_ino == b.st_ino;
    let mut on = vec![None; nodes.len()];
    let mut on_dev = 0;
    for m in mounts {
        let st = match resolve(rootfs, &m.clean) {
            Ok(st) => st,
            // Absent (hidden by a later mount, or never made): it covers nothing.
            Err(Errno::ENOENT | Errno::ENOTDIR) => continue,
            Err(e) => {
                return Err(format!(
                    "the spec's mount destination {} cannot be resolved in the container: {e}",
                    quoted(&m.destination)
                ))
            }
        };
        if same(&st, dev) {
            on_dev += 1;
            if on_dev > 1 {
                return Err(format!(
                    "the spec's mount {} ({}) lands on /dev",
                    quoted(&m.destination),
                    kind(m)
                ));
            }
        }
        let on_dri = dri.is_some_and(|d| same(&st, d));
        for (i, (device, node)) in nodes.iter().enumerate() {
            let in_dri = device.path.starts_with("/dev/dri/");
            if on[i].is_none() && (same(&st, node) || (in_dri && on_dri)) {
                on[i] = Some(format!(
                    "the spec's mount {} ({}) lands on it",
                    quoted(&m.destination),
                    kind(m)
                ));
            }
        }
    }
    Ok(on)
}

/// `fstat` of `path` resolved in the root `rootfs` (`RESOLVE_IN_ROOT`, no magic links), opened
/// `O_PATH`: nothing is read and nothing blocks.
fn resolve(rootfs: BorrowedFd<'_>, path: &str) -> Result<FileStat, Errno> {
    let rel = path.trim_start_matches('/');
    let rel = if rel.is_empty() { "." } else { rel };
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let fd = own(openat2(rootfs.as_raw_fd(), rel, how)?);
    fstat(fd.as_raw_fd())
}

#[cfg(test)]
mod tests;
