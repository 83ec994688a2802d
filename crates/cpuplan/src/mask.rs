//! The process mask and the usable CPU count.

use std::path::Path;

use crate::cpuset::{parse_cpu_list, CpuSet};
use crate::error::{Error, Result};
use crate::fsutil::{self, Process};

/// The CPUs `proc` may run on: `sched_getaffinity` for the current process, and for another
/// on the real host (`root` is `/`); `Cpus_allowed_list` of `<root>/proc/<pid>/status` under
/// any other root (a fixture tree).
///
/// Where `sched_getaffinity` fails (a host with more CPUs than its fixed-size set holds, a pid
/// gone), the status file is read instead. One syscall against an open, four reads and a
/// parse of `/proc/<pid>/status` at every container start.
pub fn process_mask(root: &Path, proc: Process) -> Result<CpuSet> {
    let pid = match proc {
        Process::Current => Some(0),
        Process::Pid(pid) if root == Path::new("/") => i32::try_from(pid).ok(),
        Process::Pid(_) => None,
    };
    if let Some(pid) = pid {
        match affinity(pid) {
            Ok(set) if !set.is_empty() => return Ok(set),
            Ok(_) => log::debug!("sched_getaffinity({pid}) gave no CPU; reading its status"),
            Err(e) => log::debug!("sched_getaffinity({pid}) failed ({e}); reading its status"),
        }
    }
    let file = proc.proc_dir(root).join("status");
    let text = fsutil::read(&file)?;
    let Some(list) = cpus_allowed_list(&text) else {
        return Err(Error::malformed(&file, "no Cpus_allowed_list line", text));
    };
    let set = parse_cpu_list(list).map_err(|source| Error::CpuList {
        path: file.clone(),
        source,
    })?;
    if set.is_empty() {
        return Err(Error::malformed(&file, "Cpus_allowed_list is empty", list));
    }
    Ok(set)
}

/// The value of the `Cpus_allowed_list:` line of a `/proc/<pid>/status` text.
pub fn cpus_allowed_list(status: &str) -> Option<&str> {
    status.lines().find_map(|l| {
        l.strip_prefix("Cpus_allowed_list:")
            .map(|v| v.trim_matches([' ', '\t']))
    })
}

/// min(|mask|, floor(quota)), at least 1.
pub fn usable_cpus(mask: &CpuSet, quota: Option<f64>) -> usize {
    let mut n = mask.len();
    if let Some(q) = quota {
        // `as` saturates: NaN and negatives give 0, infinity usize::MAX.
        n = n.min(q.floor() as usize);
    }
    n.max(1)
}

/// The affinity of `pid` (0: the calling thread) from `sched_getaffinity`.
fn affinity(pid: i32) -> nix::Result<CpuSet> {
    let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(pid))?;
    Ok((0..nix::sched::CpuSet::count())
        .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str =
        "Name:\tbash\nCpus_allowed:\tff\nCpus_allowed_list:\t0-3,6\nMems_allowed_list:\t0\n";

    fn set(list: &str) -> CpuSet {
        parse_cpu_list(list).unwrap()
    }

    #[test]
    fn usable_is_capped_by_the_quota_rounded_down() {
        let m = set("0-7");
        assert_eq!(usable_cpus(&m, None), 8);
        assert_eq!(usable_cpus(&m, Some(2.5)), 2);
        assert_eq!(usable_cpus(&m, Some(3.0)), 3);
        assert_eq!(usable_cpus(&m, Some(64.0)), 8);
        assert_eq!(usable_cpus(&m, Some(0.5)), 1);
        assert_eq!(usable_cpus(&m, Some(f64::NAN)), 1);
        assert_eq!(usable_cpus(&m, Some(f64::INFINITY)), 8);
        assert_eq!(usable_cpus(&CpuSet::new(), None), 1);
    }

    #[test]
    fn reads_cpus_allowed_list() {
        assert_eq!(cpus_allowed_list(STATUS), Some("0-3,6"));
        assert_eq!(cpus_allowed_list("Name:\tx\n"), None);
    }

    #[test]
    fn mask_of_another_pid() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("proc/42");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("status"), STATUS).unwrap();
        assert_eq!(
            process_mask(t.path(), Process::Pid(42)).unwrap(),
            set("0-3,6")
        );
        // Gone: an I/O error naming the file.
        let e = process_mask(t.path(), Process::Pid(43))
            .unwrap_err()
            .to_string();
        assert!(e.contains("proc/43/status"), "{e}");
        // No line, a bad list, an empty list: errors naming the file and quoting the value.
        for (text, quoted) in [
            ("Name:\tx\n", "\"Name:\\tx\\n\""),
            ("Cpus_allowed_list:\t0-x\n", "\"0-x\""),
            ("Cpus_allowed_list:\t\n", "Cpus_allowed_list is empty"),
        ] {
            std::fs::write(dir.join("status"), text).unwrap();
            let e = process_mask(t.path(), Process::Pid(42))
                .unwrap_err()
                .to_string();
            assert!(e.contains("proc/42/status"), "{e}");
            assert!(e.contains(quoted), "{e}");
        }
    }

    #[test]
    fn mask_of_another_pid_on_the_real_host_is_its_affinity() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut one = nix::sched::CpuSet::new();
        let first = process_mask(Path::new("/"), Process::Current)
            .unwrap()
            .iter()
            .next()
            .unwrap();
        one.set(first).unwrap();
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(pid as i32), &one).unwrap();
        let got = process_mask(Path::new("/"), Process::Pid(pid));
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        let got = got.unwrap();
        assert_eq!(got.iter().collect::<Vec<_>>(), vec![first]);
        assert_eq!(got, set(cpus_allowed_list(&status).unwrap()));
        // A pid that is gone falls back to its status file, and that names it.
        let e = process_mask(Path::new("/"), Process::Pid(pid))
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("/proc/{pid}/status")), "{e}");
    }

    #[test]
    fn own_mask_matches_sched_getaffinity() {
        let direct = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
        let n = (0..nix::sched::CpuSet::count())
            .filter(|&c| direct.is_set(c).unwrap())
            .count();
        let m = process_mask(Path::new("/nonexistent"), Process::Current).unwrap();
        assert_eq!(m.len(), n);
        assert!(n >= 1);
    }
}
