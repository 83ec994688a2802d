//! Rank placement: each GPU worker process of a planned container on its GPU's CPUs, from
//! outside, at start. The planner registers a container it planned with two GPUs or more
//! ([`Ranks::add`]); a thread of its own ([`spawn`]) watches the kernel's process events
//! ([`cnproc`]) and, at each exec in a registered container, reads the process's environment
//! (bounded), asks [`crate::decide::rank::who`] which worker it is, and sets the affinity of
//! every thread of it to that worker's CPUs. A child a placed process forks is placed with it
//! (it may have been forked before its parent was placed). Never fought: a process is looked at
//! at its exec (and a child at its fork) only; one whose CPUs are already within its worker's is
//! left alone, one that something else moved elsewhere is left alone and logged once per
//! container and worker.
//!
//! Bounded: one thread, one receive buffer, one environment buffer ([`MAX_ENVIRON`]), at most
//! [`MAX_PLACED`] placed processes remembered (for their forks; forgotten at exit); the
//! kernel's socket buffer is the only queue, and what overruns it is counted, not fatal.

pub mod cnproc;

use std::collections::HashMap;
use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use cpuplan::CpuSet;
use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet as NixSet};
use nix::unistd::Pid;

use crate::decide::rank::{who, GpuId};
use cnproc::{ProcConnector, ProcEvent, Received};

/// The most bytes of a process's environment read (a variable past them is not seen).
pub const MAX_ENVIRON: usize = 256 << 10;
/// The most bytes of a process's `/proc/<pid>/cgroup` read.
const MAX_CGROUP: usize = 16 << 10;
/// The most placed processes remembered for their forks.
pub const MAX_PLACED: usize = 65_536;
/// The most threads of one process placed.
const MAX_THREADS: usize = 16_384;
/// The most notes logged per container (the rest are counted).
const MAX_NOTES: usize = 4;

/// A container whose processes are placed.
#[derive(Debug)]
pub struct Entry {
    /// The container id (for the log).
    pub id: String,
    /// Its GPUs in plan order.
    pub gpus: Vec<GpuId>,
    /// Each worker's CPUs (`None`: the worker is not narrowed).
    pub workers: Vec<Option<CpuSet>>,
    /// The cgroup leaves that are the container's (`<id>`, `cri-containerd-<id>.scope`...).
    pub leaves: Vec<String>,
    /// The notes logged so far.
    notes: Mutex<Vec<String>>,
}

impl Entry {
    /// Container `id` with its `gpus`, its `workers`' CPUs and the cgroup `leaves` that are its.
    pub fn new(
        id: &str,
        gpus: Vec<GpuId>,
        workers: Vec<Option<CpuSet>>,
        leaves: Vec<String>,
    ) -> Entry {
        Entry {
            id: id.to_string(),
            gpus,
            workers,
            leaves,
            notes: Mutex::new(Vec::new()),
        }
    }

    /// Logs `note` about this container unless it was said already: one per worker for what
    /// befell a worker (`per_worker`), else (a tenant's bad value) at most [`MAX_NOTES`].
    fn note_once(&self, key: &str, per_worker: bool, note: impl FnOnce() -> String) {
        let mut notes = self.notes.lock().unwrap_or_else(|e| e.into_inner());
        let room = notes.len() < MAX_NOTES + 3 * self.workers.len();
        let bad = notes.iter().filter(|k| k.starts_with("bad ")).count();
        let key = if per_worker {
            key.to_string()
        } else {
            format!("bad {key}")
        };
        if room && (per_worker || bad < MAX_NOTES) && !notes.contains(&key) {
            notes.push(key);
            log::info!("container {}: rank placement: {}", self.id, note());
        }
    }
}

/// What became of the processes looked at, counted.
#[derive(Debug, Default)]
pub struct Counts {
    /// Processes placed on their worker's CPUs.
    pub placed: AtomicU64,
    /// Processes already within their worker's CPUs (left alone).
    pub already: AtomicU64,
    /// Processes something else moved elsewhere (left alone).
    pub elsewhere: AtomicU64,
    /// Processes with a signal that names no worker (a bad value, a rank past the GPUs).
    pub bad_signal: AtomicU64,
    /// Processes gone before they could be placed.
    pub gone: AtomicU64,
    /// Datagrams of events lost to the socket's overrun.
    pub overruns: AtomicU64,
    /// Placed processes not remembered for their forks ([`MAX_PLACED`] reached).
    pub dropped: AtomicU64,
}

/// The containers whose processes are placed, shared by the planner and the watcher.
#[derive(Debug, Default)]
pub struct Ranks {
    by_leaf: RwLock<HashMap<String, Arc<Entry>>>,
    /// What became of the processes looked at.
    pub counts: Counts,
}

impl Ranks {
    /// Places the processes of `entry` from now on.
    pub fn add(&self, entry: Entry) {
        let entry = Arc::new(entry);
        let mut map = self.by_leaf.write().unwrap_or_else(|e| e.into_inner());
        for leaf in &entry.leaves {
            map.insert(leaf.clone(), Arc::clone(&entry));
        }
    }

    /// Stops placing container `id`'s processes.
    pub fn remove(&self, id: &str) {
        let mut map = self.by_leaf.write().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, e| e.id != id);
    }

    fn is_empty(&self) -> bool {
        self.by_leaf
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// The container whose cgroup `text` (a `/proc/<pid>/cgroup`) is in: the deepest component
    /// of a line's path that is a registered leaf (crun's `container` child and systemd's
    /// sub-cgroups lie below the leaf).
    fn of_cgroup(&self, text: &str) -> Option<Arc<Entry>> {
        let map = self.by_leaf.read().unwrap_or_else(|e| e.into_inner());
        text.lines()
            .filter_map(|l| l.splitn(3, ':').nth(2))
            .find_map(|path| path.rsplit('/').find_map(|c| map.get(c).cloned()))
    }
}

/// The cgroup leaves a container whose spec names `cgroups_path` lies in: the last component of
/// every cgroup path that value may name (`<id>` under cgroupfs, `<prefix>-<id>.scope` under
/// systemd).
pub fn leaves_of(cgroups_path: &str) -> Vec<String> {
    let mut leaves: Vec<String> = cpuplan::cgroups_path_names(cgroups_path)
        .iter()
        .filter_map(|n| n.rsplit('/').next().map(str::to_string))
        .filter(|l| !l.is_empty())
        .collect();
    leaves.sort();
    leaves.dedup();
    leaves
}

/// Starts the watcher thread over `ranks`. Without the privileges (or on a kernel without the
/// proc connector) it logs one line and places nothing; it never stops the daemon.
pub fn spawn(ranks: Arc<Ranks>) {
    let started = std::thread::Builder::new()
        .name("cpuplan-ranks".into())
        .spawn(move || watch(&ranks));
    if let Err(e) = started {
        log::warn!("rank placement: cannot start its thread: {e}: no process is placed");
    }
}

fn watch(ranks: &Ranks) {
    let mut failures = 0u32;
    let mut env = Vec::with_capacity(MAX_ENVIRON);
    let mut placed: HashMap<i32, (Arc<Entry>, usize)> = HashMap::new();
    loop {
        let mut socket = match ProcConnector::open() {
            Ok(s) => s,
            Err(e) => {
                log::warn!(
                    "rank placement: cannot watch the kernel's process events ({e}; it needs CAP_NET_ADMIN in the host's network namespace): no process is placed"
                );
                return;
            }
        };
        log::info!("rank placement: watching the kernel's process events");
        loop {
            match socket.receive() {
                Ok(Received::Events(events)) => {
                    failures = 0;
                    for e in events {
                        handle(ranks, e, &mut env, &mut placed);
                    }
                }
                Ok(Received::Overrun) => {
                    let n = ranks.counts.overruns.fetch_add(1, Ordering::Relaxed) + 1;
                    if n.is_power_of_two() {
                        log::warn!(
                            "rank placement: the kernel's process events overran the socket ({n} times so far): the processes whose events were lost keep their container's CPUs"
                        );
                    }
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    log::warn!("rank placement: the process events socket failed: {e}");
                    break;
                }
            }
        }
        // Opened again after a pause that grows with the failures in a row.
        std::thread::sleep(Duration::from_secs(u64::from(failures.min(30))));
    }
}

/// One event: an exec in a registered container is placed by its environment; the fork of a
/// placed process places the child with it; an exit forgets the process.
fn handle(
    ranks: &Ranks,
    event: ProcEvent,
    env: &mut Vec<u8>,
    placed: &mut HashMap<i32, (Arc<Entry>, usize)>,
) {
    match event {
        ProcEvent::Exit { pid, tgid } if pid == tgid => {
            placed.remove(&tgid);
        }
        ProcEvent::Fork {
            parent_tgid,
            child_pid,
            child_tgid,
        } if child_pid == child_tgid => {
            if let Some((entry, w)) = placed.get(&parent_tgid).cloned() {
                if let Some(cpus) = entry.workers.get(w).cloned().flatten() {
                    place(ranks, &entry, w, child_tgid, &cpus, placed);
                }
            }
        }
        ProcEvent::Exec { tgid } => {
            if ranks.is_empty() {
                return;
            }
            exec(ranks, tgid, env, placed);
        }
        _ => {}
    }
}

/// Reads at most `max` bytes of `/proc/<pid>/<name>` into `buf`.
fn read_proc(pid: i32, name: &str, max: usize, buf: &mut Vec<u8>) -> std::io::Result<()> {
    buf.clear();
    let f = std::fs::File::open(format!("/proc/{pid}/{name}"))?;
    f.take(max as u64).read_to_end(buf)?;
    Ok(())
}

fn exec(
    ranks: &Ranks,
    tgid: i32,
    env: &mut Vec<u8>,
    placed: &mut HashMap<i32, (Arc<Entry>, usize)>,
) {
    if read_proc(tgid, "cgroup", MAX_CGROUP, env).is_err() {
        return;
    }
    let Some(entry) = ranks.of_cgroup(&String::from_utf8_lossy(env)) else {
        return;
    };
    if read_proc(tgid, "environ", MAX_ENVIRON, env).is_err() {
        ranks.counts.gone.fetch_add(1, Ordering::Relaxed);
        return;
    }
    match who(env, &entry.gpus) {
        Ok(None) => {}
        Err(note) => {
            ranks.counts.bad_signal.fetch_add(1, Ordering::Relaxed);
            entry.note_once(&note, false, || format!("pid {tgid}: {note}"));
        }
        Ok(Some(w)) => match entry.workers.get(w.index).cloned().flatten() {
            Some(cpus) => {
                log::debug!(
                    "container {}: pid {tgid} is worker {} ({})",
                    entry.id,
                    w.index,
                    w.signal
                );
                place(ranks, &entry, w.index, tgid, &cpus, placed)
            }
            None => entry.note_once(&format!("unnarrowed {}", w.index), true, || {
                format!(
                    "worker {} (pid {tgid}, by {}) has no CPUs of its own GPU in the container's: it keeps the container's",
                    w.index, w.signal
                )
            }),
        },
    }
}

fn to_nix(cpus: &CpuSet) -> NixSet {
    let mut set = NixSet::new();
    for c in cpus.iter() {
        let _ = set.set(c);
    }
    set
}

/// The CPUs of an affinity set as `sched_getaffinity` gives it.
pub fn from_nix(set: &NixSet) -> CpuSet {
    let mut cpus = CpuSet::new();
    for c in 0..NixSet::count() {
        if set.is_set(c).unwrap_or(false) {
            cpus.insert(c);
        }
    }
    cpus
}

/// Places process `tgid` (worker `w` of `entry`) on `cpus`: every thread whose CPUs hold all of
/// `cpus` and more; nothing where its CPUs are already within `cpus`, or elsewhere.
fn place(
    ranks: &Ranks,
    entry: &Arc<Entry>,
    w: usize,
    tgid: i32,
    cpus: &CpuSet,
    placed: &mut HashMap<i32, (Arc<Entry>, usize)>,
) {
    let counts = &ranks.counts;
    if cpus.last().is_some_and(|c| c >= NixSet::count()) {
        entry.note_once(&format!("wide {w}"), true, || {
            format!(
                "worker {w}'s CPUs {cpus} go past CPU {}: not placed",
                NixSet::count() - 1
            )
        });
        return;
    }
    let Ok(now) = sched_getaffinity(Pid::from_raw(tgid)).map(|s| from_nix(&s)) else {
        counts.gone.fetch_add(1, Ordering::Relaxed);
        return;
    };
    if now.is_subset(cpus) {
        counts.already.fetch_add(1, Ordering::Relaxed);
    } else if !cpus.is_subset(&now) {
        counts.elsewhere.fetch_add(1, Ordering::Relaxed);
        entry.note_once(&format!("elsewhere {w}"), true, || {
            format!(
                "worker {w} (pid {tgid}) runs on CPUs {now}, not within its GPU's {cpus}: something else placed it, left alone"
            )
        });
        return;
    } else {
        let target = to_nix(cpus);
        // Twice: a thread started while the first pass ran started on the old CPUs.
        let mut moved = false;
        for _ in 0..2 {
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{tgid}/task")) else {
                break;
            };
            for tid in tasks
                .flatten()
                .take(MAX_THREADS)
                .filter_map(|t| t.file_name().to_str()?.parse::<i32>().ok())
            {
                let pid = Pid::from_raw(tid);
                let wider = sched_getaffinity(pid)
                    .map(|s| from_nix(&s))
                    .is_ok_and(|m| cpus.is_subset(&m) && &m != cpus);
                if wider && sched_setaffinity(pid, &target).is_ok() {
                    moved = true;
                }
            }
        }
        if !moved {
            counts.gone.fetch_add(1, Ordering::Relaxed);
            return;
        }
        counts.placed.fetch_add(1, Ordering::Relaxed);
        entry.note_once(&format!("placed {w}"), true, || {
            format!("worker {w}'s processes are placed on CPUs {cpus} (first: pid {tgid})")
        });
    }
    if placed.len() < MAX_PLACED || placed.contains_key(&tgid) {
        placed.insert(tgid, (Arc::clone(entry), w));
    } else {
        counts.dropped.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests;
