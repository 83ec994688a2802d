//! Pid namespaces: the one a claimer's pid is numbered in, and whether a process numbered in
//! another one still runs.
//!
//! A pid means something only in its pid namespace: pid 1 of a container's namespace is not the
//! host's pid 1. A claim records the claimer's namespace; a reader in the same namespace judges
//! the pid as it is, and a reader elsewhere looks for the process by its namespace, which only
//! works downwards: a process sees the processes of its own and of its descendant namespaces,
//! never those of its ancestors, so from a container's namespace a host claim cannot be judged.

use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::OnceLock;

use crate::error::Error;
use crate::fsutil::{read_optional, under};

/// The inode of the initial pid namespace (the kernel's `PROC_PID_INIT_INO`): every process of
/// every namespace is visible from it.
pub const INIT_PID_NS: u64 = 0xEFFF_FFFC;

/// The calling process's pid namespace: the inode of `/proc/self/ns/pid` (0 when `/proc` cannot
/// tell). A process's pid namespace never changes, so it is read once.
///
/// Read from the link's text (`pid:[INODE]`), not by a `stat` through it: the kernel writes the
/// text from the namespace itself, where a `stat` first makes the namespace's inode in nsfs
/// (measured: 4–7 µs of a fresh process's first look at its namespace).
pub fn own_pid_ns() -> u64 {
    static NS: OnceLock<u64> = OnceLock::new();
    *NS.get_or_init(|| {
        std::fs::read_link("/proc/self/ns/pid")
            .ok()
            .and_then(|l| ns_link_inode(l.as_os_str().as_encoded_bytes(), b"pid"))
            .unwrap_or(0)
    })
}

/// The inode in the text of a namespace link of kind `kind` (`pid:[4026531836]`).
fn ns_link_inode(text: &[u8], kind: &[u8]) -> Option<u64> {
    let rest = text.strip_prefix(kind)?.strip_prefix(b":[")?;
    let digits = rest.strip_suffix(b"]")?;
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// What the caller can tell of a pid of another pid namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// It runs (not a zombie), with this start time.
    Runs(u64),
    /// It does not run: its namespace is gone, or holds no such live pid.
    Gone,
    /// It is out of the caller's sight (an ancestor's or a sibling's namespace, or a process
    /// whose namespace the caller may not read).
    Unknown,
}

/// Pid `pid` of pid namespace `ns`, started at `start_time`, as seen in `<root>/proc` by a
/// caller in namespace `mine`: each process's `ns/pid` is compared with `ns`, and the last
/// `NSpid` of a match (its pid in its own namespace) with `pid`. A process whose namespace the
/// caller may not read is the holder where its innermost pid and start time are. A namespace no
/// process is in is gone only where the caller sees everything (the initial namespace); else it
/// may merely be out of sight.
pub fn seen_in(root: &Path, ns: u64, pid: u32, start_time: u64, mine: u64) -> Result<Seen, Error> {
    let proc = under(root, "/proc");
    let entries = std::fs::read_dir(&proc).map_err(|source| Error::Io {
        path: proc.clone(),
        source,
    })?;
    let mut found_ns = false;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(host_pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let dir = entry.path();
        let readable = match std::fs::metadata(dir.join("ns/pid")) {
            Ok(m) if m.ino() == ns => {
                found_ns = true;
                true
            }
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::NotFound => continue, // it exited meanwhile
            Err(_) => false,
        };
        if innermost_pid(&dir) != Some(pid) {
            continue;
        }
        let start = crate::proc_stat::live_start_time(root, host_pid)?;
        if readable {
            return Ok(start.map_or(Seen::Gone, Seen::Runs));
        }
        if start == Some(start_time) {
            return Ok(Seen::Runs(start_time));
        }
    }
    Ok(if found_ns || mine == INIT_PID_NS {
        Seen::Gone
    } else {
        Seen::Unknown
    })
}

/// The process's pid in its own pid namespace: the last field of `NSpid` in its `status`
/// (`None` when it is gone or exiting).
fn innermost_pid(dir: &Path) -> Option<u32> {
    let status = read_optional(&dir.join("status")).ok().flatten()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|n| n.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_link_text_names_the_inode_a_stat_finds() {
        let stat = std::fs::metadata("/proc/self/ns/pid").unwrap().ino();
        assert_eq!(own_pid_ns(), stat);
        assert_eq!(ns_link_inode(b"pid:[4026531836]", b"pid"), Some(4026531836));
        for bad in [
            &b"mnt:[1]"[..],
            b"pid:[]",
            b"pid:[12",
            b"pid:12]",
            b"pid:[1x]",
            b"pid",
        ] {
            assert_eq!(
                ns_link_inode(bad, b"pid"),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn this_process_is_seen_by_its_namespace_and_a_missing_pid_is_gone() {
        let mine = own_pid_ns();
        assert_ne!(mine, 0, "/proc/self/ns/pid");
        let me = std::process::id();
        let start = crate::proc_stat::live_start_time(Path::new("/"), me)
            .unwrap()
            .unwrap();
        let root = Path::new("/");
        assert_eq!(
            seen_in(root, mine, me, start, mine).unwrap(),
            Seen::Runs(start)
        );
        // Our namespace has processes, so a pid it lacks is gone, wherever the caller is.
        assert_eq!(seen_in(root, mine, u32::MAX, 0, 1).unwrap(), Seen::Gone);
        // A namespace no process is in: gone from the initial namespace, unknown elsewhere.
        assert_eq!(
            seen_in(root, 1, me, start, INIT_PID_NS).unwrap(),
            Seen::Gone
        );
        assert_eq!(seen_in(root, 1, me, start, 7).unwrap(), Seen::Unknown);
    }
}
