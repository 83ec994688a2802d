//! Locating a process's cgroup directories under a root, on cgroup v1, v2 and hybrid hosts.
//!
//! Each line of `<root>/proc/<pid>/cgroup` names a hierarchy and the process's path in it;
//! the host's mount table (`<root>/proc/self/mountinfo`) says where that hierarchy is
//! mounted and which of its paths the mount shows (the mount's root). The path is
//! translated relative to that root on whole components; a path outside it, or one
//! with `.` or `..`, gives no directory for that hierarchy (and spoils no other).

use std::path::{Path, PathBuf};

use crate::cpuset::CpuSet;
use crate::error::{Error, Result};
use crate::fsutil::{self, under, Process};
use crate::mountinfo::{parse_mountinfo_line, MountInfo};
use crate::proc_cgroup::{parse_proc_cgroup_line, CgroupLine};

/// cgroup v1 or v2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    /// A v1 hierarchy (one or more named controllers).
    V1,
    /// The unified v2 hierarchy.
    V2,
}

/// One hierarchy a process belongs to, translated to directories under the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupDir {
    /// v1 or v2.
    pub version: CgroupVersion,
    /// v1 controllers of the hierarchy (empty for v2).
    pub controllers: Vec<String>,
    /// The hierarchy's mount point, under the root.
    pub mount: PathBuf,
    /// The process's cgroup directory, under the root (at or below `mount`).
    pub dir: PathBuf,
}

impl CgroupDir {
    /// Whether this is a v1 hierarchy that holds `controller` (e.g. `cpu`).
    pub fn has_v1_controller(&self, controller: &str) -> bool {
        self.version == CgroupVersion::V1 && self.controllers.iter().any(|c| c == controller)
    }

    /// The directories from `dir` up to and including `mount`, leaf first.
    pub fn levels(&self) -> Vec<&Path> {
        let mut out = vec![self.dir.as_path()];
        let mut cur = self.dir.as_path();
        while cur != self.mount {
            match cur.parent() {
                Some(p) if p.starts_with(&self.mount) => {
                    out.push(p);
                    cur = p;
                }
                _ => break,
            }
        }
        out
    }
}

/// A process's cgroup directories on every hierarchy, located once (the quota and the
/// cpuset controller are then read from the same places).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cgroups {
    dirs: Vec<CgroupDir>,
}

impl Cgroups {
    /// `proc`'s hierarchies under `root` (`<root>/proc/<pid>/cgroup` placed by `<root>/proc/self/mountinfo`).
    pub fn of(root: &Path, proc: Process) -> Result<Cgroups> {
        Ok(Cgroups {
            dirs: cgroup_dirs(root, proc)?,
        })
    }

    /// Hierarchies already located.
    pub fn from_dirs(dirs: Vec<CgroupDir>) -> Cgroups {
        Cgroups { dirs }
    }

    /// The located directories, one per hierarchy.
    pub fn dirs(&self) -> &[CgroupDir] {
        &self.dirs
    }

    /// The directory where `controller` (e.g. `cpuset`) governs the process, if any.
    pub fn controller(&self, controller: &str) -> Result<Option<CgroupDir>> {
        controller_dir_in(&self.dirs, controller)
    }

    /// The directories a cgroup at `path` (a spec's `linux.cgroupsPath`, in path form, or in
    /// systemd form `slice:prefix:name`) has or will have on every hierarchy mounted under
    /// `root` (`<root>/proc/self/mountinfo`): the leaf need not exist yet (a container not
    /// created yet), its ancestors are read as they are.
    pub fn at_path(root: &Path, path: &str) -> Result<Cgroups> {
        Ok(CgroupMounts::read(root)?.cgroups_at(path))
    }

    /// The CPUs the cpuset controller lets these cgroups use: the effective cpuset of the
    /// nearest level that has one (v1 `cpuset.effective_cpus`, v2 `cpuset.cpus.effective`),
    /// walking up from the leaf; `None` where no level says.
    pub fn effective_cpus(&self) -> Result<Option<CpuSet>> {
        let (dirs, file) = match self.controller("cpuset")? {
            Some(d) if d.version == CgroupVersion::V1 => (d, "cpuset.effective_cpus"),
            Some(d) => (d, "cpuset.cpus.effective"),
            None => match self.dirs.iter().find(|d| d.version == CgroupVersion::V2) {
                Some(d) => (d.clone(), "cpuset.cpus.effective"),
                None => return Ok(None),
            },
        };
        for level in dirs.levels() {
            if let Some(set) = fsutil::read_cpu_list_optional(&level.join(file))? {
                return Ok(Some(set));
            }
        }
        Ok(None)
    }
}

/// The cgroup mounts of a host's mount table (`<root>/proc/self/mountinfo`), read once: they
/// do not change while a host runs, so a long-running planner keeps them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupMounts {
    root: PathBuf,
    mounts: Vec<MountInfo>,
}

impl CgroupMounts {
    /// The cgroup and cgroup2 mounts under `root`; none where `root` has no mount table.
    pub fn read(root: &Path) -> Result<CgroupMounts> {
        let mountinfo = under(root, "/proc/self/mountinfo");
        let mounts = if mountinfo.exists() {
            read_mountinfo(&mountinfo)?
                .into_iter()
                .filter(|m| matches!(m.fs_type.as_str(), "cgroup" | "cgroup2"))
                .collect()
        } else {
            Vec::new()
        };
        Ok(CgroupMounts {
            root: root.to_path_buf(),
            mounts,
        })
    }

    /// Mounts already read (a host inventory's), under `root`.
    pub fn from_mounts(root: &Path, mounts: Vec<MountInfo>) -> CgroupMounts {
        CgroupMounts {
            root: root.to_path_buf(),
            mounts,
        }
    }

    /// The cgroup and cgroup2 mounts.
    pub fn mounts(&self) -> &[MountInfo] {
        &self.mounts
    }

    /// `proc`'s hierarchies (its `/proc/<pid>/cgroup`, read now) placed by these mounts: what
    /// [`Cgroups::of`] gives, without reading the mount table again.
    pub fn cgroups_of(&self, proc: Process) -> Result<Cgroups> {
        cgroups_among(&self.root, &self.mounts, proc)
    }

    /// The directories a cgroup at `path` has or will have on every hierarchy mounted here
    /// (see [`Cgroups::at_path`]).
    pub fn cgroups_at(&self, path: &str) -> Cgroups {
        cgroups_at_among(&self.root, &self.mounts, path)
    }
}

/// The directories a cgroup at `path` has or will have on every hierarchy of `mounts` (a host
/// inventory's, borrowed), under `root`: [`CgroupMounts::cgroups_at`] without a copy of them.
pub fn cgroups_at_among(root: &Path, mounts: &[MountInfo], path: &str) -> Cgroups {
    let Some(path) = crate::cgroup_path::expand_cgroups_path(path) else {
        return Cgroups::default();
    };
    let mut lines: Vec<CgroupLine> = Vec::new();
    for m in mounts {
        let line = match m.fs_type.as_str() {
            "cgroup2" => CgroupLine {
                id: 0,
                controllers: Vec::new(),
                path: path.clone(),
            },
            _ => CgroupLine {
                id: 1,
                controllers: m
                    .super_option_list()
                    .filter(|o| V1_CONTROLLERS.contains(o))
                    .map(String::from)
                    .collect(),
                path: path.clone(),
            },
        };
        if (!line.controllers.is_empty() || line.is_v2()) && !lines.contains(&line) {
            lines.push(line);
        }
    }
    Cgroups {
        dirs: locate(root, &lines, mounts),
    }
}

/// `proc`'s hierarchies under `root` (its `/proc/<pid>/cgroup`, read now) placed by `mounts`
/// (a host inventory's, borrowed: [`CgroupMounts::cgroups_of`] without a copy of them).
pub fn cgroups_among(root: &Path, mounts: &[MountInfo], proc: Process) -> Result<Cgroups> {
    let lines = read_proc_cgroup(&proc.proc_dir(root).join("cgroup"))?;
    Ok(Cgroups {
        dirs: locate(root, &lines, mounts),
    })
}

/// The v1 controllers cpuplan reads: the CPU quota's and the cpuset's.
const V1_CONTROLLERS: [&str; 3] = ["cpu", "cpuacct", "cpuset"];

/// Every hierarchy of `proc` that can be translated to a directory under `root`.
pub fn cgroup_dirs(root: &Path, proc: Process) -> Result<Vec<CgroupDir>> {
    let lines = read_proc_cgroup(&proc.proc_dir(root).join("cgroup"))?;
    let mounts = read_mountinfo(&under(root, "/proc/self/mountinfo"))?;
    Ok(locate(root, &lines, &mounts))
}

/// The directory where `controller` (e.g. `cpuset`) governs the process whose hierarchies are `dirs`: the v1 hierarchy naming it, else v2 where the process's cgroup lists it in its own `cgroup.controllers` (the kernel's rule for a controller being enabled there).
pub fn controller_dir_in(dirs: &[CgroupDir], controller: &str) -> Result<Option<CgroupDir>> {
    if let Some(d) = dirs.iter().find(|d| d.has_v1_controller(controller)) {
        return Ok(Some(d.clone()));
    }
    for d in dirs.iter().filter(|d| d.version == CgroupVersion::V2) {
        let file = d.dir.join("cgroup.controllers");
        if let Some(text) = fsutil::read_optional(&file)? {
            if text.split_whitespace().any(|c| c == controller) {
                return Ok(Some(d.clone()));
            }
        }
    }
    Ok(None)
}

/// The hierarchies of `lines` placed under `root` by the mounts that show them; untranslatable
/// ones are left out, and so are v1 hierarchies without a controller cpuplan reads
/// ([`V1_CONTROLLERS`]: `memory`, `pids`, `name=systemd` and the like say nothing of CPUs, and
/// matching each against every mount was a tenth of a container start's instructions).
pub fn locate(root: &Path, lines: &[CgroupLine], mounts: &[MountInfo]) -> Vec<CgroupDir> {
    let mut out = Vec::new();
    let read_here = |line: &&CgroupLine| {
        line.is_v2()
            || line
                .controllers
                .iter()
                .any(|c| V1_CONTROLLERS.contains(&c.as_str()))
    };
    for line in lines.iter().filter(read_here) {
        let mut best: Option<(&MountInfo, Vec<&str>, usize)> = None;
        for m in mounts.iter().filter(|m| mount_matches(m, line)) {
            let Some(rest) = translate(&line.path, &m.root) else {
                continue;
            };
            let depth = components(&m.root).count();
            let deeper = match &best {
                Some((_, _, d)) => depth > *d,
                None => true,
            };
            if deeper {
                best = Some((m, rest, depth));
            }
        }
        match best {
            Some((m, rest, _)) => {
                let mount = under(root, &m.mount_point);
                let dir = rest.iter().fold(mount.clone(), |d, c| d.join(c));
                out.push(CgroupDir {
                    version: if line.is_v2() {
                        CgroupVersion::V2
                    } else {
                        CgroupVersion::V1
                    },
                    controllers: line.controllers.clone(),
                    mount,
                    dir,
                });
            }
            None => log::debug!(
                "cgroup hierarchy {}:{}:{} has no mount that shows it",
                line.id,
                line.controllers.join(","),
                line.path
            ),
        }
    }
    out
}

/// Whether mount `m` is of the hierarchy of `line`: the cgroup2 mount for v2; for v1 a `cgroup` mount whose super options hold every controller of the line.
pub fn mount_matches(m: &MountInfo, line: &CgroupLine) -> bool {
    if line.is_v2() {
        m.fs_type == "cgroup2"
    } else {
        m.fs_type == "cgroup"
            && !line.controllers.is_empty()
            && line
                .controllers
                .iter()
                .all(|c| m.super_option_list().any(|o| o == c))
    }
}

/// The components of cgroup path `path` below mount root `mount_root`; `None` when it is outside that root (on whole components) or holds `.` or `..`.
pub fn translate<'a>(path: &'a str, mount_root: &str) -> Option<Vec<&'a str>> {
    let parts: Vec<&str> = components(path).collect();
    if parts.iter().any(|c| *c == "." || *c == "..") {
        return None;
    }
    let root: Vec<&str> = components(mount_root).collect();
    if parts.len() < root.len() || parts[..root.len()] != root[..] {
        return None;
    }
    Some(parts[root.len()..].to_vec())
}

/// The non-empty `/`-separated components of a path.
fn components(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|c| !c.is_empty())
}

/// The file at `path`, read by `read` (one record or many), parsed line by line with `parse`
/// (`Ok(None)` skips a line); a bad line is an error naming the file and the line number, and
/// quoting the line.
fn read_lines<T>(
    path: &Path,
    read: fn(&Path) -> Result<String>,
    parse: impl Fn(&str) -> Result<Option<T>, &'static str>,
) -> Result<Vec<T>> {
    let text = read(path)?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        match parse(line) {
            Ok(Some(item)) => out.push(item),
            Ok(None) => {}
            Err(what) => {
                return Err(Error::malformed(
                    path,
                    format!("line {}: {what}", n + 1),
                    line,
                ))
            }
        }
    }
    Ok(out)
}

/// `/proc/<pid>/cgroup` read and parsed.
fn read_proc_cgroup(path: &Path) -> Result<Vec<CgroupLine>> {
    // One record: the kernel writes every hierarchy's line in one show.
    read_lines(path, fsutil::read, parse_proc_cgroup_line)
}

/// mountinfo read and parsed.
fn read_mountinfo(path: &Path) -> Result<Vec<MountInfo>> {
    // Many records: one per mount, a page of them per read.
    read_lines(path, fsutil::read_all_records, parse_mountinfo_line)
}

#[cfg(test)]
mod at_path_tests {
    use super::*;

    #[test]
    fn a_cgroup_not_made_yet_reads_its_nearest_effective_cpuset_and_its_ancestors_quota() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        let w = |p: &str, s: &str| {
            let p = r.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, s).unwrap();
        };
        w(
            "proc/self/mountinfo",
            "30 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
             31 25 0:27 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n\
             32 25 0:28 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n\
             33 25 0:29 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
        );
        w("sys/fs/cgroup/cpuset/cpuset.effective_cpus", "0-7\n");
        w("sys/fs/cgroup/cpuset/parent/cpuset.effective_cpus", "0\n");
        w(
            "sys/fs/cgroup/cpu,cpuacct/parent/cpu.cfs_quota_us",
            "50000\n",
        );
        w(
            "sys/fs/cgroup/cpu,cpuacct/parent/cpu.cfs_period_us",
            "100000\n",
        );
        let c = Cgroups::at_path(r, "/parent/ctr").unwrap();
        assert_eq!(c.dirs().len(), 3, "{:?}", c.dirs());
        assert_eq!(c.effective_cpus().unwrap().unwrap().to_string(), "0");
        assert_eq!(c.quota().unwrap(), Some(0.5));
        let elsewhere = Cgroups::at_path(r, "/other/ctr").unwrap();
        assert_eq!(
            elsewhere.effective_cpus().unwrap().unwrap().to_string(),
            "0-7"
        );
        assert_eq!(elsewhere.quota().unwrap(), None);
        assert!(
            Cgroups::at_path(r, "/").unwrap().dirs().is_empty(),
            "names no cgroup"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mountinfo::parse_mountinfo;
    use crate::proc_cgroup::parse_proc_cgroup;

    const MOUNTS: &str = "\
31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset
40 31 0:37 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
";

    fn dirs(cgroup: &str, mounts: &str) -> Vec<CgroupDir> {
        locate(
            Path::new("/r"),
            &parse_proc_cgroup(cgroup).unwrap(),
            &parse_mountinfo(mounts).unwrap(),
        )
    }

    #[test]
    fn translate_on_whole_components() {
        assert_eq!(translate("/a/b", "/"), Some(vec!["a", "b"]));
        assert_eq!(translate("/", "/"), Some(vec![]));
        assert_eq!(translate("/docker/abc", "/docker/abc"), Some(vec![]));
        assert_eq!(translate("/docker/abc/x", "/docker/abc/"), Some(vec!["x"]));
        assert_eq!(translate("/docker/abc-other", "/docker/abc"), None);
        assert_eq!(translate("/docker", "/docker/abc"), None);
        assert_eq!(translate("/a/../b", "/"), None);
        assert_eq!(translate("/../../x", "/"), None);
        assert_eq!(translate("/a/./b", "/"), None);
        assert_eq!(translate("/a//b", "/"), Some(vec!["a", "b"]));
    }

    #[test]
    fn locates_the_cpu_hierarchies_of_a_hybrid_host() {
        let d = dirs(
            "9:name=systemd:/s\n3:cpuset:/\n1:cpu,cpuacct:/k/p\n0::/u\n",
            MOUNTS,
        );
        // name=systemd is mounted, but says nothing of CPUs: not located.
        assert_eq!(d.len(), 3, "{d:?}");
        assert_eq!(d[0].dir, Path::new("/r/sys/fs/cgroup/cpuset"));
        assert_eq!(
            d[1],
            CgroupDir {
                version: CgroupVersion::V1,
                controllers: vec!["cpu".into(), "cpuacct".into()],
                mount: "/r/sys/fs/cgroup/cpu,cpuacct".into(),
                dir: "/r/sys/fs/cgroup/cpu,cpuacct/k/p".into(),
            }
        );
        assert!(d[1].has_v1_controller("cpu") && !d[1].has_v1_controller("cpuset"));
        assert_eq!(d[2].version, CgroupVersion::V2);
        assert_eq!(d[2].dir, Path::new("/r/sys/fs/cgroup/unified/u"));
        assert!(!d[2].has_v1_controller("cpu"));
    }

    #[test]
    fn a_v1_line_needs_a_mount_with_all_its_controllers() {
        // cpu alone is mounted with cpuacct: fine; cpu,blkio is not mounted anywhere.
        assert_eq!(dirs("1:cpu:/a\n", MOUNTS).len(), 1);
        assert!(dirs("1:cpu,blkio:/a\n", MOUNTS).is_empty());
        assert!(dirs("1:memory:/a\n", MOUNTS).is_empty());
        // No cgroup2 mount: the v2 line is dropped, the v1 one kept.
        let v1_only = MOUNTS.lines().take(4).collect::<Vec<_>>().join("\n");
        let d = dirs("1:cpu,cpuacct:/a\n0::/a\n", &v1_only);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].version, CgroupVersion::V1);
    }

    #[test]
    fn the_longest_mount_root_that_holds_the_path_wins() {
        let mounts = "\
41 31 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw
50 31 0:38 /docker/abc /ctr/cg rw - cgroup2 cgroup2 rw
51 31 0:38 /docker/zzz /ctr/other rw - cgroup2 cgroup2 rw
";
        let d = dirs("0::/docker/abc/inner\n", mounts);
        assert_eq!(d[0].mount, Path::new("/r/ctr/cg"));
        assert_eq!(d[0].dir, Path::new("/r/ctr/cg/inner"));
        let d = dirs("0::/docker/abc-other\n", mounts);
        assert_eq!(d[0].dir, Path::new("/r/sys/fs/cgroup/docker/abc-other"));
        // Only a container's view: a path outside its root has no directory.
        let view = "50 31 0:38 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert!(dirs("0::/docker/abc-other\n", view).is_empty());
        assert_eq!(
            dirs("0::/docker/abc\n", view)[0].dir,
            Path::new("/r/sys/fs/cgroup")
        );
    }

    #[test]
    fn an_untranslatable_hierarchy_spoils_no_other() {
        let d = dirs("1:cpu,cpuacct:/a/../../b\n0::/ok\n", MOUNTS);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].dir, Path::new("/r/sys/fs/cgroup/unified/ok"));
    }

    #[test]
    fn levels_run_from_the_leaf_to_the_mount() {
        let d = &dirs("0::/a/b\n", MOUNTS)[0];
        assert_eq!(
            d.levels(),
            [
                Path::new("/r/sys/fs/cgroup/unified/a/b"),
                Path::new("/r/sys/fs/cgroup/unified/a"),
                Path::new("/r/sys/fs/cgroup/unified"),
            ]
        );
        let top = &dirs("0::/\n", MOUNTS)[0];
        assert_eq!(top.levels(), [Path::new("/r/sys/fs/cgroup/unified")]);
    }
}
