//! One plugin per plan directory at a time: `<nri_dir>/.plugin.lock`, flocked for the plugin's
//! life and naming its pid.
//!
//! Two instances registered with one runtime at once (a DaemonSet rollout starts the new pod
//! while the old one runs) both get every CreateContainer. NRI refuses a container that two
//! plugins both adjust (containerd 1.7: `plugins "10-cpuplan" and "10-cpuplan" both tried to
//! set annotation cpuplan.plan`), which the second instance escapes only where the first gave
//! the plan mount (it then leaves the container alone, as one that mounts its `nri_dir`), and
//! the claims of the containers the first one planned then go stale when it exits. So an
//! instance connects only once it holds its `nri_dir`'s lock: one started while another serves
//! the directory logs the other's pid and waits (the kernel drops an flock however its holder
//! exits), then connects, and at its Synchronize takes the claims over. A plugin the runtime
//! launched does not wait (the runtime would time its registration out): it refuses to start.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, Flock, FlockArg, OFlag};
use nix::sys::stat::Mode;

use super::error::NriError;
use crate::apply::below::{open_dir_in, open_rootfs};

/// The lock file's name in `nri_dir` (a dot name: never a container id).
pub const LOCK_FILE: &str = ".plugin.lock";

/// This process's hold of a plan directory: released when it is dropped or the process ends.
#[derive(Debug)]
pub(crate) struct Instance {
    dir: PathBuf,
    _lock: Flock<File>,
}

impl Instance {
    /// Takes `nri_dir`'s lock; while another plugin holds it, waits for it to exit when `wait`
    /// (logging the other's pid), else fails naming it.
    pub(crate) fn acquire(nri_dir: &Path, wait: bool) -> Result<Instance, NriError> {
        Self::take(nri_dir, wait, || {})
    }

    /// Takes `nri_dir`'s lock, waiting while another plugin holds it; `standby` is called once
    /// before that wait begins (not at all where the lock is free).
    pub(crate) fn acquire_standing_by(
        nri_dir: &Path,
        standby: impl FnOnce(),
    ) -> Result<Instance, NriError> {
        Self::take(nri_dir, true, standby)
    }

    fn take(nri_dir: &Path, wait: bool, standby: impl FnOnce()) -> Result<Instance, NriError> {
        let mut standby = Some(standby);
        let path = nri_dir.join(LOCK_FILE);
        let fail = |what: String| NriError::Instance {
            path: path.clone(),
            what,
        };
        let mut file = open(nri_dir).map_err(|e| fail(e.to_string()))?;
        let mut waited = None;
        let lock = loop {
            let how = if waited.is_some() {
                FlockArg::LockExclusive
            } else {
                FlockArg::LockExclusiveNonblock
            };
            match Flock::lock(file, how) {
                Ok(lock) => break lock,
                Err((f, Errno::EINTR)) => file = f,
                Err((f, Errno::EWOULDBLOCK)) if waited.is_none() => {
                    let other = holder_of(&f);
                    if !wait {
                        return Err(fail(format!(
                            "another cpuplan plugin ({other}) serves {}: one plugin per nri_dir, this one does not start",
                            nri_dir.display()
                        )));
                    }
                    log::info!(
                        "nri: another cpuplan plugin ({other}) serves {}: waiting for it to exit before connecting (one plugin per nri_dir)",
                        nri_dir.display()
                    );
                    waited = Some(other);
                    if let Some(standby) = standby.take() {
                        standby();
                    }
                    file = f;
                }
                Err((_, errno)) => return Err(fail(format!("cannot lock it: {errno}"))),
            }
        };
        if let Some(other) = waited {
            log::info!("nri: the plugin before this one ({other}) has exited: connecting");
        }
        let me = format!("{}\n", std::process::id());
        let written = lock
            .set_len(0)
            .and_then(|()| lock.write_all_at(me.as_bytes(), 0))
            .and_then(|()| (&*lock).flush());
        if let Err(e) = written {
            log::debug!("nri: cannot write the pid into {}: {e}", path.display());
        }
        Ok(Instance {
            dir: nri_dir.to_path_buf(),
            _lock: lock,
        })
    }

    /// The plan directory held.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }
}

/// `pid N` of the holder the lock file names, or `pid unknown`.
fn holder_of(file: &File) -> String {
    let mut buf = [0u8; 32];
    let n = file.read_at(&mut buf, 0).unwrap_or(0);
    match std::str::from_utf8(&buf[..n]).ok().map(str::trim) {
        Some(pid) if !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()) => {
            format!("pid {pid}")
        }
        _ => "pid unknown".into(),
    }
}

/// Opens (creating, 0600) the lock file in `nri_dir` (made as needed, no component a link),
/// never through a link, and only a regular file of this user's own with one link (a hard link
/// planted there is never written through: [`cpuplan::require_own_file`]).
fn open(nri_dir: &Path) -> Result<File, std::io::Error> {
    let root = open_rootfs(Path::new("/"), None, Path::new("/")).map_err(std::io::Error::other)?;
    let dir = open_dir_in(&root, nri_dir).map_err(std::io::Error::other)?;
    let flags =
        OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let fd = openat(
        Some(dir.as_raw_fd()),
        LOCK_FILE,
        flags,
        Mode::from_bits_truncate(0o600),
    )?;
    let file = File::from(crate::read::own(fd));
    cpuplan::require_own_file(&file)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_naming_the_first_and_gets_it_once_it_is_dropped() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("nri");
        let first = Instance::acquire(&dir, false).unwrap();
        assert_eq!(first.dir(), dir);
        let text = std::fs::read_to_string(dir.join(LOCK_FILE)).unwrap();
        assert_eq!(text, format!("{}\n", std::process::id()));
        // flock is per open file: a second open in this process is a second holder.
        let err = Instance::acquire(&dir, false).unwrap_err().to_string();
        assert!(
            err.contains(&format!("pid {}", std::process::id()))
                && err.contains(LOCK_FILE)
                && err.contains("one plugin per nri_dir"),
            "{err}"
        );
        // A waiting one gets it as soon as the first goes, standing by meanwhile.
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn({
            let dir = dir.clone();
            move || {
                Instance::acquire_standing_by(&dir, move || tx.send(()).unwrap())
                    .map(|i| i.dir().to_path_buf())
            }
        });
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(!waiter.is_finished(), "it waits while the first holds it");
        assert_eq!(rx.try_recv(), Ok(()), "it stood by");
        drop(first);
        assert_eq!(waiter.join().unwrap().unwrap(), dir);
    }

    #[test]
    fn a_lock_file_that_is_a_link_or_no_file_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("nri");
        std::fs::create_dir_all(&dir).unwrap();
        let target = t.path().join("elsewhere");
        std::fs::write(&target, "keep").unwrap();
        std::os::unix::fs::symlink(&target, dir.join(LOCK_FILE)).unwrap();
        let err = Instance::acquire(&dir, false).unwrap_err().to_string();
        assert!(err.contains(LOCK_FILE), "{err}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        std::fs::remove_file(dir.join(LOCK_FILE)).unwrap();
        nix::unistd::mkfifo(&dir.join(LOCK_FILE), Mode::from_bits_truncate(0o600)).unwrap();
        let err = Instance::acquire(&dir, false).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
        std::fs::remove_file(dir.join(LOCK_FILE)).unwrap();
        // A hard link to a file elsewhere, and another user's file: never truncated or written.
        std::fs::hard_link(&target, dir.join(LOCK_FILE)).unwrap();
        let err = Instance::acquire(&dir, false).unwrap_err().to_string();
        assert!(
            err.contains(LOCK_FILE) && err.contains("2 links to it (a hard link)"),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        std::fs::remove_file(dir.join(LOCK_FILE)).unwrap();
        std::fs::write(dir.join(LOCK_FILE), "theirs").unwrap();
        std::os::unix::fs::chown(dir.join(LOCK_FILE), Some(4242), None).unwrap();
        let err = Instance::acquire(&dir, false).unwrap_err().to_string();
        assert!(err.contains("owned by uid 4242, not by uid 0"), "{err}");
        let theirs = std::fs::read_to_string(dir.join(LOCK_FILE)).unwrap();
        assert_eq!(theirs, "theirs");
    }
}
