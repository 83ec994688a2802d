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

/// The live `containerd-shim*` processes whose `-address` (their containerd's socket) passes
/// `keep`: (pid, address).
fn shims_where(keep: impl Fn(&Path) -> bool) -> Vec<(i32, String)> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in entries.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let is_shim = args.first().is_some_and(|a| {
            Path::new(a)
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("containerd-shim"))
        });
        if !is_shim {
            continue;
        }
        let address = args.iter().enumerate().find_map(|(i, a)| {
            match a
                .strip_prefix("-address")
                .or_else(|| a.strip_prefix("--address"))
            {
                Some("") => args.get(i + 1).cloned(),
                Some(v) => v.strip_prefix('=').map(str::to_string),
                None => None,
            }
        });
        if let Some(address) = address {
            if keep(Path::new(address.trim_start_matches("unix://"))) {
                found.push((pid, address));
            }
        }
    }
    found
}

/// SIGKILLs the shims `pids` and the processes they started (a container's init a removal
/// missed would run on, reparented to init), and waits (at most 10 s) until no shim runs (a shim
/// is not our child: its reaper is init or a subreaper, so gone or a zombie is enough). The
/// shims still running.
fn kill_and_wait(pids: &[i32]) -> Vec<i32> {
    for &p in pids {
        let children =
            std::fs::read_to_string(format!("/proc/{p}/task/{p}/children")).unwrap_or_default();
        let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
        for c in children
            .split_whitespace()
            .filter_map(|c| c.parse::<i32>().ok())
        {
            let _ = kill(Pid::from_raw(c), Signal::SIGKILL);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: Vec<i32> = pids
            .iter()
            .copied()
            .filter(|p| {
                let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
                let state = stat.rsplit(") ").next().and_then(|s| s.chars().next());
                !stat.is_empty() && state != Some('Z') && state != Some('X')
            })
            .collect();
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stops every containerd shim whose `-address` lies under `dir` (a test node's root: its
/// containerd's socket is there), whatever containerd did or did not do: a shim outlives its
/// containerd, and one whose task directory is gone is found by nobody else. Run after the
/// node's containers are removed (a killed shim leaves its container running: `runc delete -f`
/// ends those). Returns the shims it stopped, as (pid, address).
pub fn stop_shims_under(dir: &Path) -> Vec<(i32, String)> {
    let shims = shims_where(|a| a.starts_with(dir));
    let pids: Vec<i32> = shims.iter().map(|s| s.0).collect();
    let left = kill_and_wait(&pids);
    if !left.is_empty() {
        // Never a panic: this runs in teardowns, maybe while a failed test unwinds.
        eprintln!(
            "shims {left:?} under {} still run 10 s after SIGKILL",
            dir.display()
        );
    }
    shims
}

/// Stops the shims of test nodes that no longer exist: `-address` under a directory of
/// `tmp` named `PREFIX*` (`cpuplan-cri-`) that is gone. Such a shim's containerd and node root
/// went with a test process that was killed before its teardown ran; a live node's shims (its
/// root still there, in this or another test process) are left alone.
pub fn stop_orphaned_shims(tmp: &Path, prefix: &str) -> Vec<(i32, String)> {
    let shims = shims_where(|a| {
        let Ok(rest) = a.strip_prefix(tmp) else {
            return false;
        };
        let Some(top) = rest.components().next() else {
            return false;
        };
        let top = top.as_os_str().to_string_lossy();
        top.starts_with(prefix) && !tmp.join(&*top).exists()
    });
    let pids: Vec<i32> = shims.iter().map(|s| s.0).collect();
    kill_and_wait(&pids);
    shims
}
