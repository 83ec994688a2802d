//! Processes a test started or looks for: stopping a daemon gently, finding a binary's processes;
//! and the mounts a daemon left under a test's directory.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Waits at most `limit` for `child` to exit: its status, or `None` when it was still running
/// (then it is killed and reaped).
pub fn wait_at_most(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Stops `child` with SIGTERM, then SIGKILL if it has not exited within `grace`, and reaps it.
pub fn stop_gently(mut child: Child, grace: Duration) {
    let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
    wait_at_most(&mut child, grace);
}

/// The pids of the live (not zombie) processes running the binary at `path`.
pub fn processes_running(path: &Path) -> Vec<i32> {
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if std::fs::read_link(e.path().join("exe")).is_ok_and(|exe| exe == path) {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let state = stat.rsplit(") ").next().and_then(|s| s.chars().next());
            if state != Some('Z') {
                pids.push(pid);
            }
        }
    }
    pids
}

/// Unmounts (lazily, deepest first) every mount point under `dir`: what a daemon the test ran
/// (containerd, podman) left there.
pub fn unmount_under(dir: &Path) {
    let t = dir.display().to_string();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut ours: Vec<&str> = mounts
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| m.starts_with(&t))
        .collect();
    ours.sort_unstable_by(|a, b| b.cmp(a));
    for m in ours {
        let _ = std::process::Command::new("umount")
            .args(["-l", m])
            .output();
    }
}
