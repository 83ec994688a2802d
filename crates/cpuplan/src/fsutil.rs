//! Reading small kernel files under a root directory.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::cpuset::{parse_cpu_list, CpuSet};
use crate::error::{Error, Result};

/// Which process's `/proc` entry to read: the caller's own (`/proc/self`) or a pid's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Process {
    /// The calling process (`<root>/proc/self`, and `sched_getaffinity` for its mask).
    Current,
    /// Another process by its pid in the root's pid namespace.
    Pid(u32),
}

impl Process {
    /// `<root>/proc/self` or `<root>/proc/<pid>`.
    pub fn proc_dir(&self, root: &Path) -> PathBuf {
        match self {
            Process::Current => under(root, "/proc/self"),
            Process::Pid(pid) => under(root, format!("/proc/{pid}")),
        }
    }
}

/// `abs` (an absolute host path) placed under `root`.
pub fn under(root: &Path, abs: impl AsRef<Path>) -> PathBuf {
    let abs = abs.as_ref();
    root.join(abs.strip_prefix("/").unwrap_or(abs))
}

/// The most bytes read from one kernel file (`mountinfo` of a node with thousands of mounts fits).
pub(crate) const MAX_KERNEL_FILE: usize = 4 << 20;

/// Opens `path` as `open(2)` would with `flags` (`O_CLOEXEC` always added, as std adds it) and,
/// where it creates the file, `mode`: the access mode and `O_CREAT`/`O_EXCL`/`O_TRUNC`/`O_APPEND`
/// of `flags` become `OpenOptions`' own, the rest its custom flags.
pub fn open(path: &Path, flags: nix::libc::c_int, mode: u32) -> std::io::Result<std::fs::File> {
    use nix::libc::{O_ACCMODE, O_APPEND, O_CREAT, O_EXCL, O_RDONLY, O_RDWR, O_TRUNC, O_WRONLY};
    use std::os::unix::fs::OpenOptionsExt;
    let access = flags & O_ACCMODE;
    let mut o = std::fs::OpenOptions::new();
    o.read(access == O_RDONLY || access == O_RDWR)
        .write(access == O_WRONLY || access == O_RDWR)
        .append(flags & O_APPEND != 0)
        .truncate(flags & O_TRUNC != 0)
        .mode(mode)
        .custom_flags(flags & !(O_ACCMODE | O_APPEND | O_TRUNC | O_CREAT | O_EXCL));
    if flags & O_CREAT != 0 {
        if flags & O_EXCL != 0 {
            o.create_new(true);
        } else {
            o.create(true);
        }
    }
    o.open(path)
}

/// Opens `path` for reading without blocking: a FIFO opens at once, and reads never wait.
fn open_nonblocking(path: &Path) -> std::io::Result<std::fs::File> {
    open(path, nix::libc::O_RDONLY | nix::libc::O_NONBLOCK, 0)
}

/// The error of a file over `max` bytes (the caller names the file).
fn over_limit(max: usize) -> std::io::Error {
    std::io::Error::new(ErrorKind::InvalidData, format!("over the {max}-byte limit"))
}

/// Reads `f` to its end, at most `max` bytes: more is an error (a device that never ends).
///
/// `size` is what `fstat` said of a regular file: where it is not 0 (cgroupfs and procfs say 0,
/// sysfs 4096 for any attribute), the buffer is made that size and the read stops once it is
/// full, so a file of known size costs one `read` (the one that would return 0 is skipped). A
/// size over `max` is refused before anything is read.
fn read_at_most(f: &mut std::fs::File, max: usize, size: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    if size > max as u64 {
        return Err(over_limit(max));
    }
    // Not `File::read_to_end`: on a `File` it first asks for the size (statx) and the position
    // (lseek), two syscalls more per file. Through `Take` it is the generic loop, which reads
    // into the vector's spare capacity as it is (never zeroed: a buffer's pages are touched
    // only where the kernel writes) and stops at the limit without another `read`. A kernel
    // file starts with a page, which fits every sysfs attribute and most procfs files
    // (`/proc/<pid>/status`, `/proc/<pid>/cgroup`) in one read.
    let (limit, first) = if size > 0 {
        (size, size as usize)
    } else {
        (max as u64 + 1, 4096.min(max + 1))
    };
    let mut buf = Vec::with_capacity(first);
    match f.by_ref().take(limit).read_to_end(&mut buf) {
        Ok(_) => {}
        // A non-blocking file with nothing more to give now (a FIFO): what came is its content.
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        Err(e) => return Err(e),
    }
    if buf.len() > max {
        return Err(over_limit(max));
    }
    // What a kernel file said is kept at its size: a page held by every quota or cpu-list
    // string a long-running reader (the NRI plugin) keeps would add up.
    buf.shrink_to_fit();
    Ok(buf)
}

/// `bytes` as text: moved where they are UTF-8 (no copy), else with each bad sequence replaced.
fn into_text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The bytes of a small kernel file of many records (`mountinfo`): one non-blocking `open` and
/// plain `read`s into a buffer that grows as needed (at most [`MAX_KERNEL_FILE`]), to the read
/// that returns nothing, without the `statx` that `std::fs::read` makes to size its buffer
/// (sysfs reports 4096 for every file). Such a file gives at most a page of records per read,
/// however large the buffer, so a short read is not its end.
fn read_records(path: &Path) -> std::io::Result<Vec<u8>> {
    read_at_most(&mut open_nonblocking(path)?, MAX_KERNEL_FILE, 0)
}

/// The bytes of a small file that the kernel shows as one record: a sysfs attribute, a cgroup
/// control file (`cpu.max`, `cpu.cfs_quota_us`, `cpuset.effective_cpus`), a procfs file of one
/// record (`/proc/<pid>/status`, `stat`, `cgroup`, the NVIDIA driver's `information`), or a
/// regular file. The kernel writes such a record whole into the reader's buffer where it fits,
/// so a read that returns less than a page is the end, and the read that would return 0 is not
/// made (one syscall fewer per file: a start reads a dozen of them). A record of a page or
/// more is read on to its end as [`read_records`] reads.
fn read_record(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut f = open_nonblocking(path)?;
    let page = 4096;
    let mut buf = vec![0u8; page];
    let n = read_once(&f, &mut buf)?;
    buf.truncate(n);
    if n < page {
        buf.shrink_to_fit();
        return Ok(buf);
    }
    let mut rest = read_at_most(&mut f, MAX_KERNEL_FILE - n, 0)?;
    buf.append(&mut rest);
    Ok(buf)
}

/// One `read(2)` of `f` into `buf`: the byte count, an interrupted read made again, and 0 where
/// a non-blocking file has nothing to give now (a FIFO: nothing is its content). For a file of
/// one record, or a regular file written whole before it was renamed into place, a count
/// under `buf.len()` is all of it (the one read of the one-record rule, [`read_record`]).
pub(crate) fn read_once(mut f: &std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::io::Read;
    loop {
        match f.read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(0),
            Err(e) => return Err(e),
        }
    }
}

/// The small one-record file at `path` read into `buf` by the one-record rule, with no
/// allocation: `Ok(None)` where it (or a directory above it) is not there, an `InvalidData`
/// error where it fills `buf` (more may follow).
pub(crate) fn read_record_into<'b>(
    path: &Path,
    buf: &'b mut [u8],
) -> std::io::Result<Option<&'b [u8]>> {
    let f = match open_nonblocking(path) {
        Ok(f) => f,
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
            return Ok(None)
        }
        Err(e) => return Err(e),
    };
    let n = read_once(&f, buf)?;
    if n == buf.len() {
        return Err(std::io::Error::new(
            ErrorKind::InvalidData,
            format!("over {} bytes", buf.len()),
        ));
    }
    Ok(Some(&buf[..n]))
}

/// The bytes of the regular file at `path` (a link to one is followed), at most `max` of them,
/// read without ever blocking: a FIFO, a device, a directory or a file over `max` bytes is an
/// error (`InvalidInput` or `InvalidData`) saying so, and nothing more than `max + 1` bytes is
/// ever read.
pub fn read_file(path: &Path, max: usize) -> std::io::Result<Vec<u8>> {
    let mut f = open_nonblocking(path)?;
    let size = regular_size(&f)?;
    read_at_most(&mut f, max, size)
}

/// The bytes of `file`, already opened (by the caller's own rules: `openat2` below a root, no
/// link followed) with `O_NONBLOCK`, at most `max` of them, as [`read_file`] reads: anything
/// but a regular file, or one over `max` bytes, is an error saying so.
pub fn read_opened(file: &mut std::fs::File, max: usize) -> std::io::Result<Vec<u8>> {
    let size = regular_size(file)?;
    read_at_most(file, max, size)
}

/// `Ok` if the opened `file` is a regular file; else an `InvalidInput` error saying what it is
/// (a directory, a FIFO, a device, a socket).
pub fn require_regular(file: &std::fs::File) -> std::io::Result<()> {
    regular_size(file).map(drop)
}

/// `Ok` if the opened `file` may be written in an operator's directory (a lock, a claim, a
/// record, a log): a regular file ([`require_regular`]) owned by this process's effective user
/// (root, for the hook and the plugin) with one link. Else a `PermissionDenied` error saying
/// what is wrong (its owner, its links), so that a hard link or another user's file planted
/// under the name is never written through. A file just made with `O_CREAT|O_EXCL` passes by
/// construction. Made before anything is written: the open must not truncate (`O_TRUNC`).
pub fn require_own_file(file: &std::fs::File) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata()?;
    kind_of(&meta)?;
    let euid = nix::unistd::geteuid().as_raw();
    let wrong = if meta.uid() != euid {
        format!("owned by uid {}, not by uid {euid}", meta.uid())
    } else if meta.nlink() != 1 {
        format!(
            "{} links to it (a hard link), not a file of its own",
            meta.nlink()
        )
    } else {
        return Ok(());
    };
    Err(std::io::Error::new(ErrorKind::PermissionDenied, wrong))
}

/// The size `fstat` gives the opened `file` if it is a regular file; else [`require_regular`]'s error.
fn regular_size(file: &std::fs::File) -> std::io::Result<u64> {
    kind_of(&file.metadata()?)
}

/// `meta`'s size if it is a regular file's; else [`require_regular`]'s error.
fn kind_of(meta: &std::fs::Metadata) -> std::io::Result<u64> {
    use std::os::unix::fs::FileTypeExt;
    let kind = meta.file_type();
    if kind.is_file() {
        return Ok(meta.len());
    }
    let what = if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    };
    Err(std::io::Error::new(
        ErrorKind::InvalidInput,
        format!("{what}, not a regular file"),
    ))
}

/// The whole file as text (lossy UTF-8), read as one record ([`read_record`]: a sysfs, cgroupfs
/// or procfs file of one record, or a regular file); any error, absence included, names the file.
pub fn read(path: &Path) -> Result<String> {
    text_of(path, read_record(path))
}

/// The whole file as text (lossy UTF-8), read as many records ([`read_records`]: `mountinfo`);
/// any error, absence included, names the file.
pub fn read_all_records(path: &Path) -> Result<String> {
    text_of(path, read_records(path))
}

fn text_of(path: &Path, read: std::io::Result<Vec<u8>>) -> Result<String> {
    match read {
        Ok(bytes) => Ok(into_text(bytes)),
        Err(source) => Err(Error::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The whole file as text, read as one record ([`read`]), or `None` where it (or a directory
/// above it) does not exist.
pub fn read_optional(path: &Path) -> Result<Option<String>> {
    match read_record(path) {
        Ok(bytes) => Ok(Some(into_text(bytes))),
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => Ok(None),
        Err(source) => Err(Error::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// A cpu-list file (`0-3,8`), or `None` where it does not exist.
pub fn read_cpu_list_optional(path: &Path) -> Result<Option<CpuSet>> {
    match read_optional(path)? {
        None => Ok(None),
        Some(text) => parse_cpu_list(&text)
            .map(Some)
            .map_err(|source| Error::CpuList {
                path: path.to_path_buf(),
                source,
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_strips_the_leading_slash() {
        assert_eq!(
            under(Path::new("/fx"), "/proc/1/cgroup"),
            PathBuf::from("/fx/proc/1/cgroup")
        );
        assert_eq!(under(Path::new("/"), "/sys"), PathBuf::from("/sys"));
        assert_eq!(
            Process::Pid(7).proc_dir(Path::new("/r")),
            PathBuf::from("/r/proc/7")
        );
        assert_eq!(
            Process::Current.proc_dir(Path::new("/r")),
            PathBuf::from("/r/proc/self")
        );
    }

    #[test]
    fn read_file_takes_regular_files_only_and_bounds_them() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        std::fs::write(&f, "12345").unwrap();
        assert_eq!(read_file(&f, 5).unwrap(), b"12345");
        let e = read_file(&f, 4).unwrap_err();
        assert!(e.to_string().contains("over the 4-byte limit"), "{e}");
        let fifo = d.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let start = std::time::Instant::now();
        let e = read_file(&fifo, 100).unwrap_err();
        assert!(e.to_string().contains("a FIFO"), "{e}");
        assert!(start.elapsed() < std::time::Duration::from_secs(1));
        assert!(read_file(d.path(), 100)
            .unwrap_err()
            .to_string()
            .contains("a directory"));
        std::os::unix::fs::symlink("/dev/zero", d.path().join("zero")).unwrap();
        let e = read_file(&d.path().join("zero"), 100).unwrap_err();
        assert!(e.to_string().contains("a device"), "{e}");
    }

    #[test]
    fn read_file_reads_files_of_known_and_of_zero_size_whole() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("big");
        let text: Vec<u8> = (0..10_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        std::fs::write(&f, &text).unwrap();
        assert_eq!(read_file(&f, 10_000).unwrap(), text);
        assert!(read_file(&f, 9_999).is_err(), "the size is over the limit");
        // procfs says 0 for its files: they are read to their end all the same.
        let status = read_file(Path::new("/proc/self/status"), 1 << 20).unwrap();
        let status = String::from_utf8(status).unwrap();
        assert!(status.contains("Cpus_allowed_list:"), "{status}");
        assert!(status.ends_with('\n'), "{status}");
    }

    #[test]
    fn kernel_reads_stop_at_the_bound_and_never_wait() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        for read in [read_record, read_records] {
            assert_eq!(read(&fifo).unwrap(), b"", "no writer: nothing, at once");
            let e = read(Path::new("/dev/zero")).unwrap_err();
            assert!(e.to_string().contains("limit"), "{e}");
        }
    }

    #[test]
    fn a_record_is_read_whole_at_any_size() {
        let d = tempfile::tempdir().unwrap();
        for len in [0usize, 1, 10, 4095, 4096, 4097, 10_000] {
            let f = d.path().join(format!("f{len}"));
            let text: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            std::fs::write(&f, &text).unwrap();
            assert_eq!(read_record(&f).unwrap(), text, "{len} bytes");
        }
        // procfs files of one record, as the kernel shows them.
        let status =
            String::from_utf8(read_record(Path::new("/proc/self/status")).unwrap()).unwrap();
        assert!(
            status.contains("Cpus_allowed_list:") && status.ends_with('\n'),
            "{status}"
        );
        let cgroup =
            String::from_utf8(read_record(Path::new("/proc/self/cgroup")).unwrap()).unwrap();
        assert_eq!(
            cgroup,
            std::fs::read_to_string("/proc/self/cgroup").unwrap()
        );
    }

    #[test]
    fn a_record_read_into_a_buffer_is_absent_whole_or_too_long() {
        let d = tempfile::tempdir().unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(
            read_record_into(&d.path().join("nope"), &mut buf).unwrap(),
            None
        );
        assert_eq!(
            read_record_into(&d.path().join("nope/deeper"), &mut buf).unwrap(),
            None
        );
        let f = d.path().join("f");
        std::fs::write(&f, b"0-223\n").unwrap();
        assert_eq!(
            read_record_into(&f, &mut buf).unwrap(),
            Some(&b"0-223\n"[..])
        );
        std::fs::write(&f, [b'x'; 16]).unwrap();
        let e = read_record_into(&f, &mut buf).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidData, "{e}");
        let online = Path::new("/sys/devices/system/cpu/online");
        let text = read_record_into(online, &mut buf).unwrap().unwrap();
        assert_eq!(
            text,
            std::fs::read(online).unwrap(),
            "a sysfs attribute, whole"
        );
    }

    #[test]
    fn a_file_of_many_records_is_read_to_its_end() {
        // /proc/crypto is a seq_file of one record per algorithm, over 11 KB here: each read
        // gives at most a page of whole records (4021 bytes on this kernel), so the record
        // rule would stop after the first, and the records' rule reads on to the end.
        let path = Path::new("/proc/crypto");
        let whole = std::fs::read(path).unwrap();
        assert!(whole.len() > 4096, "{} bytes", whole.len());
        assert_eq!(read_records(path).unwrap(), whole);
        assert_eq!(read_all_records(path).unwrap().as_bytes(), &whole[..]);
        assert!(
            read_record(path).unwrap().len() < whole.len(),
            "a short read is not its end"
        );
    }

    #[test]
    fn optional_reads() {
        let d = tempfile::tempdir().unwrap();
        assert!(read_optional(&d.path().join("nope")).unwrap().is_none());
        assert!(read_optional(&d.path().join("nope/deeper"))
            .unwrap()
            .is_none());
        assert!(read(&d.path().join("nope"))
            .unwrap_err()
            .to_string()
            .contains("nope"));
        std::fs::write(d.path().join("l"), "0-2\n").unwrap();
        assert_eq!(
            read_cpu_list_optional(&d.path().join("l"))
                .unwrap()
                .unwrap()
                .len(),
            3
        );
        let long: String = (0..3000).map(|i| format!("{i},")).collect();
        std::fs::write(d.path().join("long"), &long).unwrap();
        assert_eq!(read(&d.path().join("long")).unwrap(), long);
        std::fs::write(d.path().join("bad"), "x").unwrap();
        let e = read_cpu_list_optional(&d.path().join("bad"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("bad") && e.contains("\"x\""), "{e}");
    }

    #[test]
    fn only_a_regular_file_of_one_s_own_with_one_link_may_be_written() {
        use std::os::unix::fs::MetadataExt;
        let d = tempfile::tempdir().unwrap();
        let own = d.path().join("own");
        let f = open(
            &own,
            nix::libc::O_WRONLY | nix::libc::O_CREAT | nix::libc::O_EXCL,
            0o600,
        );
        require_own_file(&f.unwrap()).unwrap();
        let rw = || open(&own, nix::libc::O_RDWR, 0).unwrap();
        std::fs::hard_link(&own, d.path().join("planted")).unwrap();
        let e = require_own_file(&rw()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
        assert!(e.to_string().contains("2 links to it (a hard link)"), "{e}");
        std::fs::remove_file(d.path().join("planted")).unwrap();
        require_own_file(&rw()).unwrap();
        let other = std::fs::metadata(&own).unwrap().uid() + 1000;
        std::os::unix::fs::chown(&own, Some(other), None).unwrap();
        let e = require_own_file(&rw()).unwrap_err().to_string();
        assert!(
            e.contains(&format!("owned by uid {other}, not by uid")),
            "{e}"
        );
        let dir = open(d.path(), nix::libc::O_RDONLY, 0).unwrap();
        let e = require_own_file(&dir).unwrap_err().to_string();
        assert!(e.contains("a directory, not a regular file"), "{e}");
    }

    #[test]
    fn open_is_close_on_exec_and_keeps_the_flags_and_the_mode() {
        use nix::fcntl::{fcntl, FcntlArg, FdFlag};
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let made = d.path().join("made");
        let flags = nix::libc::O_WRONLY | nix::libc::O_CREAT | nix::libc::O_EXCL;
        let f = open(&made, flags, 0o600).unwrap();
        let fd_flags = FdFlag::from_bits_truncate(fcntl(f.as_raw_fd(), FcntlArg::F_GETFD).unwrap());
        assert!(fd_flags.contains(FdFlag::FD_CLOEXEC));
        let mode = std::fs::metadata(&made).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // O_EXCL holds: the file is there now.
        let again = open(&made, flags, 0o600).unwrap_err();
        assert_eq!(again.kind(), ErrorKind::AlreadyExists);
        // O_NOFOLLOW holds: a link is the kernel's ELOOP, never followed.
        std::os::unix::fs::symlink(&made, d.path().join("link")).unwrap();
        let nofollow = nix::libc::O_RDONLY | nix::libc::O_NOFOLLOW;
        let e = open(&d.path().join("link"), nofollow, 0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(nix::libc::ELOOP));
        // A path with a NUL byte is an error, not a truncated path.
        use std::os::unix::ffi::OsStrExt;
        let nul = Path::new(std::ffi::OsStr::from_bytes(b"/tmp/a\0b"));
        assert!(open(nul, nix::libc::O_RDONLY, 0).is_err());
    }
}
