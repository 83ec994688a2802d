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

/// The bytes of a small kernel file: one `open` and plain `read`s into a buffer that grows as
/// needed, without the `statx` that `std::fs::read` makes to size its buffer (sysfs reports
/// 4096 for every file).
fn read_small(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    // Not `read_to_end`: on a `File` it first asks for the size (statx) and the position
    // (lseek), two syscalls more per file.
    let mut buf = vec![0u8; 512];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(len);
    Ok(buf)
}

/// The whole file as text (lossy UTF-8); any error, absence included, names the file.
pub fn read(path: &Path) -> Result<String> {
    match read_small(path) {
        Ok(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
        Err(source) => Err(Error::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The whole file as text, or `None` where it (or a directory above it) does not exist.
pub fn read_optional(path: &Path) -> Result<Option<String>> {
    match read_small(path) {
        Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
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
}
