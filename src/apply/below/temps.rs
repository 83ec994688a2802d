//! Temporary names `.<name>.<pid>.<nanos>.tmp`, and removing those of a writer that is gone.

use std::io::Write;
use std::ops::ControlFlow;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fchmod, Mode};
use nix::unistd::{unlinkat, UnlinkatFlags};

use super::{own, RootfsError};

/// The prefix of this module's temporary files: `.<name>.<pid>.<nanos>.tmp`.
pub(super) fn temp_name(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(".{name}.{}.{nanos}.tmp", crate::logging::pid())
}

/// Writes `contents` to a fresh temporary file in `dirfd` (mode 0644); returns its name.
pub(super) fn write_temp(
    dirfd: &OwnedFd,
    dir: &Path,
    name: &str,
    contents: &[u8],
) -> Result<String, RootfsError> {
    let tmp = temp_name(name);
    let err = |what, errno| RootfsError::Path {
        path: dir.join(name),
        what,
        errno,
    };
    let fd = openat(
        Some(dirfd.as_raw_fd()),
        tmp.as_str(),
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o644),
    )
    .map_err(|e| err("cannot create a temporary file", e))?;
    // 0644 whatever the process's umask (a runtime may run the hook under a stricter one,
    // which would hide the plan from the workload's user).
    let file = std::fs::File::from(own(fd));
    let written = fchmod(file.as_raw_fd(), Mode::from_bits_truncate(0o644))
        .map_err(|e| err("cannot set the temporary file's mode", e))
        .and_then(|()| {
            (&file)
                .write_all(contents)
                .map_err(|source| RootfsError::Write {
                    path: dir.join(name),
                    source,
                })
        });
    match written {
        Ok(()) => Ok(tmp),
        Err(e) => {
            unlink(dirfd, &tmp);
            Err(e)
        }
    }
}

pub(super) fn unlink(dirfd: &OwnedFd, name: &str) {
    let _ = unlinkat(Some(dirfd.as_raw_fd()), name, UnlinkatFlags::NoRemoveDir);
}

/// The most entries of the plan directory looked at for stale temporary files (an image may
/// fill the directory; the rest wait for a later run).
pub(super) const MAX_SCAN: usize = 4096;

/// Removes from `dirfd` the temporary files of [`temp_name`]'s form for a name in `names`
/// whose writer's pid no longer runs (a hook killed mid-write); never any other file.
pub(super) fn remove_stale_temps(dirfd: &OwnedFd, dir: &Path, names: &[&str]) -> Swept {
    remove_stale_temps_of(dirfd, dir, |n| names.contains(&n))
}

/// What one sweep of a directory for stale temporary files did: logged as one line.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Swept {
    /// How many were removed.
    pub removed: usize,
    /// How many could not be removed, and the first error.
    pub failed: usize,
    /// The first removal that failed, in words.
    pub first_error: Option<String>,
    /// Whether the listing stopped at [`MAX_SCAN`] entries (the rest wait for a later sweep).
    pub cut: bool,
}

impl Swept {
    /// The one line that says what the sweep of `dir` did; `None` where it found nothing.
    pub fn line(&self, dir: &Path) -> Option<String> {
        if self.removed == 0 && self.failed == 0 {
            return None;
        }
        let mut line = format!(
            "removed {} stale temporary file(s) from {}",
            self.removed,
            dir.display()
        );
        if self.failed > 0 {
            line.push_str(&format!(
                ", left {} that could not be removed ({})",
                self.failed,
                self.first_error.as_deref().unwrap_or("")
            ));
        }
        if self.cut {
            line.push_str(&format!(
                "; only its first {MAX_SCAN} entries were looked at, the rest wait for a later run"
            ));
        }
        Some(line)
    }
}

/// Removes from `dirfd` the temporary files of [`temp_name`]'s form for a name that `is_name`
/// accepts whose writer's pid no longer runs; never any other file. However many there are,
/// the log gets one line (how many were removed and left, and the directory).
pub fn remove_stale_temps_of(dirfd: &OwnedFd, dir: &Path, is_name: impl Fn(&str) -> bool) -> Swept {
    let mut swept = Swept::default();
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    // A descriptor of its own, so the listing starts at the directory's first entry.
    let Ok(listed) = openat(Some(dirfd.as_raw_fd()), ".", flags, Mode::empty()) else {
        return swept;
    };
    let listed = own(listed);
    let mut stale: Vec<String> = Vec::new();
    let mut seen = 0;
    let _ = cpuplan::dirents::each(&listed, |name, _| {
        seen += 1;
        if seen > MAX_SCAN {
            swept.cut = true;
            return ControlFlow::Break(());
        }
        if let Ok(n) = std::str::from_utf8(name) {
            if temp_of(n).is_some_and(|(name, pid)| is_name(name) && !runs(pid)) {
                stale.push(n.to_string());
            }
        }
        ControlFlow::Continue(())
    });
    drop(listed);
    for name in stale {
        match unlinkat(
            Some(dirfd.as_raw_fd()),
            name.as_str(),
            UnlinkatFlags::NoRemoveDir,
        ) {
            Ok(()) => swept.removed += 1,
            Err(e) => {
                swept.failed += 1;
                swept
                    .first_error
                    .get_or_insert_with(|| format!("{}: {e}", cpuplan::quoted(&name)));
            }
        }
    }
    match swept.line(dir) {
        Some(line) if swept.failed > 0 => log::warn!("{line}"),
        Some(line) => log::info!("{line}"),
        None => {}
    }
    swept
}

/// The writer's pid in `file` when it is named `.<name>.<pid>.<nanos>.tmp` for a name of `names`.
#[cfg(test)]
pub(super) fn temp_pid(file: &str, names: &[&str]) -> Option<u32> {
    temp_of(file)
        .filter(|(name, _)| names.contains(name))
        .map(|(_, pid)| pid)
}

/// The name and the writer's pid of `file` when it is named `.<name>.<pid>.<nanos>.tmp`.
pub(super) fn temp_of(file: &str) -> Option<(&str, u32)> {
    let rest = file.strip_prefix('.')?.strip_suffix(".tmp")?;
    let (rest, nanos) = rest.rsplit_once('.')?;
    let (name, pid) = rest.rsplit_once('.')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if name.is_empty() || !digits(pid) || !digits(nanos) {
        return None;
    }
    Some((name, pid.parse().ok()?))
}

/// Whether `pid` is this process or another that runs (one beyond any pid's range runs not).
pub(super) fn runs(pid: u32) -> bool {
    if pid == crate::logging::pid() {
        return true;
    }
    match i32::try_from(pid) {
        Ok(p) if p > 0 => {
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), None) != Err(Errno::ESRCH)
        }
        _ => false,
    }
}
