//! Writing files below a directory without following any link out of it: inside a container's
//! rootfs (the hook), or below a host directory (the NRI plugin's plans).
//!
//! The container's mount namespace is entered through `/proc/<pid>/root` (so a tmpfs the
//! runtime mounted on `/run` holds the files), the rootfs is resolved with that as root
//! (`openat2(RESOLVE_IN_ROOT)`), and every component of the plan directory below it is
//! opened one at a time with `O_NOFOLLOW`: a symlink, FIFO or other non-directory planted
//! by the image is refused, never followed. Files are written to a fresh temporary name
//! (`O_CREAT|O_EXCL|O_NOFOLLOW`) and renamed over the final name, so a planted
//! `plan.env` symlink or FIFO is replaced, never opened. Temporary files of that naming left
//! by a hook killed mid-write (its pid gone) are removed by the next write; nothing else is.

use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, openat2, renameat, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fchmod, mkdirat, Mode};
use nix::unistd::{unlinkat, UnlinkatFlags};

/// Why the plan files could not be written.
#[derive(Debug, thiserror::Error)]
pub enum RootfsError {
    /// The container's init is gone, or `/proc/<pid>` cannot be opened.
    #[error("container pid {pid}: {}: {what}: {errno}", dir.display())]
    Process {
        /// The pid.
        pid: u32,
        /// Its `/proc` directory.
        dir: PathBuf,
        /// What was being opened.
        what: &'static str,
        /// The error.
        errno: Errno,
    },
    /// The pid shares the hook's mount namespace: not a container init, or a reused pid.
    #[error("pid {0} is in the hook's own mount namespace: not a container's init (exited, and the pid reused?); writing nothing")]
    SameNamespace(u32),
    /// Writing a file's contents failed (a full or read-only filesystem).
    #[error("{}: cannot write: {source}", path.display())]
    Write {
        /// The file inside the container.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A path component could not be opened or created.
    #[error("{}: {what}: {errno}", path.display())]
    Path {
        /// The path inside the container.
        path: PathBuf,
        /// What went wrong.
        what: &'static str,
        /// The error.
        errno: Errno,
    },
}

fn own(fd: RawFd) -> OwnedFd {
    // SAFETY: `fd` was just returned by a successful open call and is owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Opens the container's rootfs: through `<proc_root>/proc/<pid>/root` when `pid` is given, else the host path.
pub fn open_rootfs(
    proc_root: &Path,
    pid: Option<u32>,
    rootfs: &Path,
) -> Result<OwnedFd, RootfsError> {
    let dir_flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let Some(pid) = pid else {
        let fd =
            openat(None, rootfs, dir_flags, Mode::empty()).map_err(|errno| RootfsError::Path {
                path: rootfs.to_path_buf(),
                what: "cannot open the rootfs",
                errno,
            })?;
        return Ok(own(fd));
    };
    let proc_dir = cpuplan::Process::Pid(pid).proc_dir(proc_root);
    let proc_err = |what, errno| RootfsError::Process {
        pid,
        dir: proc_dir.clone(),
        what,
        errno,
    };
    let procfd = own(openat(None, &proc_dir, dir_flags, Mode::empty())
        .map_err(|e| proc_err("cannot open it", e))?);
    let theirs = nix::fcntl::readlinkat(Some(procfd.as_raw_fd()), "ns/mnt")
        .map_err(|e| proc_err("cannot read its mount namespace", e))?;
    let ours =
        std::fs::read_link(cpuplan::Process::Current.proc_dir(proc_root).join("ns/mnt")).ok();
    if ours.as_deref().map(|p| p.as_os_str()) == Some(theirs.as_os_str()) {
        return Err(RootfsError::SameNamespace(pid));
    }
    let rootfd = own(
        openat(Some(procfd.as_raw_fd()), "root", dir_flags, Mode::empty())
            .map_err(|e| proc_err("cannot open its root", e))?,
    );
    let rel = rootfs.strip_prefix("/").unwrap_or(rootfs);
    let how = OpenHow::new()
        .flags(dir_flags)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let fd = openat2(rootfd.as_raw_fd(), rel, how).map_err(|errno| RootfsError::Path {
        path: rootfs.to_path_buf(),
        what: "cannot open the rootfs in the container's mount namespace",
        errno,
    })?;
    Ok(own(fd))
}

/// Opens (creating, 0755) each component of `dir` below `root` without following links.
pub fn open_dir_in(root: &OwnedFd, dir: &Path) -> Result<OwnedFd, RootfsError> {
    open_dir_below(root, Path::new("/"), dir)
}

/// Opens directory `dir` below directory `parent` (at `parent_path`, which messages name),
/// as [`open_dir_in`] does below a root.
pub fn open_dir_below(
    parent: &OwnedFd,
    parent_path: &Path,
    dir: &Path,
) -> Result<OwnedFd, RootfsError> {
    walk_dirs(parent, parent_path, dir, true)?.ok_or_else(|| RootfsError::Path {
        path: dir.to_path_buf(),
        what: "the plan directory cannot be the container's /",
        errno: Errno::EINVAL,
    })
}

/// Opens each component of `dir` below `root` (at `root_path`) with `O_NOFOLLOW`, creating a
/// missing one (0755) when `create`; `Ok(None)` when one is missing and not created, or `dir`
/// is `/`.
fn walk_dirs(
    root: &OwnedFd,
    root_path: &Path,
    dir: &Path,
    create: bool,
) -> Result<Option<OwnedFd>, RootfsError> {
    let mut cur: Option<OwnedFd> = None;
    let mut sofar = root_path.to_path_buf();
    for comp in dir.components() {
        let name = match comp {
            Component::RootDir => continue,
            Component::Normal(n) => n,
            _ => {
                return Err(RootfsError::Path {
                    path: dir.to_path_buf(),
                    what: "the plan directory holds . or ..",
                    errno: Errno::EINVAL,
                })
            }
        };
        sofar.push(name);
        let parent = cur.as_ref().unwrap_or(root).as_raw_fd();
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = match openat(Some(parent), name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) if !create => return Ok(None),
            Err(Errno::ENOENT) => {
                match mkdirat(Some(parent), name, Mode::from_bits_truncate(0o755)) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(errno) => {
                        return Err(RootfsError::Path {
                            path: sofar,
                            what: "cannot create directory",
                            errno,
                        })
                    }
                }
                let fd = openat(Some(parent), name, flags, Mode::empty())
                    .map_err(|errno| path_err(parent, name, &sofar, errno))?;
                let _ = fchmod(fd, Mode::from_bits_truncate(0o755));
                fd
            }
            Err(errno) => return Err(path_err(parent, name, &sofar, errno)),
        };
        cur = Some(own(fd));
    }
    Ok(cur)
}

fn path_err(parent: RawFd, name: &std::ffi::OsStr, path: &Path, errno: Errno) -> RootfsError {
    let is_link =
        nix::sys::stat::fstatat(Some(parent), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
            .map(|st| st.st_mode & nix::libc::S_IFMT == nix::libc::S_IFLNK)
            .unwrap_or(false);
    let what = match errno {
        _ if is_link => "is a symlink: refusing to follow it",
        Errno::ELOOP => "is a symlink: refusing to follow it",
        Errno::ENOTDIR => "is not a directory",
        _ => "cannot open directory",
    };
    RootfsError::Path {
        path: path.to_path_buf(),
        what,
        errno,
    }
}

/// The prefix of this module's temporary files: `.<name>.<pid>.<nanos>.tmp`.
fn temp_name(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(".{name}.{}.{nanos}.tmp", std::process::id())
}

/// Writes `contents` to a fresh temporary file in `dirfd` (mode 0644); returns its name.
fn write_temp(
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
    let fd = own(fd);
    let written = fchmod(fd.as_raw_fd(), Mode::from_bits_truncate(0o644))
        .map_err(|e| err("cannot chmod", e))
        .and_then(|()| {
            std::fs::File::from(fd)
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

fn unlink(dirfd: &OwnedFd, name: &str) {
    let _ = unlinkat(Some(dirfd.as_raw_fd()), name, UnlinkatFlags::NoRemoveDir);
}

/// The most entries of the plan directory looked at for stale temporary files (an image may
/// fill the directory; the rest wait for a later run).
const MAX_SCAN: usize = 4096;

/// Removes from `dirfd` the temporary files of [`temp_name`]'s form for a name in `names`
/// whose writer's pid no longer runs (a hook killed mid-write); never any other file.
fn remove_stale_temps(dirfd: &OwnedFd, dir: &Path, names: &[&str]) {
    remove_stale_temps_of(dirfd, dir, |n| names.contains(&n));
}

/// Removes from `dirfd` the temporary files of [`temp_name`]'s form for a name that `is_name`
/// accepts whose writer's pid no longer runs; never any other file.
pub fn remove_stale_temps_of(dirfd: &OwnedFd, dir: &Path, is_name: impl Fn(&str) -> bool) {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let Ok(mut d) = nix::dir::Dir::openat(Some(dirfd.as_raw_fd()), ".", flags, Mode::empty())
    else {
        return;
    };
    let stale: Vec<String> = d
        .iter()
        .take(MAX_SCAN)
        .flatten()
        .filter_map(|e| e.file_name().to_str().ok().map(str::to_string))
        .filter(|n| temp_of(n).is_some_and(|(name, pid)| is_name(name) && !runs(pid)))
        .collect();
    for name in stale {
        match unlinkat(
            Some(dirfd.as_raw_fd()),
            name.as_str(),
            UnlinkatFlags::NoRemoveDir,
        ) {
            Ok(()) => log::info!("removed stale temporary file {}", dir.join(&name).display()),
            Err(e) => log::warn!("cannot remove stale {}: {e}", dir.join(&name).display()),
        }
    }
}

/// The writer's pid in `file` when it is named `.<name>.<pid>.<nanos>.tmp` for a name of `names`.
#[cfg(test)]
fn temp_pid(file: &str, names: &[&str]) -> Option<u32> {
    temp_of(file)
        .filter(|(name, _)| names.contains(name))
        .map(|(_, pid)| pid)
}

/// The name and the writer's pid of `file` when it is named `.<name>.<pid>.<nanos>.tmp`.
fn temp_of(file: &str) -> Option<(&str, u32)> {
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
fn runs(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    match i32::try_from(pid) {
        Ok(p) if p > 0 => {
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), None) != Err(Errno::ESRCH)
        }
        _ => false,
    }
}

/// Writes each `(name, contents)` into `dir` below a rootfs already opened with [`open_rootfs`]
/// (first removing stale temporary files of a killed writer), all or nothing: every file is written whole under a temporary name first, and only then
/// renamed into place; on any failure no temporary file stays and no file of `files` is left
/// (one already renamed is removed, so no file pins CPUs the hook did not keep).
pub fn write_plan_files_in(
    root: &OwnedFd,
    dir: &Path,
    files: &[(&str, &[u8])],
) -> Result<(), RootfsError> {
    let dirfd = open_dir_in(root, dir)?;
    let names: Vec<&str> = files.iter().map(|(n, _)| *n).collect();
    remove_stale_temps(&dirfd, dir, &names);
    write_files_at(&dirfd, dir, files)
}

/// Writes each `(name, contents)` whole into the open directory `dirfd` (at `dir`, which
/// messages name): all to temporary names first, then each renamed into place; on a failure
/// the temporaries and the files already renamed are removed.
pub fn write_files_at(
    dirfd: &OwnedFd,
    dir: &Path,
    files: &[(&str, &[u8])],
) -> Result<(), RootfsError> {
    let mut temps: Vec<(String, &str)> = Vec::with_capacity(files.len());
    for (name, contents) in files {
        match write_temp(dirfd, dir, name, contents) {
            Ok(tmp) => temps.push((tmp, name)),
            Err(e) => {
                for (tmp, _) in &temps {
                    unlink(dirfd, tmp);
                }
                return Err(e);
            }
        }
    }
    for (i, (tmp, name)) in temps.iter().enumerate() {
        let renamed = renameat(
            Some(dirfd.as_raw_fd()),
            tmp.as_str(),
            Some(dirfd.as_raw_fd()),
            *name,
        );
        if let Err(errno) = renamed {
            for (tmp, _) in &temps[i..] {
                unlink(dirfd, tmp);
            }
            for (_, done) in &temps[..i] {
                unlink(dirfd, done);
            }
            return Err(RootfsError::Path {
                path: dir.join(name),
                what: "cannot rename into place",
                errno,
            });
        }
    }
    Ok(())
}

/// The most bytes of a plan.json read at poststop to see whose it is.
const MAX_OWNER_FILE: u64 = 1 << 20;

/// The `container` that the JSON file `name` in `dirfd` names (a regular file, read without
/// following a link or blocking on a FIFO, at most [`MAX_OWNER_FILE`] bytes); `None` otherwise.
fn named_container(dirfd: &OwnedFd, name: &str) -> Option<String> {
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let fd = own(openat(Some(dirfd.as_raw_fd()), name, flags, Mode::empty()).ok()?);
    let st = nix::sys::stat::fstat(fd.as_raw_fd()).ok()?;
    if st.st_mode & nix::libc::S_IFMT != nix::libc::S_IFREG {
        return None;
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(std::fs::File::from(fd), MAX_OWNER_FILE),
        &mut bytes,
    )
    .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    v.get("container")?.as_str().map(str::to_string)
}

/// At poststop, from a rootfs seen at its host path (the container is gone): removes the plan
/// files `names` from `dir` when `owner_file` (plan.json) names `container`, that is when the
/// createRuntime stage wrote them into the rootfs itself, a host directory (`podman --rootfs`,
/// or a bundle without a tmpfs on `/run`), where they would outlive the container and be read
/// by the next one. Never follows a link out of the rootfs, creates nothing, and removes no
/// file a plan of another container (or none) is in. Returns whether it removed them.
pub fn remove_plan_files_of(
    rootfs: &Path,
    dir: &Path,
    names: &[&str],
    owner_file: &str,
    container: &str,
) -> Result<bool, RootfsError> {
    let root = open_rootfs(Path::new("/"), None, rootfs)?;
    let Some(dirfd) = walk_dirs(&root, Path::new("/"), dir, false)? else {
        return Ok(false);
    };
    if named_container(&dirfd, owner_file).as_deref() != Some(container) {
        return Ok(false);
    }
    for name in names {
        match unlinkat(Some(dirfd.as_raw_fd()), *name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(errno) => {
                return Err(RootfsError::Path {
                    path: dir.join(name),
                    what: "cannot remove",
                    errno,
                })
            }
        }
    }
    Ok(true)
}

/// Writes an edit's `files` into `dir` below `root`, as [`write_plan_files_in`] does.
pub fn write_placed_in(
    root: &OwnedFd,
    dir: &Path,
    files: &[crate::edit::PlacedFile],
) -> Result<(), RootfsError> {
    let files: Vec<(&str, &[u8])> = files.iter().map(|f| (f.name, f.bytes.as_slice())).collect();
    write_plan_files_in(root, dir, &files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    /// Writes each `(name, contents)` into `dir` inside the container's rootfs.
    fn write_plan_files(
        proc_root: &Path,
        pid: Option<u32>,
        rootfs: &Path,
        dir: &Path,
        files: &[(&str, &[u8])],
    ) -> Result<(), RootfsError> {
        write_plan_files_in(&open_rootfs(proc_root, pid, rootfs)?, dir, files)
    }

    fn write(rootfs: &Path, dir: &str) -> Result<(), RootfsError> {
        write_plan_files(
            Path::new("/"),
            None,
            rootfs,
            Path::new(dir),
            &[("plan.env", b"A='1'\n")],
        )
    }

    #[test]
    fn creates_dirs_and_files_with_modes() {
        let t = tempfile::tempdir().unwrap();
        write(t.path(), "/run/cpuplan").unwrap();
        let f = t.path().join("run/cpuplan/plan.env");
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "A='1'\n");
        assert_eq!(
            std::fs::metadata(&f).unwrap().permissions().mode() & 0o777,
            0o644
        );
        let d = std::fs::metadata(t.path().join("run/cpuplan")).unwrap();
        assert_eq!(d.permissions().mode() & 0o777, 0o755);
        // Overwrites in place, leaving no temporary file.
        write(t.path(), "/run/cpuplan").unwrap();
        let names: Vec<_> = std::fs::read_dir(t.path().join("run/cpuplan"))
            .unwrap()
            .collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn refuses_symlinked_components() {
        let host = tempfile::tempdir().unwrap();
        let t = tempfile::tempdir().unwrap();
        symlink(host.path(), t.path().join("run")).unwrap();
        let e = write(t.path(), "/run/cpuplan").unwrap_err().to_string();
        assert!(e.contains("symlink"), "{e}");
        assert_eq!(
            std::fs::read_dir(host.path()).unwrap().count(),
            0,
            "nothing written through the link"
        );
    }

    #[test]
    fn replaces_a_planted_file_symlink_without_following_it() {
        let host = tempfile::tempdir().unwrap();
        let secret = host.path().join("shadow");
        std::fs::write(&secret, "secret").unwrap();
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("run/cpuplan")).unwrap();
        symlink(&secret, t.path().join("run/cpuplan/plan.env")).unwrap();
        write(t.path(), "/run/cpuplan").unwrap();
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "secret");
        let meta = std::fs::symlink_metadata(t.path().join("run/cpuplan/plan.env")).unwrap();
        assert!(meta.file_type().is_file());
    }

    #[test]
    fn a_fifo_is_replaced_without_blocking() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("run/cpuplan")).unwrap();
        nix::unistd::mkfifo(
            &t.path().join("run/cpuplan/plan.env"),
            Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        write(t.path(), "/run/cpuplan").unwrap();
        assert!(
            std::fs::symlink_metadata(t.path().join("run/cpuplan/plan.env"))
                .unwrap()
                .is_file()
        );
    }

    #[test]
    fn a_directory_in_place_of_the_file_is_an_error() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("run/cpuplan/plan.env/x")).unwrap();
        let e = write(t.path(), "/run/cpuplan").unwrap_err().to_string();
        assert!(e.contains("plan.env") && e.contains("rename"), "{e}");
        assert_eq!(
            std::fs::read_dir(t.path().join("run/cpuplan"))
                .unwrap()
                .count(),
            1,
            "temp file removed"
        );
    }

    #[test]
    fn temporary_names_are_recognised_exactly() {
        let names = ["plan.env", "plan.json"];
        assert_eq!(temp_pid(".plan.env.42.123.tmp", &names), Some(42));
        assert_eq!(temp_pid(".plan.json.7.0.tmp", &names), Some(7));
        let ours = temp_name("plan.env");
        assert_eq!(temp_pid(&ours, &names), Some(std::process::id()));
        for other in [
            "plan.env",
            ".plan.env.tmp",
            ".plan.env.42.tmp",
            ".plan.env.42.x.tmp",
            ".plan.env.-1.2.tmp",
            ".plan.env.42.1.tmp.bak",
            "plan.env.42.1.tmp",
            ".other.42.1.tmp",
            ".plan.envx.42.1.tmp",
        ] {
            assert_eq!(temp_pid(other, &names), None, "{other}");
        }
        assert!(runs(std::process::id()));
        assert!(!runs(u32::MAX));
        assert!(!runs(0));
    }

    #[test]
    fn dot_dot_is_refused() {
        let t = tempfile::tempdir().unwrap();
        assert!(write(t.path(), "/run/../../etc").is_err());
    }

    #[test]
    fn own_pid_is_refused_as_same_namespace() {
        let t = tempfile::tempdir().unwrap();
        let e = write_plan_files(
            Path::new("/"),
            Some(std::process::id()),
            t.path(),
            Path::new("/run/cpuplan"),
            &[],
        )
        .unwrap_err();
        assert!(matches!(e, RootfsError::SameNamespace(_)), "{e}");
        assert!(!t.path().join("run").exists());
    }

    #[test]
    fn a_gone_pid_writes_nothing() {
        let t = tempfile::tempdir().unwrap();
        let e = write_plan_files(
            Path::new("/"),
            Some(u32::MAX - 1),
            t.path(),
            Path::new("/run/cpuplan"),
            &[],
        )
        .unwrap_err();
        assert!(matches!(e, RootfsError::Process { .. }), "{e}");
        assert!(!t.path().join("run").exists());
    }

    #[test]
    fn poststop_removes_only_the_files_written_for_the_container() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        let names = ["plan.env", "plan.json"];
        let files: [(&str, &[u8]); 2] = [
            ("plan.env", b"X=1\n"),
            ("plan.json", br#"{"container":"a"}"#),
        ];
        let dir = Path::new("/run/cpuplan");
        // Nothing there: nothing removed, nothing created.
        assert!(!remove_plan_files_of(r, dir, &names, "plan.json", "a").unwrap());
        assert!(!r.join("run").exists());
        write_plan_files(Path::new("/"), None, r, dir, &files).unwrap();
        // Another container's plan stays.
        assert!(!remove_plan_files_of(r, dir, &names, "plan.json", "b").unwrap());
        assert!(r.join("run/cpuplan/plan.env").exists());
        assert!(remove_plan_files_of(r, dir, &names, "plan.json", "a").unwrap());
        assert!(
            !r.join("run/cpuplan/plan.env").exists() && !r.join("run/cpuplan/plan.json").exists()
        );
        // A link in the path is never followed out of the rootfs.
        let outside = t.path().join("outside");
        std::fs::create_dir_all(outside.join("cpuplan")).unwrap();
        std::fs::write(outside.join("cpuplan/plan.json"), br#"{"container":"a"}"#).unwrap();
        std::fs::remove_dir_all(r.join("run")).unwrap();
        symlink(&outside, r.join("run")).unwrap();
        assert!(remove_plan_files_of(r, dir, &names, "plan.json", "a").is_err());
        assert!(outside.join("cpuplan/plan.json").exists());
        // A FIFO as plan.json: not opened for reading, nothing removed.
        std::fs::remove_file(r.join("run")).unwrap();
        std::fs::create_dir_all(r.join("run/cpuplan")).unwrap();
        nix::unistd::mkfifo(
            &r.join("run/cpuplan/plan.json"),
            Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        assert!(!remove_plan_files_of(r, dir, &names, "plan.json", "a").unwrap());
    }
}
