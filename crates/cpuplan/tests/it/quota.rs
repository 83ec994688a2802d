//! The cgroup quota, cgroup directories and process masks over the fixture trees in
//! `tests/fixtures/cgroup/` (see its README for what each tree exercises), malformed
//! files built in temporary directories, and the live machine.

use std::path::{Path, PathBuf};

use cpuplan::{
    cgroup_cpu_quota, parse_cpu_list, process_mask, usable_cpus, CgroupDir, CgroupVersion, Cgroups,
    Error, Process,
};

fn fixture(tree: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/cgroup")
        .join(tree)
}

fn quota(tree: &str, pid: u32) -> Option<f64> {
    cgroup_cpu_quota(&fixture(tree), Process::Pid(pid)).unwrap()
}

/// The hierarchies located for `pid` under `root`.
fn located(root: &std::path::Path, pid: Process) -> Vec<CgroupDir> {
    Cgroups::of(root, pid).unwrap().dirs().to_vec()
}

#[test]
fn v2_a_parent_limit_tighter_than_the_leaf_counts() {
    assert_eq!(quota("v2", 4242), Some(2.5));
}

#[test]
fn v2_missing_directories_mean_no_limit() {
    assert_eq!(quota("v2", 4243), None);
}

#[test]
fn v1_co_mounted_cpu_cpuacct_with_a_limit_on_a_parent() {
    assert_eq!(quota("v1", 4242), Some(1.5));
}

#[test]
fn hybrid_the_tightest_over_both_versions_wins() {
    assert_eq!(quota("hybrid", 4242), Some(1.25));
}

#[test]
fn hybrid_an_untranslatable_hierarchy_spoils_no_other() {
    assert_eq!(quota("hybrid", 4244), Some(1.5));
    let dirs = located(&fixture("hybrid"), Process::Pid(4244));
    assert_eq!(dirs.len(), 2);
    assert!(dirs.iter().all(|d| !d.has_v1_controller("cpu")));
}

#[test]
fn container_view_with_a_mount_root_not_slash() {
    assert_eq!(quota("container", 1), Some(0.5));
    assert_eq!(quota("container", 7), Some(0.5));
}

#[test]
fn container_paths_outside_the_mount_root_or_with_dotdot_have_no_limit() {
    for pid in [8, 9] {
        assert_eq!(quota("container", pid), None, "pid {pid}");
        assert!(located(&fixture("container"), Process::Pid(pid)).is_empty());
        assert_eq!(
            Cgroups::of(&fixture("container"), Process::Pid(pid))
                .unwrap()
                .controller("cpuset")
                .unwrap(),
            None
        );
    }
}

#[test]
fn escaped_mount_point_optional_fields_and_a_colon_in_the_path() {
    assert_eq!(quota("escaped", 5), Some(0.75));
    let dirs = located(&fixture("escaped"), Process::Pid(5));
    assert_eq!(dirs.len(), 1);
    assert_eq!(
        dirs[0].dir,
        fixture("escaped").join("sys/fs/cgroup/my cgroup/app/svc:1")
    );
}

#[test]
fn cgroups_of_each_tree() {
    let root = fixture("hybrid");
    let dirs = located(&root, Process::Pid(4242));
    // cpu, cpuacct, cpuset and the unified tree: the hierarchies of `memory`, `pids`,
    // `name=systemd` and the rest say nothing of CPUs and are not located.
    assert_eq!(dirs.len(), 4, "{dirs:?}");
    assert!(!dirs.iter().any(|d| d.has_v1_controller("memory")
        || d.has_v1_controller("pids")
        || d.has_v1_controller("name=systemd")));
    let cpu = dirs.iter().find(|d| d.has_v1_controller("cpu")).unwrap();
    assert_eq!(cpu.mount, root.join("sys/fs/cgroup/cpu"));
    assert_eq!(cpu.dir, root.join("sys/fs/cgroup/cpu/kubepods/pod1/ctr1"));
    let v2: Vec<_> = dirs
        .iter()
        .filter(|d| d.version == CgroupVersion::V2)
        .collect();
    assert_eq!(v2.len(), 1);
    assert_eq!(
        v2[0].dir,
        root.join("sys/fs/cgroup/unified/kubepods/pod1/ctr1")
    );

    let root = fixture("v1");
    let dirs = located(&root, Process::Pid(4242));
    assert_eq!(dirs.len(), 2, "cpu,cpuacct and cpuset: {dirs:?}");
    assert!(dirs.iter().all(|d| d.version == CgroupVersion::V1));
    let cpu = dirs
        .iter()
        .find(|d| d.has_v1_controller("cpuacct"))
        .unwrap();
    assert_eq!(cpu.controllers, ["cpu", "cpuacct"]);
    assert_eq!(
        cpu.dir,
        root.join("sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/ctr1")
    );
}

#[test]
fn controller_dir_picks_v1_else_v2_where_enabled() {
    // v2 only: cpuset listed in the leaf's cgroup.controllers.
    let root = fixture("v2");
    let d = Cgroups::of(&root, Process::Pid(4242))
        .unwrap()
        .controller("cpuset")
        .unwrap()
        .unwrap();
    assert_eq!(d.version, CgroupVersion::V2);
    assert_eq!(d.dir, root.join("sys/fs/cgroup/kubepods/pod1/ctr1"));
    assert_eq!(
        Cgroups::of(&root, Process::Pid(4242))
            .unwrap()
            .controller("rdma")
            .unwrap(),
        None
    );
    // Hybrid: cpuset is a v1 hierarchy.
    let root = fixture("hybrid");
    let d = Cgroups::of(&root, Process::Pid(4242))
        .unwrap()
        .controller("cpuset")
        .unwrap()
        .unwrap();
    assert_eq!(d.version, CgroupVersion::V1);
    assert_eq!(d.dir, root.join("sys/fs/cgroup/cpuset/kubepods/pod1/ctr1"));
    assert!(d.dir.starts_with(&d.mount));
    // Hybrid: the unified tree enables nothing, and io has no v1 mount.
    assert_eq!(
        Cgroups::of(&root, Process::Pid(4242))
            .unwrap()
            .controller("io")
            .unwrap(),
        None
    );
    // Container: cpu is enabled in /sub; cpuset is not.
    let root = fixture("container");
    let d = Cgroups::of(&root, Process::Pid(7))
        .unwrap()
        .controller("cpu")
        .unwrap()
        .unwrap();
    assert_eq!(d.dir, root.join("sys/fs/cgroup/sub"));
    assert_eq!(
        Cgroups::of(&root, Process::Pid(7))
            .unwrap()
            .controller("cpuset")
            .unwrap(),
        None
    );
}

#[test]
fn masks_of_fixture_pids() {
    let mask = process_mask(&fixture("v1"), Process::Pid(4242)).unwrap();
    assert_eq!(mask, parse_cpu_list("0-3,8-11").unwrap());
    let q = quota("v1", 4242);
    assert_eq!(usable_cpus(&mask, q), 1);
    let mask = process_mask(&fixture("v2"), Process::Pid(4242)).unwrap();
    assert_eq!(usable_cpus(&mask, quota("v2", 4242)), 2);
    assert_eq!(usable_cpus(&mask, quota("v2", 4243)), 8);
}

/// A v2 tree in a tempdir: cgroup2 at /sys/fs/cgroup, pid 1 in `/a/b`.
fn v2_tree() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    std::fs::create_dir_all(r.join("proc/self")).unwrap();
    std::fs::create_dir_all(r.join("proc/1")).unwrap();
    std::fs::create_dir_all(r.join("sys/fs/cgroup/a/b")).unwrap();
    std::fs::write(
        r.join("proc/self/mountinfo"),
        "30 22 0:26 / /sys/fs/cgroup rw shared:9 - cgroup2 cgroup2 rw\n",
    )
    .unwrap();
    std::fs::write(r.join("proc/1/cgroup"), "0::/a/b\n").unwrap();
    t
}

fn err(root: &Path) -> String {
    cgroup_cpu_quota(root, Process::Pid(1))
        .unwrap_err()
        .to_string()
}

#[test]
fn malformed_cpu_max_names_the_file_and_quotes_it() {
    for content in ["junk\n", "", "100 0\n", "100 -1\n", "1 2 3\n", "0 100000\n"] {
        let t = v2_tree();
        let file = t.path().join("sys/fs/cgroup/a/cpu.max");
        std::fs::write(&file, content).unwrap();
        let e = err(t.path());
        assert!(e.contains(&file.display().to_string()), "{e}");
        assert!(e.contains(&format!("{content:?}")), "{e}");
    }
}

#[test]
fn malformed_v1_files_name_the_file_and_quote_it() {
    let cases = [
        ("cpu.cfs_quota_us", "abc\n", "100000\n"),
        ("cpu.cfs_quota_us", "0\n", "100000\n"),
        ("cpu.cfs_quota_us", "", "100000\n"),
        ("cpu.cfs_period_us", "50000\n", "0\n"),
        ("cpu.cfs_period_us", "50000\n", "-100000\n"),
        ("cpu.cfs_period_us", "50000\n", "1 2\n"),
    ];
    for (bad, quota, period) in cases {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        std::fs::create_dir_all(r.join("proc/self")).unwrap();
        std::fs::create_dir_all(r.join("proc/1")).unwrap();
        let leaf = r.join("sys/fs/cgroup/cpu,cpuacct/k");
        std::fs::create_dir_all(&leaf).unwrap();
        std::fs::write(
            r.join("proc/self/mountinfo"),
            "28 24 0:24 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n",
        )
        .unwrap();
        std::fs::write(r.join("proc/1/cgroup"), "3:cpu,cpuacct:/k\n").unwrap();
        std::fs::write(leaf.join("cpu.cfs_quota_us"), quota).unwrap();
        std::fs::write(leaf.join("cpu.cfs_period_us"), period).unwrap();
        let e = err(r);
        let content = if bad == "cpu.cfs_quota_us" {
            quota
        } else {
            period
        };
        assert!(
            e.contains(&leaf.join(bad).display().to_string()),
            "{bad}: {e}"
        );
        assert!(e.contains(&format!("{content:?}")), "{e}");
    }
}

#[test]
fn v1_quota_without_a_period_file_is_no_limit_and_minus_one_is_none() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    std::fs::create_dir_all(r.join("proc/self")).unwrap();
    std::fs::create_dir_all(r.join("proc/1")).unwrap();
    let leaf = r.join("sys/fs/cgroup/cpu/k");
    std::fs::create_dir_all(&leaf).unwrap();
    std::fs::write(
        r.join("proc/self/mountinfo"),
        "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n",
    )
    .unwrap();
    std::fs::write(r.join("proc/1/cgroup"), "1:cpu:/k\n").unwrap();
    std::fs::write(leaf.join("cpu.cfs_quota_us"), "50000\n").unwrap();
    assert_eq!(cgroup_cpu_quota(r, Process::Pid(1)).unwrap(), None);
    std::fs::write(leaf.join("cpu.cfs_period_us"), "100000\n").unwrap();
    assert_eq!(cgroup_cpu_quota(r, Process::Pid(1)).unwrap(), Some(0.5));
    std::fs::write(leaf.join("cpu.cfs_quota_us"), "-1\n").unwrap();
    assert_eq!(cgroup_cpu_quota(r, Process::Pid(1)).unwrap(), None);
}

#[test]
fn bad_proc_cgroup_and_mountinfo_lines_are_named_and_quoted() {
    let t = v2_tree();
    let r = t.path();
    std::fs::write(r.join("proc/1/cgroup"), "0::/a/b\nnot a cgroup line\n").unwrap();
    let e = err(r);
    assert!(e.contains("proc/1/cgroup"), "{e}");
    assert!(e.contains("line 2"), "{e}");
    assert!(e.contains("\"not a cgroup line\""), "{e}");

    let t = v2_tree();
    let r = t.path();
    std::fs::write(
        r.join("proc/self/mountinfo"),
        "30 22 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n31 30 0:27 / /x rw no-separator\n",
    )
    .unwrap();
    let e = err(r);
    assert!(e.contains("proc/self/mountinfo"), "{e}");
    assert!(e.contains("\"31 30 0:27 / /x rw no-separator\""), "{e}");
}

#[test]
fn a_vanished_process_is_an_io_error_naming_its_cgroup_file() {
    let t = v2_tree();
    let e = cgroup_cpu_quota(t.path(), Process::Pid(77)).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    assert!(e.to_string().contains("proc/77/cgroup"), "{e}");
}

#[test]
fn live_machine_quota_and_mask() {
    let q = cgroup_cpu_quota(Path::new("/"), Process::Current);
    assert!(q.is_ok(), "{q:?}");
    if let Ok(Some(cpus)) = q {
        assert!(cpus > 0.0 && cpus.is_finite(), "{cpus}");
    }
    let mask = process_mask(Path::new("/"), Process::Current).unwrap();
    let direct = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
    let n = (0..nix::sched::CpuSet::count())
        .filter(|&c| direct.is_set(c).unwrap_or(false))
        .count();
    assert_eq!(mask.len(), n);
    // Another pid's mask (our own, by number) agrees with the kernel's status file.
    let by_pid = process_mask(Path::new("/"), Process::Pid(std::process::id())).unwrap();
    assert_eq!(by_pid, mask);
}
