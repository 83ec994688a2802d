//! GPU claims that outlive the claiming process.
//!
//! The hook exits while its container runs, so a claim cannot be an flock held for the
//! life of a process (an in-process `claim_gpus` would). Instead a claims directory holds one
//! file per claimed GPU (`0000:2a:00.0.json`, holding its [`Holder`]) and one lock file
//! `.lock`. Every change happens under an exclusive flock of `.lock`, so two concurrent
//! takers never both win. The lock file is never unlinked: another process may already
//! hold an fd on its inode, and removing it would let a third lock a different one.
//! A claim whose holder pid is gone, is a zombie, or runs with another start time, is stale
//! and may be taken over; claim files are written to a temporary name and renamed, never torn.
//! Nothing is fsynced: a claim is worth nothing after a crash (every holder is gone with the
//! boot, and `/run` is normally a tmpfs), a file a crash left empty or torn does not parse and is taken
//! over, so a sync would only cost each claim and release a disk flush where `/run` is on a disk.
//!
//! A holder is a container id within a scope: the same id may run in two runtime roots
//! (two `runc --root`s, two containerd namespaces), so an id alone names no container. The
//! scope names the operator's agent that claims for the container: the hook's is the
//! container's bundle path, the NRI plugin's `nri:<plugin>`, the Python package's
//! `python:pidns:<inode>` (its ids are pids). A claim of a container in a scope is that
//! container's, whoever holds it now: claiming for the same container in the same scope takes
//! it over under the new holder (a second plugin instance after a rollout, a container started
//! again), while a claim of another container or another scope holds while its holder lives.
//! Releasing a container's claims drops them unless another holder that still runs took them
//! over (that one releases them itself). Claim files written before scopes existed have none
//! (an empty scope): they are nobody's container, released by nobody, and taken over once
//! their pid no longer runs.
//!
//! A pid is numbered in a pid namespace: a holder records its claimer's ([`crate::pidns`]). A
//! reader in that namespace judges the pid as it is; one in another looks the process up by
//! namespace where it can see it (from the host, every container's), and where it cannot (from
//! a container, the host's claims) the holder holds: a claim is never taken over across pid
//! namespaces on a guess. Claim files written before namespaces were recorded have none (0):
//! their pid is judged in the reader's namespace, as before.

use std::fs::{DirBuilder, File};
use std::io::{ErrorKind, Write};
use std::ops::ControlFlow;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::fsutil::read_file;
pub use crate::pci::is_pci_address;
use crate::pidns::{own_pid_ns, seen_in, Seen};
use crate::proc_stat::live_start_time;

/// The lock file's name in a claims directory.
pub const LOCK_FILE: &str = ".lock";

/// How long [`list_claims`] waits for the shared lock.
pub const LIST_WAIT: Duration = Duration::from_secs(2);

/// How long to sleep between two tries of a busy lock.
const POLL: Duration = Duration::from_millis(5);

/// The most bytes of one claim file read (a holder is a few hundred).
const MAX_CLAIM: usize = 64 << 10;

/// Who holds a claim: a container id within its scope, the pid whose life the claim lasts
/// (the container's init for the hook, the plugin's own for the NRI plugin), and its start time.
///
/// A claim belongs to the container and scope ([`Holder::is`]): a claimer of the same
/// container and scope takes it over whatever pid holds it; any other holder holds it against
/// the claimer while it lives. [`release`] drops the claims of an id within a scope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// Container id.
    pub container: String,
    /// Where the id is unique: the bundle path for the hook, `nri:<plugin>` for the NRI
    /// plugin; empty in a claim file written before scopes (released by nobody).
    #[serde(default)]
    pub scope: String,
    /// The pid the claim lasts while (the container's init for the hook, the plugin for NRI).
    pub pid: u32,
    /// Field 22 of `/proc/<pid>/stat` (clock ticks since boot).
    pub start_time: u64,
    /// The pid namespace `pid` is numbered in (the inode of the claimer's `/proc/self/ns/pid`;
    /// 0 in a claim file written before namespaces were recorded: the reader's).
    #[serde(default)]
    pub pid_ns: u64,
}

impl Holder {
    /// The holder for `container` in `scope` whose init is `pid` (numbered in the caller's pid
    /// namespace), its start time read under `root`; `None` if the pid is gone or a zombie.
    pub fn of_pid(
        root: &Path,
        container: &str,
        scope: &str,
        pid: u32,
    ) -> Result<Option<Holder>, ClaimError> {
        Ok(live_start_time(root, pid)?.map(|start_time| Holder {
            container: container.to_string(),
            scope: scope.to_string(),
            pid,
            start_time,
            pid_ns: own_pid_ns(),
        }))
    }

    /// Whether the holder's pid still runs, not a zombie, with the recorded start time (read
    /// under `root`). A holder of another pid namespace than the caller's is looked up by its
    /// namespace; where the caller cannot see that namespace it counts as live (it holds).
    pub fn is_live(&self, root: &Path) -> Result<bool, ClaimError> {
        let mine = own_pid_ns();
        if self.pid_ns == 0 || mine == 0 || self.pid_ns == mine {
            return Ok(live_start_time(root, self.pid)? == Some(self.start_time));
        }
        Ok(
            match seen_in(root, self.pid_ns, self.pid, self.start_time, mine)? {
                Seen::Runs(start) => start == self.start_time,
                Seen::Gone => false,
                Seen::Unknown => true,
            },
        )
    }

    /// Whether this holder is container `container` of `scope` (a holder without a scope is nobody's).
    pub fn is(&self, container: &str, scope: &str) -> bool {
        !self.scope.is_empty() && self.scope == scope && self.container == container
    }
}

/// One claim as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Claim {
    /// GPU PCI address.
    pub address: String,
    /// Its holder.
    pub holder: Holder,
    /// Whether the holder still runs.
    pub live: bool,
}

/// The result of [`claim_gpus`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// Every address is now held by the holder.
    Claimed,
    /// None taken: `address` is held by the live `by`.
    Held {
        /// The GPU.
        address: String,
        /// Its live holder.
        by: Holder,
    },
}

/// Why claims could not be read or changed.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// A host file (claim, lock or `/proc/<pid>/stat`) could not be read or is malformed.
    #[error(transparent)]
    Host(#[from] Error),
    /// Another process held the lock for longer than the caller would wait.
    #[error("{}: held by another process for {waited:?}; gave up waiting", path.display())]
    Busy {
        /// The lock file.
        path: PathBuf,
        /// How long it was waited on.
        waited: Duration,
    },
    /// An address that is not a lowercase PCI address (`0000:2a:00.0`), so names no claim file.
    #[error("not a PCI address (want lowercase like 0000:2a:00.0): {address:?}")]
    Address {
        /// The address as given.
        address: String,
    },
}

/// Claim every address for `holder`, all or nothing, under an flock of `dir` waited on at most `wait`.
///
/// An address already held by the very same holder is kept; one held for the same container
/// in the same scope under another pid (another instance of the agent, the container started
/// again) is the container's and taken over, live or not; one held by any other live holder
/// (another id, or the same id in another scope) makes the call take nothing and return
/// [`ClaimOutcome::Held`]; one held by a gone, zombie or restarted pid (or a claim file that
/// does not parse) is stale and taken over. Pids are read under `root`. The directory is not
/// listed: a temporary file a killed claimer left (`.<address>.json.tmp`) for an address
/// claimed now is written over and renamed, and the others go at the next [`release`], which
/// lists the directory anyway (a listing here cost every container start five syscalls).
pub fn claim_gpus(
    dir: &Path,
    root: &Path,
    holder: &Holder,
    addresses: &[String],
    wait: Duration,
) -> Result<ClaimOutcome, ClaimError> {
    let mut wanted: Vec<&str> = Vec::with_capacity(addresses.len());
    for address in addresses {
        if !is_pci_address(address) {
            return Err(ClaimError::Address {
                address: address.clone(),
            });
        }
        if !wanted.contains(&address.as_str()) {
            wanted.push(address);
        }
    }
    // The directory is made only where the lock file cannot be opened for its absence: one
    // open, not a mkdir and a stat, at every claim once it is there.
    let _lock = match lock(dir, FlockArg::LockExclusiveNonblock, wait) {
        Err(ClaimError::Host(Error::Io { source, .. })) if source.kind() == ErrorKind::NotFound => {
            create_dir(dir)?;
            lock(dir, FlockArg::LockExclusiveNonblock, wait)?
        }
        locked => locked?,
    };

    // Decide for every address before writing any, so a held one leaves all untouched. The
    // flag: the claim was already the container's (an undo leaves it).
    let mut to_write: Vec<(&str, bool)> = Vec::with_capacity(wanted.len());
    for address in wanted {
        let path = claim_path(dir, address);
        let mine = match read_holder(&path) {
            Ok(None) => false,
            Ok(Some(h)) if h == *holder => true,
            Ok(Some(h)) if h.is(&holder.container, &holder.scope) => {
                log::info!(
                    "taking over {}: container {} of scope {:?} claims it again as pid {} (it was pid {} of pid namespace {})",
                    path.display(),
                    h.container,
                    h.scope,
                    holder.pid,
                    h.pid,
                    h.pid_ns
                );
                true
            }
            Ok(Some(h)) => {
                if h.is_live(root)? {
                    return Ok(ClaimOutcome::Held {
                        address: address.to_string(),
                        by: h,
                    });
                }
                log::info!(
                    "taking over stale claim {}: {} (scope {:?}, pid {} of pid namespace {}) no longer runs",
                    path.display(),
                    h.container,
                    h.scope,
                    h.pid,
                    h.pid_ns
                );
                false
            }
            Err(e @ ClaimError::Host(Error::Malformed { .. })) => {
                log::warn!("taking over a claim file that does not parse: {e}");
                false
            }
            Err(e) => return Err(e),
        };
        to_write.push((address, mine));
    }

    let mut text = serde_json::to_string_pretty(holder)
        .map_err(|e| Error::malformed(dir, "cannot encode holder", e.to_string()))?;
    text.push('\n');
    for (i, (address, _)) in to_write.iter().enumerate() {
        if let Err(e) = write_atomically(dir, address, &text) {
            // Undo what this call added, so a failure takes nothing it did not already hold.
            for (done, was_mine) in &to_write[..i] {
                if !was_mine {
                    let _ = std::fs::remove_file(claim_path(dir, done));
                }
            }
            return Err(e.into());
        }
    }
    Ok(ClaimOutcome::Claimed)
}

/// Drop the claims of `container` of `scope` (see [`Holder::is`]) held by `by` (the releaser's
/// own holder, where it is one) or by a holder that no longer runs (pids read under `root`);
/// returns how many.
///
/// A claim of the container that another live holder took over (a newer instance of the same
/// agent) is kept: that holder releases it itself. Claims of the same id in another scope (a
/// container of another runtime root) are kept, and so are claims without a scope. The
/// temporary files killed claimers left (`.<address>.json.tmp`, any address) are removed.
pub fn release(
    dir: &Path,
    root: &Path,
    container: &str,
    scope: &str,
    by: Option<&Holder>,
    wait: Duration,
) -> Result<usize, ClaimError> {
    // No directory, no claim: the lock file's open says so (no stat of the directory first).
    let _lock = match lock(dir, FlockArg::LockExclusiveNonblock, wait) {
        Err(ClaimError::Host(Error::Io { source, .. }))
            if matches!(
                source.kind(),
                ErrorKind::NotFound | ErrorKind::NotADirectory
            ) =>
        {
            return Ok(0)
        }
        locked => locked?,
    };
    let found = scan(dir)?;
    remove_temps(&found.temps);
    let mut dropped = 0;
    for (address, path) in found.claims {
        match read_holder(&path) {
            Ok(Some(h)) if h.is(container, scope) => {
                if by != Some(&h) && still_runs(&h, root) {
                    log::info!(
                        "kept {}: container {}'s claim is held by pid {}, which still runs (it releases it)",
                        path.display(),
                        h.container,
                        h.pid
                    );
                    continue;
                }
                remove(&path)?;
                dropped += 1;
            }
            Ok(_) => {}
            Err(e) => log::warn!("skipping claim of {address}: {e}"),
        }
    }
    Ok(dropped)
}

/// Whether `h` still runs; a liveness that cannot be read counts as gone (its container is
/// being released: only a holder known to run keeps the claim).
fn still_runs(h: &Holder, root: &Path) -> bool {
    h.is_live(root).unwrap_or_else(|e| {
        log::warn!(
            "cannot tell whether pid {} still runs ({e}): released",
            h.pid
        );
        false
    })
}

/// Every claim in `dir` in address order, each with whether its holder is live (pids read under `root`).
pub fn list_claims(dir: &Path, root: &Path) -> Result<Vec<Claim>, ClaimError> {
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let _lock = lock(dir, FlockArg::LockSharedNonblock, LIST_WAIT)?;
    let mut claims = Vec::new();
    for (address, path) in claim_files(dir)? {
        if let Some(holder) = read_holder(&path)? {
            let live = holder.is_live(root)?;
            claims.push(Claim {
                address,
                holder,
                live,
            });
        }
    }
    Ok(claims)
}

/// `<dir>/<address>.json`.
fn claim_path(dir: &Path, address: &str) -> PathBuf {
    dir.join(format!("{address}.json"))
}

/// The claim files in `dir` (named by a PCI address), sorted by address.
fn claim_files(dir: &Path) -> Result<Vec<(String, PathBuf)>, Error> {
    Ok(scan(dir)?.claims)
}

/// What one listing of a claims directory finds.
struct Scan {
    /// Each claim file's address and path, in address order.
    claims: Vec<(String, PathBuf)>,
    /// The temporary files of writes cut short (`.<address>.json.tmp`).
    temps: Vec<PathBuf>,
}

/// Lists `dir` once: its claim files and its temporary files.
fn scan(dir: &Path) -> Result<Scan, Error> {
    let io = |source| Error::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut found = Scan {
        claims: Vec::new(),
        temps: Vec::new(),
    };
    let listed =
        crate::fsutil::open(dir, nix::libc::O_RDONLY | nix::libc::O_DIRECTORY, 0).map_err(io)?;
    crate::dirents::each(&listed, |name, _| {
        let Ok(name) = std::str::from_utf8(name) else {
            return ControlFlow::Continue(());
        };
        if let Some(address) = name.strip_suffix(".json").filter(|a| is_pci_address(a)) {
            found.claims.push((address.to_string(), dir.join(name)));
        } else if name
            .strip_prefix('.')
            .and_then(|n| n.strip_suffix(".json.tmp"))
            .is_some_and(is_pci_address)
        {
            found.temps.push(dir.join(name));
        }
        ControlFlow::Continue(())
    })
    .map_err(io)?;
    found.claims.sort();
    Ok(found)
}

/// The holder recorded in a claim file, `None` if there is none; read bounded and without
/// blocking: a FIFO, device, directory or oversized file there is malformed (so taken over).
fn read_holder(path: &Path) -> Result<Option<Holder>, ClaimError> {
    let bytes = match read_file(path, MAX_CLAIM) {
        Ok(bytes) => bytes,
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
            return Ok(None)
        }
        Err(e) if matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::InvalidData) => {
            return Err(Error::malformed(path, e.to_string(), "").into())
        }
        Err(source) => {
            return Err(Error::Io {
                path: path.to_path_buf(),
                source,
            }
            .into())
        }
    };
    let text = String::from_utf8_lossy(&bytes);
    match serde_json::from_str(&text) {
        Ok(h) => Ok(Some(h)),
        Err(e) => Err(Error::malformed(path, format!("not a claim holder ({e})"), text).into()),
    }
}

/// `.<address>.json.tmp`: where a claim file is written before its rename.
fn temp_name(address: &str) -> String {
    format!(".{address}.json.tmp")
}

/// Removes the temporary files `temps` of [`temp_name`]'s form (and nothing else): only ever
/// called under the exclusive lock, so no live claimer is writing one, and any found is a
/// killed claimer's leftover.
fn remove_temps(temps: &[PathBuf]) {
    for path in temps {
        match std::fs::remove_file(path) {
            Ok(()) => log::info!("removed a stale claim temporary file {}", path.display()),
            Err(e) => log::warn!("cannot remove stale {}: {e}", path.display()),
        }
    }
}

/// Write `text` to `<dir>/.<address>.json.tmp` and rename it over the claim file (no fsync: see
/// the module's comment).
fn write_atomically(dir: &Path, address: &str, text: &str) -> Result<(), Error> {
    let tmp = dir.join(temp_name(address));
    let path = claim_path(dir, address);
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { path, source }
    };
    // Truncated only once it is known to be a file of the claimer's own (never at the open).
    let open = |fresh: bool| {
        use nix::libc::{O_CREAT, O_EXCL, O_NOFOLLOW, O_NONBLOCK, O_WRONLY};
        let excl = if fresh { O_EXCL } else { 0 };
        let flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | excl;
        let file = crate::fsutil::open(&tmp, flags, 0o644)?;
        crate::fsutil::require_own_file(&file)?;
        file.set_len(0)?;
        Ok::<File, std::io::Error>(file)
    };
    // What a killed claimer left under the name is written over; what may not be (a symlink,
    // a FIFO, a directory left there by hand, a hard link, another user's file) is removed,
    // saying why, and a fresh file made in its place.
    let mut file = match open(false) {
        Ok(file) => file,
        Err(e) => {
            log::warn!("{}: {e}: removed, and a fresh one made", tmp.display());
            let _ = std::fs::remove_file(&tmp).or_else(|_| std::fs::remove_dir(&tmp));
            open(true).map_err(io(&tmp))?
        }
    };
    file.write_all(text.as_bytes()).map_err(io(&tmp))?;
    std::fs::rename(&tmp, &path).map_err(io(&path))
}

/// Remove a claim file (already gone is fine).
fn remove(path: &Path) -> Result<(), Error> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(Error::Io {
            path: path.to_path_buf(),
            source: e,
        }),
        _ => Ok(()),
    }
}

/// Create the claims directory (0755, with parents) if it is missing.
fn create_dir(dir: &Path) -> Result<(), Error> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(|source| Error::Io {
            path: dir.to_path_buf(),
            source,
        })
}

/// Open `<dir>/.lock` (created 0600 if missing, never unlinked) and flock it, trying until `wait` has passed.
fn lock(dir: &Path, how: FlockArg, wait: Duration) -> Result<Flock<File>, ClaimError> {
    let path = dir.join(LOCK_FILE);
    let mut file = open_lock(&path)?;
    // The clock is read once the lock is found taken: an uncontended lock never reads it.
    let mut start = None;
    loop {
        match Flock::lock(file, how) {
            Ok(locked) => return Ok(locked),
            Err((f, Errno::EWOULDBLOCK)) => {
                let waited = start.get_or_insert_with(Instant::now).elapsed();
                if waited >= wait {
                    return Err(ClaimError::Busy { path, waited });
                }
                std::thread::sleep(POLL.min(wait - waited));
                file = f;
            }
            Err((f, Errno::EINTR)) => file = f,
            Err((_, errno)) => {
                return Err(Error::Io {
                    path,
                    source: std::io::Error::from(errno),
                }
                .into())
            }
        }
    }
}

/// An exclusive flock of `dir`'s lock file (`.lock`, made 0600 where missing), tried until
/// `wait` has passed, as claims are changed under: for another directory of records that a
/// claimer keeps (the hook's host-plan records). Dropping it unlocks.
pub fn lock_exclusive(dir: &Path, wait: Duration) -> Result<Flock<File>, ClaimError> {
    lock(dir, FlockArg::LockExclusiveNonblock, wait)
}

/// The lock file opened for flock: read-write (created 0600) and then only a file of this
/// user's own with one link ([`crate::fsutil::require_own_file`]), or read-only where that is
/// all we may, and then only a regular file; never through a link, never blocking.
fn open_lock(path: &Path) -> Result<File, Error> {
    use nix::libc::{O_CREAT, O_RDONLY, O_RDWR};
    let flags = nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK;
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    match crate::fsutil::open(path, O_RDWR | O_CREAT | flags, 0o600) {
        Err(e) if e.kind() == ErrorKind::PermissionDenied => {
            let file = crate::fsutil::open(path, O_RDONLY | flags, 0).map_err(io)?;
            crate::fsutil::require_regular(&file).map_err(io)?;
            Ok(file)
        }
        Err(e) => Err(io(e)),
        Ok(file) => {
            crate::fsutil::require_own_file(&file).map_err(io)?;
            Ok(file)
        }
    }
}

#[cfg(test)]
mod tests;
