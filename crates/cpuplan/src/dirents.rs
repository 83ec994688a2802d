//! A directory's entries read with `getdents64` into the caller's buffer: no `opendir`, so no
//! allocation by the C library (musl's `opendir` allocates with its own `calloc`, beside the
//! Rust allocator, and unmaps it again at `closedir`) and no name copied.

use std::ops::ControlFlow;
use std::os::fd::{AsFd, AsRawFd};

/// The header of a `linux_dirent64` record: inode (8), offset (8), length (2), type (1).
const HEADER: usize = 19;

/// One `getdents64` into `buf`: the bytes of whole `linux_dirent64` records it wrote, 0 at
/// the end of the directory.
fn getdents(dir: impl AsFd, buf: &mut [u8]) -> std::io::Result<usize> {
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`, which is ours and
    // borrowed mutably for the call, and reads nothing else; `dir` stays open across it.
    let n = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_getdents64,
            dir.as_fd().as_raw_fd(),
            buf.as_mut_ptr(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Each entry (name, inode) of the `linux_dirent64` records in `recs`, `.` and `..` left out.
fn records(recs: &[u8]) -> impl Iterator<Item = (&[u8], u64)> {
    let mut at = 0;
    std::iter::from_fn(move || loop {
        let rec = recs.get(at..)?;
        let len = usize::from(u16::from_ne_bytes([*rec.get(16)?, *rec.get(17)?]));
        let name = rec.get(HEADER..len)?;
        let mut ino = [0u8; 8];
        ino.copy_from_slice(&rec[..8]);
        at += len;
        let name = &name[..name.iter().position(|b| *b == 0).unwrap_or(name.len())];
        if name != b"." && name != b".." {
            return Some((name, u64::from_ne_bytes(ino)));
        }
    })
}

/// Calls `entry` with every entry's name and inode of the open directory `dir` (not `.` and
/// `..`) until it breaks, reading the listing into `buf` as many times as it takes. A failed
/// read ends the listing with its error, after the entries read before it. `dir` is read from
/// where its offset stands (a fresh descriptor: the start).
pub fn each(
    dir: impl AsFd,
    buf: &mut [u8],
    mut entry: impl FnMut(&[u8], u64) -> ControlFlow<()>,
) -> std::io::Result<()> {
    let dir = dir.as_fd();
    loop {
        let n = getdents(dir, buf)?;
        if n == 0 {
            return Ok(());
        }
        for (name, ino) in records(&buf[..n]) {
            if entry(name, ino).is_break() {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;

    #[test]
    fn every_name_of_a_directory_once_without_the_dots_across_small_reads() {
        let dir = tempfile::tempdir().unwrap();
        let mut want: Vec<String> = (0..40)
            .map(|i| format!("entry-{i:02}-{}", "x".repeat(i)))
            .collect();
        for n in &want {
            std::fs::write(dir.path().join(n), "").unwrap();
        }
        let f = File::open(dir.path()).unwrap();
        // 256 bytes: a few records per read, so the listing takes many reads.
        let mut buf = [0u8; 256];
        let mut got = Vec::new();
        each(&f, &mut buf, |name, ino| {
            assert_ne!(ino, 0);
            got.push(String::from_utf8(name.to_vec()).unwrap());
            ControlFlow::Continue(())
        })
        .unwrap();
        got.sort();
        want.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn a_buffer_too_small_for_one_record_is_the_kernel_s_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a-name-longer-than-the-buffer"), "").unwrap();
        let f = File::open(dir.path()).unwrap();
        let mut buf = [0u8; 8];
        let err = each(&f, &mut buf, |_, _| ControlFlow::Continue(())).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(nix::libc::EINVAL));
    }

    #[test]
    fn a_break_ends_the_listing_there() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..30 {
            std::fs::write(dir.path().join(format!("n{i}")), "").unwrap();
        }
        let f = File::open(dir.path()).unwrap();
        let mut buf = [0u8; 128];
        let mut seen = 0;
        each(&f, &mut buf, |_, _| {
            seen += 1;
            if seen == 7 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .unwrap();
        assert_eq!(seen, 7);
    }
}
