//! The cgroup CPU quota: the tightest limit over a process's cgroup and all its ancestors.
//!
//! cgroup v2 keeps it in `cpu.max` (`max` or `QUOTA [PERIOD]`, period 100000 when left
//! out) anywhere in the unified tree; cgroup v1 in `cpu.cfs_quota_us` (`-1`: no limit) and
//! `cpu.cfs_period_us` of the hierarchy holding the `cpu` controller. A hybrid host may set
//! limits in both, and the tightest of all counts. Reading only the leaf, as automaxprocs,
//! num_cpus and Go's runtime do, misses a limit set on a pod's parent cgroup.

use std::path::Path;

use crate::cgroup::{cgroup_dirs, CgroupDir, CgroupVersion, Cgroups};
use crate::error::{Error, Result};
use crate::fsutil::{self, Process};

/// The period the kernel assumes when `cpu.max` holds only the quota, in microseconds.
pub const DEFAULT_PERIOD_US: u64 = 100_000;

/// The tightest CPU quota over `proc`'s cgroup and all its ancestors, on every hierarchy (v1 and v2), in CPUs; `None` when no level sets one.
pub fn cgroup_cpu_quota(root: &Path, proc: Process) -> Result<Option<f64>> {
    quota_over(&cgroup_dirs(root, proc)?)
}

impl Cgroups {
    /// The tightest CPU quota over these directories and their ancestors, in CPUs.
    pub fn quota(&self) -> Result<Option<f64>> {
        quota_over(self.dirs())
    }
}

/// The tightest CPU quota over hierarchies already located (see [`cgroup_dirs`]), in CPUs.
///
/// Where a v1 hierarchy holds the `cpu` controller, the v2 hierarchy is not read: the kernel
/// binds a controller to one hierarchy at a time, so a hybrid host's unified tree has no
/// `cpu.max` anywhere (three failed opens per container saved).
pub fn quota_over(dirs: &[CgroupDir]) -> Result<Option<f64>> {
    let v1_cpu = dirs.iter().any(|d| d.has_v1_controller("cpu"));
    let mut tightest: Option<f64> = None;
    for dir in dirs {
        if v1_cpu && dir.version == CgroupVersion::V2 {
            continue;
        }
        tightest = min_quota(tightest, hierarchy_quota(dir)?);
    }
    Ok(tightest)
}

/// The tightest quota over one hierarchy, leaf to mount point; `None` for one that holds no CPU limit (a v1 hierarchy without `cpu`).
pub fn hierarchy_quota(dir: &CgroupDir) -> Result<Option<f64>> {
    let read_level = match dir.version {
        CgroupVersion::V2 => v2_level_quota,
        CgroupVersion::V1 if dir.has_v1_controller("cpu") => v1_level_quota,
        CgroupVersion::V1 => return Ok(None),
    };
    let mut tightest = None;
    for level in dir.levels() {
        tightest = min_quota(tightest, read_level(level)?);
    }
    Ok(tightest)
}

/// The tightest cgroup v2 `cpu.max` over the cgroup that `proc_cgroup`'s `0::PATH` line names
/// and its ancestors up to the unified mount `mount` itself, in CPUs: the in-process API's rule
/// (`cpuplan.cpus.cgroup_cpu_quota`, after the seed's), cgroup v2 only.
///
/// `PATH` is taken under `mount` as written (inside a cgroup namespace it is `/`, the mount
/// root). `None` when no level sets a quota, and when cgroup v2 is absent: no `proc_cgroup`
/// file, no `0::` line, or a `PATH` with a `..` component (a cgroup outside this mount's view).
/// A malformed `cpu.max` is an error naming it.
pub fn v2_quota_under(mount: &Path, proc_cgroup: &Path) -> Result<Option<f64>> {
    let Some(text) = fsutil::read_optional(proc_cgroup)? else {
        return Ok(None);
    };
    let Some(path) = text
        .lines()
        .find_map(|l| l.trim_end_matches(['\r', '\0']).strip_prefix("0::"))
    else {
        return Ok(None);
    };
    let parts: Vec<&str> = path
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    if parts.contains(&"..") {
        return Ok(None);
    }
    let dir = CgroupDir {
        version: CgroupVersion::V2,
        controllers: Vec::new(),
        mount: mount.to_path_buf(),
        dir: parts.iter().fold(mount.to_path_buf(), |d, c| d.join(c)),
    };
    hierarchy_quota(&dir)
}

/// The quota `cpu.max` of cgroup v2 directory `dir` sets, in CPUs; `None` for `max` or no file.
pub fn v2_level_quota(dir: &Path) -> Result<Option<f64>> {
    let file = dir.join("cpu.max");
    match fsutil::read_optional(&file)? {
        None => Ok(None),
        Some(text) => parse_cpu_max(&text).map_err(|what| Error::malformed(&file, what, text)),
    }
}

/// The quota `cpu.cfs_quota_us` / `cpu.cfs_period_us` of cgroup v1 directory `dir` set, in CPUs; `None` for `-1` or a missing file.
pub fn v1_level_quota(dir: &Path) -> Result<Option<f64>> {
    let quota_file = dir.join("cpu.cfs_quota_us");
    let quota = match fsutil::read_optional(&quota_file)? {
        None => return Ok(None),
        Some(text) => {
            parse_cfs_quota(&text).map_err(|what| Error::malformed(&quota_file, what, text))?
        }
    };
    let Some(quota) = quota else {
        return Ok(None);
    };
    let period_file = dir.join("cpu.cfs_period_us");
    match fsutil::read_optional(&period_file)? {
        None => {
            log::debug!(
                "{} sets a quota but {} is missing: no limit at this level",
                quota_file.display(),
                period_file.display()
            );
            Ok(None)
        }
        Some(text) => {
            let period = parse_cfs_period(&text)
                .map_err(|what| Error::malformed(&period_file, what, text))?;
            Ok(Some(quota as f64 / period as f64))
        }
    }
}

/// `cpu.max` in CPUs: `max [PERIOD]` is `None`, `QUOTA [PERIOD]` is QUOTA/PERIOD (period 100000 when left out).
pub fn parse_cpu_max(text: &str) -> Result<Option<f64>, &'static str> {
    let fields: Vec<&str> = text.split_whitespace().collect();
    let (quota, period) = match fields[..] {
        [] => return Err("empty, expected `max` or `QUOTA [PERIOD]`"),
        [q] => (q, DEFAULT_PERIOD_US),
        [q, p] => (
            q,
            positive(p).ok_or("period is not a positive integer of microseconds")?,
        ),
        _ => return Err("more than two fields, expected `max` or `QUOTA [PERIOD]`"),
    };
    if quota == "max" {
        return Ok(None);
    }
    let quota = positive(quota).ok_or("quota is neither `max` nor a positive integer")?;
    Ok(Some(quota as f64 / period as f64))
}

/// `cpu.cfs_quota_us` in microseconds: `-1` is `None` (no limit).
pub fn parse_cfs_quota(text: &str) -> Result<Option<u64>, &'static str> {
    match text.split_whitespace().collect::<Vec<_>>()[..] {
        ["-1"] => Ok(None),
        [q] => positive(q)
            .map(Some)
            .ok_or("quota is neither -1 nor a positive integer"),
        [] => Err("empty, expected -1 or a positive integer"),
        _ => Err("more than one field, expected -1 or a positive integer"),
    }
}

/// `cpu.cfs_period_us` in microseconds.
pub fn parse_cfs_period(text: &str) -> Result<u64, &'static str> {
    match text.split_whitespace().collect::<Vec<_>>()[..] {
        [p] => positive(p).ok_or("period is not a positive integer of microseconds"),
        [] => Err("empty, expected a positive integer"),
        _ => Err("more than one field, expected a positive integer"),
    }
}

/// A positive decimal integer.
fn positive(s: &str) -> Option<u64> {
    s.parse::<u64>().ok().filter(|v| *v > 0)
}

/// The smaller of two optional quotas, `None` meaning no limit.
fn min_quota(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_max() {
        assert_eq!(parse_cpu_max("max 100000\n"), Ok(None));
        assert_eq!(parse_cpu_max("max"), Ok(None));
        assert_eq!(parse_cpu_max("250000 100000\n"), Ok(Some(2.5)));
        assert_eq!(parse_cpu_max("50000 200000"), Ok(Some(0.25)));
        assert_eq!(parse_cpu_max("150000\n"), Ok(Some(1.5)));
    }

    #[test]
    fn malformed_cpu_max() {
        for (text, what) in [
            ("", "empty"),
            ("\n", "empty"),
            ("junk", "neither `max`"),
            ("100 0", "period"),
            ("100 -5", "period"),
            ("max 0", "period"),
            ("100 x", "period"),
            ("0 100000", "neither `max`"),
            ("-1 100000", "neither `max`"),
            ("1.5 100000", "neither `max`"),
            ("100 100000 7", "more than two"),
        ] {
            let e = parse_cpu_max(text).unwrap_err();
            assert!(e.contains(what), "{text:?}: {e}");
        }
    }

    #[test]
    fn cfs_files() {
        assert_eq!(parse_cfs_quota("-1\n"), Ok(None));
        assert_eq!(parse_cfs_quota("150000\n"), Ok(Some(150_000)));
        assert_eq!(parse_cfs_period("100000\n"), Ok(100_000));
        for bad in ["", "junk", "0", "-2", "1 2"] {
            assert!(parse_cfs_quota(bad).is_err(), "{bad:?}");
        }
        for bad in ["", "junk", "0", "-1", "1 2"] {
            assert!(parse_cfs_period(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_smaller_limit_wins() {
        assert_eq!(min_quota(None, None), None);
        assert_eq!(min_quota(Some(2.0), None), Some(2.0));
        assert_eq!(min_quota(None, Some(3.0)), Some(3.0));
        assert_eq!(min_quota(Some(2.0), Some(0.5)), Some(0.5));
    }

    #[test]
    fn v2_quota_under_a_mount_reads_the_proc_cgroup_path_only() {
        let t = tempfile::tempdir().unwrap();
        let mount = t.path().join("unified");
        std::fs::create_dir_all(mount.join("a/b")).unwrap();
        std::fs::write(mount.join("a/cpu.max"), "150000 100000\n").unwrap();
        std::fs::write(mount.join("a/b/cpu.max"), "max 100000\n").unwrap();
        let cg = t.path().join("cgroup");
        let quota = |text: &str| {
            std::fs::write(&cg, text).unwrap();
            v2_quota_under(&mount, &cg).unwrap()
        };
        assert_eq!(quota("1:cpu:/x\n0::/a/b\n"), Some(1.5));
        assert_eq!(quota("0::/\n"), None);
        std::fs::write(mount.join("cpu.max"), "50000\n").unwrap();
        assert_eq!(quota("0::/\n"), Some(0.5));
        assert_eq!(quota("0::/a/missing/leaf\n"), Some(0.5));
        // No v2 line (a v1-only host), a path out of the mount's view, no file: cgroup v2 is absent.
        assert_eq!(quota("1:cpu,cpuacct:/a/b\n"), None);
        assert_eq!(quota("0::/a/../b\n"), None);
        assert_eq!(
            v2_quota_under(&mount, &t.path().join("none")).unwrap(),
            None
        );
        std::fs::write(mount.join("a/cpu.max"), "junk\n").unwrap();
        std::fs::write(&cg, "0::/a/b\n").unwrap();
        let e = v2_quota_under(&mount, &cg).unwrap_err().to_string();
        assert!(e.contains("a/cpu.max") && e.contains("junk"), "{e}");
    }

    #[test]
    fn where_v1_holds_cpu_the_v2_tree_is_not_read() {
        let t = tempfile::tempdir().unwrap();
        let v1 = t.path().join("cpu");
        let v2 = t.path().join("unified");
        std::fs::create_dir_all(&v1).unwrap();
        std::fs::create_dir_all(&v2).unwrap();
        std::fs::write(v1.join("cpu.cfs_quota_us"), "200000\n").unwrap();
        std::fs::write(v1.join("cpu.cfs_period_us"), "100000\n").unwrap();
        std::fs::write(v2.join("cpu.max"), "50000 100000\n").unwrap();
        let dir = |version, controllers: &[&str], mount: &Path| CgroupDir {
            version,
            controllers: controllers.iter().map(|c| c.to_string()).collect(),
            mount: mount.to_path_buf(),
            dir: mount.to_path_buf(),
        };
        let unified = dir(CgroupVersion::V2, &[], &v2);
        let with_cpu = [dir(CgroupVersion::V1, &["cpu"], &v1), unified.clone()];
        assert_eq!(quota_over(&with_cpu).unwrap(), Some(2.0));
        // Without a v1 `cpu` (cgroup v2 only, or v1 hierarchies without it), v2 counts.
        let without = [dir(CgroupVersion::V1, &["cpuset"], &v1), unified];
        assert_eq!(quota_over(&without).unwrap(), Some(0.5));
    }

    #[test]
    fn levels_are_read_leaf_to_mount_and_the_tightest_counts() {
        let t = tempfile::tempdir().unwrap();
        let mount = t.path().join("cg");
        let leaf = mount.join("a/b");
        std::fs::create_dir_all(&leaf).unwrap();
        std::fs::write(mount.join("a/cpu.max"), "150000 100000\n").unwrap();
        std::fs::write(leaf.join("cpu.max"), "max 100000\n").unwrap();
        let d = CgroupDir {
            version: CgroupVersion::V2,
            controllers: vec![],
            mount: mount.clone(),
            dir: leaf.clone(),
        };
        assert_eq!(hierarchy_quota(&d).unwrap(), Some(1.5));
        // On the mount point itself too.
        std::fs::write(mount.join("cpu.max"), "50000\n").unwrap();
        assert_eq!(hierarchy_quota(&d).unwrap(), Some(0.5));
        // A v1 hierarchy without `cpu` holds no limit, whatever its files say.
        let v1 = CgroupDir {
            version: CgroupVersion::V1,
            controllers: vec!["cpuset".into()],
            ..d
        };
        std::fs::write(leaf.join("cpu.cfs_quota_us"), "1000\n").unwrap();
        std::fs::write(leaf.join("cpu.cfs_period_us"), "100000\n").unwrap();
        assert_eq!(hierarchy_quota(&v1).unwrap(), None);
        let v1cpu = CgroupDir {
            controllers: vec!["cpu".into(), "cpuacct".into()],
            ..v1
        };
        assert_eq!(hierarchy_quota(&v1cpu).unwrap(), Some(0.01));
    }
}
