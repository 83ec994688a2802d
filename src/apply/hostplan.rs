//! The records of plan files that sit in a rootfs's own filesystem: for poststop, for a second
//! container on the same rootfs directory, and for collecting what a container that never got
//! its poststop left.
//!
//! Where the plan directory is on a tmpfs (runc's and podman's `/run`) or another mount, the
//! files go with the container's mounts. Where it is the rootfs's own filesystem (a host
//! directory given as rootfs, or an image without a tmpfs on `/run`), they outlive the
//! container, poststop reads the bundle again to remove them
//! ([`crate::apply::below::remove_plan_files_of`]), and every container given the same rootfs
//! directory sees the same plan directory. createRuntime leaves records only in that case, so
//! poststop pays for the bundle's `config.json` and the rootfs walk only where there is
//! something to remove: one failed `open` otherwise.
//!
//! The records live in `hostplans/` beside the claims directory (`/run/cpuplan/hostplans` by
//! default: the operator's, on the host; not in the claims directory, which holds the lock and
//! at most one file per GPU), each a [`Record`] (the holder as claims record it: container,
//! scope, pid, start time, pid namespace; and the plan directory's identity), changed under an
//! flock of `hostplans/.lock`:
//! - `.hostplan.<hash>`: the container's, named by an FNV-1a hash of its scope (its bundle) and
//!   id, never by the id itself (the tenant's): a hash shared by two containers costs the other
//!   one a look at its bundle, nothing more, as the removal checks that `plan.json` names the
//!   container;
//! - `.plandir.<dev>-<ino>`: the plan directory's (its device and inode, hex), saying which
//!   container plans for it. A plan directory is planned for by one live container at a time:
//!   another container on it gets no plan files ([`hold`] says who holds it), so it neither
//!   overwrites the holder's files nor, at its poststop, removes them.
//!
//! A record whose holder is gone (its pid no longer runs with its start time, judged as claims
//! judge holders: [`cpuplan::Holder::is_live`]) is stale: a container that never got its
//! poststop (runc and its init killed) leaves one. Each [`hold`] (the only place records are
//! made) first looks at up to [`COLLECT`] records and removes the stale ones, so the records
//! never outgrow the containers that hold them by more than a bounded sweep; a stale
//! directory record is also taken over by the next container on that directory.

use std::io::{ErrorKind, Write};
use std::ops::ControlFlow;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cpuplan::{ClaimError, Holder};
use serde::{Deserialize, Serialize};

/// The most records looked at for staleness by one [`hold`].
pub const COLLECT: usize = 8;

/// The most entries of the records' directory listed by one [`hold`].
const MAX_LIST: usize = 4096;

/// The most bytes of one record read (a holder is a few hundred).
const MAX_RECORD: usize = 64 << 10;

/// One record: who holds it and the plan directory it is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The container that wrote the plan files, and the pid they last while.
    #[serde(flatten)]
    pub holder: Holder,
    /// The plan directory's identity, `<dev>-<ino>` in hex.
    pub dir: String,
}

/// What [`hold`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hold {
    /// The directory is the container's now (it was free, stale, or its own already).
    Taken {
        /// The records of gone holders removed on the way, for their plan files to go too.
        collected: Vec<Holder>,
    },
    /// Another live container plans for the directory: write nothing there.
    Held {
        /// The holder.
        by: Holder,
        /// The records of gone holders removed on the way.
        collected: Vec<Holder>,
    },
}

/// Why the records could not be read or changed.
#[derive(Debug, thiserror::Error)]
pub enum HostPlanError {
    /// The records' lock could not be taken.
    #[error(transparent)]
    Lock(#[from] ClaimError),
    /// A record could not be written or removed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The record.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// The records' directory: `hostplans` beside the claims directory `claims_dir` (the config
/// refuses a `claims_dir` where this directory, or one above it, is not root's alone:
/// [`crate::config::HookConfig::on_host`]).
pub fn records_dir(claims_dir: &Path) -> PathBuf {
    crate::config::records_dir(claims_dir)
}

/// The container record's path for container `id` of `scope`, claims directory `claims_dir`.
fn record(claims_dir: &Path, scope: &str, id: &str) -> PathBuf {
    let mut key = Vec::with_capacity(scope.len() + id.len() + 1);
    key.extend_from_slice(scope.as_bytes());
    key.push(0);
    key.extend_from_slice(id.as_bytes());
    records_dir(claims_dir).join(format!(
        ".hostplan.{:016x}",
        cpuplan::inventory::stamp::fnv1a64(&key)
    ))
}

/// A plan directory's identity from its device and inode.
pub fn dir_id((dev, ino): (u64, u64)) -> String {
    format!("{dev:x}-{ino:x}")
}

/// The directory record's path for the plan directory `dir` (its [`dir_id`]).
fn dir_record(claims_dir: &Path, dir: &str) -> PathBuf {
    records_dir(claims_dir).join(format!(".plandir.{dir}"))
}

/// Whether `name` is one of this module's records.
fn is_record(name: &str) -> bool {
    name.strip_prefix(".hostplan.")
        .or_else(|| name.strip_prefix(".plandir."))
        .is_some_and(|rest| !rest.is_empty())
}

/// At createRuntime, where the plan files of `holder`'s container go to the plan directory
/// `dir` ([`dir_id`]) on its rootfs's own filesystem: under the records' lock (waited on at
/// most `wait`), first removes up to [`COLLECT`] stale records, then takes the directory for
/// the container unless another live container holds it, and records the container for its
/// poststop. Pids are judged under `root`.
pub fn hold(
    claims_dir: &Path,
    root: &Path,
    dir: &str,
    holder: &Holder,
    wait: Duration,
) -> Result<Hold, HostPlanError> {
    let records = records_dir(claims_dir);
    let _lock = match cpuplan::lock_exclusive(&records, wait) {
        Err(ClaimError::Host(cpuplan::Error::Io { source, .. }))
            if source.kind() == ErrorKind::NotFound =>
        {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&records)
                .map_err(|source| HostPlanError::Io {
                    path: records.clone(),
                    source,
                })?;
            cpuplan::lock_exclusive(&records, wait)?
        }
        locked => locked?,
    };
    let collected = collect(&records, root);
    let path = dir_record(claims_dir, dir);
    if let Some(h) = read_record(&path).map(|r| r.holder) {
        if !h.is(&holder.container, &holder.scope) && live(&h, root) {
            return Ok(Hold::Held { by: h, collected });
        }
    }
    let rec = Record {
        holder: holder.clone(),
        dir: dir.to_string(),
    };
    write_record(&path, &rec)?;
    write_record(&record(claims_dir, &holder.scope, &holder.container), &rec)?;
    Ok(Hold::Taken { collected })
}

/// Whether `h` still runs; one whose liveness cannot be read holds (a directory is never
/// taken from a container on a guess).
fn live(h: &Holder, root: &Path) -> bool {
    h.is_live(root).unwrap_or(true)
}

/// Removes up to [`COLLECT`] of the records in `records` whose holder is gone, starting at a
/// place in the listing that differs from run to run (the hook's pid), so that every record is
/// looked at in time; the container records' holders, for their plan files to be removed.
/// A record that does not parse (one written before records held their holder) is left to its
/// poststop.
fn collect(records: &Path, root: &Path) -> Vec<Holder> {
    let mut names: Vec<String> = Vec::new();
    if let Ok(listed) = cpuplan::open(records, nix::libc::O_RDONLY | nix::libc::O_DIRECTORY, 0) {
        let _ = cpuplan::dirents::each(&listed, |name, _| {
            if names.len() >= MAX_LIST {
                return ControlFlow::Break(());
            }
            if let Some(n) = std::str::from_utf8(name).ok().filter(|n| is_record(n)) {
                names.push(n.to_string());
            }
            ControlFlow::Continue(())
        });
    }
    let mut collected = Vec::new();
    if names.is_empty() {
        return collected;
    }
    let start = crate::logging::pid() as usize % names.len();
    let mut removed = 0;
    for name in names
        .iter()
        .cycle()
        .skip(start)
        .take(names.len().min(COLLECT))
    {
        let path = records.join(name);
        let Some(rec) = read_record(&path) else {
            continue;
        };
        if !matches!(rec.holder.is_live(root), Ok(false)) {
            continue;
        }
        if std::fs::remove_file(&path).is_ok() {
            removed += 1;
            if name.starts_with(".hostplan.") {
                collected.push(rec.holder);
            }
        }
    }
    if removed > 0 {
        log::info!(
            "removed {removed} record(s) of gone containers from {} (their poststop never ran)",
            records.display()
        );
    }
    collected
}

/// The holders of the container records in the records' directory beside `claims_dir` (at
/// most [`MAX_LIST`] entries looked at), each with whether it still runs (judged under
/// `root`), for `cpuplan status`. A record that does not parse is left out.
pub fn holders(claims_dir: &Path, root: &Path) -> Vec<(Holder, bool)> {
    let records = records_dir(claims_dir);
    let mut names: Vec<String> = Vec::new();
    if let Ok(listed) = cpuplan::open(&records, nix::libc::O_RDONLY | nix::libc::O_DIRECTORY, 0) {
        let _ = cpuplan::dirents::each(&listed, |name, _| {
            if names.len() >= MAX_LIST {
                return ControlFlow::Break(());
            }
            if let Some(n) = std::str::from_utf8(name)
                .ok()
                .filter(|n| n.starts_with(".hostplan.") && is_record(n))
            {
                names.push(n.to_string());
            }
            ControlFlow::Continue(())
        });
    }
    names.sort();
    names
        .iter()
        .filter_map(|n| read_record(&records.join(n)))
        .map(|r| {
            let live = matches!(r.holder.is_live(root), Ok(true));
            (r.holder, live)
        })
        .collect()
}

/// The record at `path`, read without following a link or blocking, at most [`MAX_RECORD`]
/// bytes, only as a regular file; `None` where there is none or it does not parse.
fn read_record(path: &Path) -> Option<Record> {
    use nix::libc::{O_NOFOLLOW, O_NONBLOCK, O_RDONLY};
    let mut f = cpuplan::open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, 0).ok()?;
    let bytes = cpuplan::read_opened(&mut f, MAX_RECORD).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Writes `rec` at `path` (made 0600; never through a link, only over a regular file).
fn write_record(path: &Path, rec: &Record) -> Result<(), HostPlanError> {
    use nix::libc::{O_CREAT, O_NOFOLLOW, O_NONBLOCK, O_WRONLY};
    let io = |source| HostPlanError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut f =
        cpuplan::open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK, 0o600).map_err(io)?;
    cpuplan::require_own_file(&f).map_err(io)?;
    f.set_len(0).map_err(io)?;
    let bytes = serde_json::to_vec(rec).map_err(|e| io(std::io::Error::other(e)))?;
    f.write_all(&bytes).map_err(io)
}

/// At poststop, takes container `id`'s records away: its container record, and the record of
/// the directory it planned for where that is still its own, unless the record's pid still runs
/// (the container started again: the records are that run's). Whether it had a container record (an error other
/// than its absence counts as having one, so the files are looked for). Pids are judged under
/// `root`; the lock is waited on at most `wait`, and without it the records are left to be
/// collected.
pub fn take(claims_dir: &Path, root: &Path, scope: &str, id: &str, wait: Duration) -> bool {
    let path = record(claims_dir, scope, id);
    // The common case, no record: one failed open.
    match cpuplan::open(
        &path,
        nix::libc::O_RDONLY | nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK,
        0,
    ) {
        Err(e) if e.kind() == ErrorKind::NotFound => return false,
        Err(_) => {}
        Ok(f) => drop(f),
    }
    let Ok(_lock) = cpuplan::lock_exclusive(&records_dir(claims_dir), wait) else {
        return true;
    };
    if let Some(rec) = read_record(&path) {
        if matches!(rec.holder.is_live(root), Ok(true)) {
            // The container started again under this id and bundle: the record is that run's.
            return false;
        }
        let dir = dir_record(claims_dir, &rec.dir);
        if let Some(h) = read_record(&dir).map(|r| r.holder) {
            if h.is(id, scope) && !matches!(h.is_live(root), Ok(true)) {
                let _ = std::fs::remove_file(&dir);
            }
        }
    }
    match std::fs::remove_file(&path) {
        Ok(()) => true,
        Err(e) => e.kind() != ErrorKind::NotFound,
    }
}

#[cfg(test)]
mod tests;
