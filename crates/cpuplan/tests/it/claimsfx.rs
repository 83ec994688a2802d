//! The claims tests' fixtures: a fake `/proc` of pids with start times, holders, addresses.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use cpuplan::Holder;

/// How long the tests wait for the claims lock.
pub const WAIT: Duration = Duration::from_secs(5);

/// A fixture root whose `proc/<pid>/stat` gives each pid its start time.
pub fn proc_root(pids: &[(u32, u64)]) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    for &(pid, start) in pids {
        set_start(root.path(), pid, start);
    }
    root
}

/// Write `<root>/proc/<pid>/stat` with a comm holding spaces and parentheses.
pub fn set_start(root: &Path, pid: u32, start: u64) {
    let dir = root.join(format!("proc/{pid}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("stat"),
        format!("{pid} (runc:[2:INIT]) (x) S 1 {pid} {pid} 0 -1 4194560 10 0 0 0 3 1 0 0 20 0 1 0 {start} 1000 20 18446744073709551615\n"),
    )
    .unwrap();
}

/// Pid `pid` of the fixture root exits.
pub fn exits(root: &Path, pid: u32) {
    std::fs::remove_dir_all(root.join(format!("proc/{pid}"))).unwrap();
}

/// The bundle scope the tests' holders are in.
pub const SCOPE: &str = "/run/bundles/one";

/// A holder of `container` in [`SCOPE`].
pub fn holder(container: &str, pid: u32, start_time: u64) -> Holder {
    scoped(container, SCOPE, pid, start_time)
}

/// A holder of `container` in `scope`, numbered in the test's pid namespace.
pub fn scoped(container: &str, scope: &str, pid: u32, start_time: u64) -> Holder {
    Holder {
        container: container.into(),
        scope: scope.into(),
        pid,
        start_time,
        pid_ns: cpuplan::own_pid_ns(),
    }
}

/// The addresses as owned strings.
pub fn addrs(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// `claim_gpus` in `dir` for `container` (`pid`, `start_time`, in [`SCOPE`]) over `gpus`,
/// waiting at most [`WAIT`] for the lock.
pub fn claim_as(
    dir: &Path,
    root: &Path,
    (container, pid, start_time): (&str, u32, u64),
    gpus: &[&str],
) -> Result<cpuplan::ClaimOutcome, cpuplan::ClaimError> {
    cpuplan::claim_gpus(
        dir,
        root,
        &holder(container, pid, start_time),
        &addrs(gpus),
        WAIT,
    )
}

/// The names in the claims dir, sorted.
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// The claims directory under a test's temporary directory.
pub fn claims_dir(tmp: &tempfile::TempDir) -> PathBuf {
    tmp.path().join("run/cpuplan/claims")
}
