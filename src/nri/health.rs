//! Whether the plugin is ready (registered with the runtime) and live (not wedged), told three
//! ways from one rule ([`Health::verdict`]): `/readyz` and `/healthz` on the metrics listener,
//! and a state file the plugin rewrites every second and at each change of phase, which
//! `--probe ready|live` reads (the exec probes of the DaemonSet, which need no listener: metrics
//! are off by default).
//!
//! Ready: registered with the runtime, or standing by while an earlier instance of the plugin
//! serves the plan directory (a DaemonSet's surge rollout deletes the old pod only once the new
//! one is ready; the new one connects as soon as the old one exits). Not ready while it tries a
//! runtime that is not there. Live: the stub's main loop has run within [`WEDGED`] and no NRI
//! request has been in its handler longer than that.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::apply::below::{open_dir_in, open_rootfs, write_files_at};

/// A stub loop silent this long, or a request handled this long, is wedged.
pub const WEDGED: Duration = Duration::from_secs(30);
/// How often the state file is rewritten.
pub const STATE_EVERY: Duration = Duration::from_secs(1);
/// A state file older than this is a plugin that stopped writing it (wedged or gone).
pub const STATE_STALE: Duration = Duration::from_secs(10);
/// The state file unless `--state` says otherwise: in the container's own `/run` under a
/// DaemonSet (each pod its own, so a rollout's two pods never read each other's).
pub const DEFAULT_STATE: &str = "/run/cpuplan-nri/state";

/// Where the plugin is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Not connecting yet.
    Starting,
    /// Waiting for the plan directory that an earlier instance serves.
    Standby,
    /// Connecting to the runtime (or waiting to try again).
    Connecting,
    /// Registered with the runtime.
    Registered,
}

/// The plugin's health, as its parts report it.
#[derive(Debug)]
pub struct Health {
    phase: Mutex<Phase>,
    started: Instant,
    /// Milliseconds after `started` of the stub loop's last heartbeat (0: none yet).
    tick: AtomicU64,
    /// The requests in their handlers: a ticket, the request's name, since when.
    busy: Mutex<Vec<(u64, &'static str, Instant)>>,
    tickets: AtomicU64,
    /// Set with the phase, so that the state file is rewritten at once ([`keep_state`]).
    changed: (Mutex<bool>, Condvar),
}

impl Default for Health {
    fn default() -> Self {
        Health {
            phase: Mutex::new(Phase::Starting),
            started: Instant::now(),
            tick: AtomicU64::new(0),
            busy: Mutex::default(),
            tickets: AtomicU64::new(0),
            changed: (Mutex::new(false), Condvar::new()),
        }
    }
}

/// The answer of both probes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// The phase it was judged in.
    pub phase: Phase,
    /// Whether the readiness probe passes.
    pub ready: bool,
    /// Whether the liveness probe passes.
    pub live: bool,
    /// Why, in a line.
    pub why: String,
}

/// A request in its handler, until dropped.
pub struct Busy<'a> {
    health: &'a Health,
    ticket: u64,
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        let mut busy = self.health.busy.lock().unwrap_or_else(|e| e.into_inner());
        busy.retain(|(t, _, _)| *t != self.ticket);
    }
}

impl Health {
    /// The plugin is now in `phase`.
    pub fn set(&self, phase: Phase) {
        *self.phase.lock().unwrap_or_else(|e| e.into_inner()) = phase;
        let (flag, cv) = &self.changed;
        *flag.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
    }

    /// Waits until the phase is set, or `at_most`.
    fn wait_change(&self, at_most: Duration) {
        let (flag, cv) = &self.changed;
        let guard = flag.lock().unwrap_or_else(|e| e.into_inner());
        let (mut guard, _) = cv
            .wait_timeout_while(guard, at_most, |changed| !*changed)
            .unwrap_or_else(|e| e.into_inner());
        *guard = false;
    }

    /// The phase now.
    pub fn phase(&self) -> Phase {
        *self.phase.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The stub's main loop ran.
    pub fn heartbeat(&self) {
        let ms = self.started.elapsed().as_millis() as u64;
        self.tick.store(ms.max(1), Ordering::Relaxed);
    }

    /// Request `what` is in its handler until the guard is dropped.
    pub fn busy(&self, what: &'static str) -> Busy<'_> {
        let ticket = self.tickets.fetch_add(1, Ordering::Relaxed);
        let mut busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        busy.push((ticket, what, Instant::now()));
        Busy {
            health: self,
            ticket,
        }
    }

    /// The verdict now.
    pub fn verdict(&self) -> Verdict {
        self.verdict_at(Instant::now())
    }

    /// The verdict at `now`.
    pub fn verdict_at(&self, now: Instant) -> Verdict {
        let phase = self.phase();
        let tick = self.tick.load(Ordering::Relaxed);
        let stub_silent = match phase {
            Phase::Starting | Phase::Standby => None,
            Phase::Connecting | Phase::Registered if tick == 0 => None,
            Phase::Connecting | Phase::Registered => {
                let last = self.started + Duration::from_millis(tick);
                Some(now.saturating_duration_since(last)).filter(|d| *d > WEDGED)
            }
        };
        let stuck = {
            let busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
            busy.iter()
                .map(|(_, what, since)| (*what, now.saturating_duration_since(*since)))
                .filter(|(_, d)| *d > WEDGED)
                .max_by_key(|(_, d)| *d)
        };
        let wedged = match (stub_silent, stuck) {
            (_, Some((what, d))) => Some(format!(
                "wedged: a {what} has been in its handler for {} s",
                d.as_secs()
            )),
            (Some(d), None) => Some(format!(
                "wedged: the NRI stub's main loop last ran {} s ago",
                d.as_secs()
            )),
            (None, None) => None,
        };
        let (ready, why) = match (&wedged, phase) {
            (Some(w), _) => (false, w.clone()),
            (None, Phase::Registered) => (true, "registered with the runtime".into()),
            (None, Phase::Standby) => (
                true,
                "standing by: an earlier instance serves the plan directory".into(),
            ),
            (None, Phase::Connecting) => (false, "not registered with the runtime".into()),
            (None, Phase::Starting) => (false, "starting".into()),
        };
        Verdict {
            phase,
            ready,
            live: wedged.is_none(),
            why,
        }
    }
}

/// What the state file holds: the verdict, whose it is and when it was written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// The plugin's pid.
    pub pid: u32,
    /// Milliseconds since the Unix epoch when it was written.
    pub at_ms: u64,
    /// The verdict then.
    #[serde(flatten)]
    pub verdict: Verdict,
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The probes' state file could not be written.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The path names no file.
    #[error("{}: not a file path", .0.display())]
    NotAFile(PathBuf),
    /// Its directory could not be opened, or the file written.
    #[error(transparent)]
    Write(Box<dyn std::error::Error + Send + Sync>),
}

/// Writes `health`'s verdict to `path` whole (a temporary name, then a rename; no component of
/// the directory a link), now.
pub fn write_state(path: &Path, health: &Health) -> Result<(), StateError> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Err(StateError::NotAFile(path.to_path_buf()));
    };
    let state = State {
        pid: std::process::id(),
        at_ms: unix_ms(SystemTime::now()),
        verdict: health.verdict(),
    };
    let bytes = serde_json::to_vec(&state).unwrap_or_default();
    let write = |e| StateError::Write(Box::new(e));
    let root = open_rootfs(Path::new("/"), None, Path::new("/")).map_err(write)?;
    let fd = open_dir_in(&root, dir).map_err(write)?;
    write_files_at(&fd, dir, &[(name, &bytes)]).map_err(write)
}

/// Rewrites the state file at `path` every [`STATE_EVERY`], and at once when the phase changes,
/// on a thread of its own, for the process's life; a failure is logged once, and again after a
/// success.
pub fn keep_state(path: PathBuf, health: std::sync::Arc<Health>) {
    let spawned = std::thread::Builder::new()
        .name("cpuplan-state".into())
        .spawn(move || {
            let mut failing = false;
            loop {
                match write_state(&path, &health) {
                    Ok(()) => failing = false,
                    Err(e) if !failing => {
                        log::warn!("nri: cannot write the probes' state file: {e}");
                        failing = true;
                    }
                    Err(_) => {}
                }
                health.wait_change(STATE_EVERY);
            }
        });
    if let Err(e) = spawned {
        log::warn!("nri: cannot start the probes' state thread: {e}");
    }
}

/// Which probe `--probe` asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// Readiness.
    Ready,
    /// Liveness.
    Live,
}

/// A `--probe` that names neither probe.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("--probe {}: not ready or live", cpuplan::quoted(.0))]
pub struct ProbeNameError(String);

impl std::str::FromStr for Probe {
    type Err = ProbeNameError;
    fn from_str(s: &str) -> Result<Probe, ProbeNameError> {
        match s {
            "ready" => Ok(Probe::Ready),
            "live" => Ok(Probe::Live),
            other => Err(ProbeNameError(other.to_string())),
        }
    }
}

/// A probe's answer: whether it passes, and its one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The probe passes.
    pub pass: bool,
    /// `ready: …`, `not ready: …`, `live: …` or `not live: …`.
    pub line: String,
}

/// The most bytes of a state file read.
const MAX_STATE: usize = 4096;

/// The answer of `probe` from the state file at `path` at `now`: it fails where there is no
/// file, a file that does not parse, one written more than [`STATE_STALE`] ago, or a verdict
/// that fails it.
pub fn probe(path: &Path, which: Probe, now: SystemTime) -> Answer {
    let (yes, no) = match which {
        Probe::Ready => ("ready", "not ready"),
        Probe::Live => ("live", "not live"),
    };
    // Either way a line for the operator: the error side is the probe's failing line.
    let read = || -> Result<(bool, String), String> {
        let bytes = cpuplan::read_file(path, MAX_STATE)
            .map_err(|e| format!("{}: {e}: the plugin has not started", path.display()))?;
        let state: State = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{}: not a state file: {e}", path.display()))?;
        let age = unix_ms(now).saturating_sub(state.at_ms);
        if age > STATE_STALE.as_millis() as u64 {
            return Err(format!(
                "pid {}: its state was last written {} s ago: wedged or gone",
                state.pid,
                age / 1000
            ));
        }
        let v = &state.verdict;
        let pass = match which {
            Probe::Ready => v.ready,
            Probe::Live => v.live,
        };
        Ok((pass, format!("pid {}: {}", state.pid, v.why)))
    };
    match read() {
        Ok((true, line)) => Answer {
            pass: true,
            line: format!("{yes}: {line}"),
        },
        Ok((false, line)) | Err(line) => Answer {
            pass: false,
            line: format!("{no}: {line}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passes(a: Answer) -> String {
        assert!(a.pass, "{}", a.line);
        a.line
    }

    fn fails(a: Answer) -> String {
        assert!(!a.pass, "{}", a.line);
        a.line
    }

    #[test]
    fn ready_only_registered_or_standing_by_and_live_until_wedged() {
        let h = Health::default();
        let v = h.verdict();
        assert!(!v.ready && v.live, "{v:?}");
        h.set(Phase::Standby);
        assert!(h.verdict().ready);
        h.set(Phase::Connecting);
        h.heartbeat();
        let v = h.verdict();
        assert!(!v.ready && v.live && v.why == "not registered with the runtime");
        h.set(Phase::Registered);
        assert!(h.verdict().ready);
        let later = Instant::now() + WEDGED + Duration::from_secs(2);
        let v = h.verdict_at(later);
        assert!(!v.ready && !v.live, "{v:?}");
        assert!(v.why.contains("main loop last ran"), "{}", v.why);
        h.heartbeat();
        let busy = h.busy("CreateContainer");
        let v = h.verdict_at(Instant::now() + WEDGED + Duration::from_secs(2));
        assert!(
            !v.live && v.why.contains("a CreateContainer has been in its handler"),
            "{v:?}"
        );
        drop(busy);
        assert!(h.verdict().live && h.verdict().ready);
    }

    #[test]
    fn the_probe_reads_the_state_file_and_fails_on_none_stale_or_not_ready() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("run/state");
        let now = SystemTime::now();
        let e = fails(probe(&path, Probe::Ready, now));
        assert!(
            e.starts_with("not ready: ") && e.ends_with("has not started"),
            "{e}"
        );
        let h = Health::default();
        h.set(Phase::Connecting);
        write_state(&path, &h).unwrap();
        let e = fails(probe(&path, Probe::Ready, now));
        assert!(e.starts_with("not ready: pid "), "{e}");
        assert!(passes(probe(&path, Probe::Live, now)).starts_with("live: "));
        h.set(Phase::Registered);
        write_state(&path, &h).unwrap();
        let ok = passes(probe(&path, Probe::Ready, SystemTime::now()));
        assert!(ok.ends_with("registered with the runtime"), "{ok}");
        let later = SystemTime::now() + STATE_STALE + Duration::from_secs(1);
        let e = fails(probe(&path, Probe::Live, later));
        assert!(
            e.starts_with("not live: pid ") && e.ends_with("wedged or gone"),
            "{e}"
        );
        std::fs::write(&path, "junk").unwrap();
        assert!(fails(probe(&path, Probe::Live, now)).contains("not a state file"));
        assert_eq!("live".parse::<Probe>(), Ok(Probe::Live));
        assert!("alive"
            .parse::<Probe>()
            .unwrap_err()
            .to_string()
            .contains("\"alive\""));
    }
}
