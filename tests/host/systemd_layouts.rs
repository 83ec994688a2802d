//! The hook on planted cgroup v2 trees laid out as the systemd driver and crun lay them out:
//! crun's and podman's `container` child of the scope, a kubelet-style pod slice with its own
//! quota above the container's scope, and what is refused. The real runtimes on a real
//! cgroup v2 + systemd node are tests/vm_systemd.rs.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use common::fakehost::FakeHost;
use serde_json::{json, Value};

const PID: u32 = 4321;

/// Plants under `h`'s root a unified hierarchy at /sys/fs/cgroup with pid [`PID`] in `cg`,
/// every level from the root to `cg` with `cpuset.cpus.effective` 0-1, `cpuset.cpus` 0-1 (empty
/// at the leaf: it inherits) and the `cpu.max` that `quotas` gives (relative path → value;
/// `max 100000` elsewhere).
fn plant_v2(h: &mut FakeHost, cg: &str, quotas: &[(&str, &str)]) -> PathBuf {
    let r = h.dir.path().join("root");
    let w = |p: &Path, s: &str| {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, s).unwrap();
    };
    w(
        &r.join("proc/self/mountinfo"),
        "30 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw\n",
    );
    w(
        &r.join(format!("proc/{PID}/cgroup")),
        &format!("0::/{cg}\n"),
    );
    w(
        &r.join(format!("proc/{PID}/status")),
        "Name:\tsleep\nCpus_allowed_list:\t0-1\n",
    );
    w(
        &r.join(format!("proc/{PID}/stat")),
        &format!("{PID} (sleep) S 1 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 12345 0 0\n"),
    );
    let mount = r.join("sys/fs/cgroup");
    let mut dir = mount.clone();
    let mut rel = String::new();
    for c in std::iter::once("").chain(cg.split('/')) {
        if !c.is_empty() {
            dir.push(c);
            rel = if rel.is_empty() {
                c.to_string()
            } else {
                format!("{rel}/{c}")
            };
        }
        w(&dir.join("cgroup.controllers"), "cpuset cpu memory pids\n");
        if !c.is_empty() {
            let q = quotas
                .iter()
                .find(|(p, _)| *p == rel)
                .map_or("max 100000", |(_, q)| q);
            w(&dir.join("cpu.max"), &format!("{q}\n"));
            w(
                &dir.join("cpuset.cpus"),
                if rel == cg { "\n" } else { "0-1\n" },
            );
        }
        w(&dir.join("cpuset.cpus.effective"), "0-1\n");
    }
    std::fs::create_dir_all(r.join("proc/self/ns")).unwrap();
    symlink("mnt:[4026531840]", r.join("proc/self/ns/mnt")).unwrap();
    std::fs::create_dir_all(r.join(format!("proc/{PID}/ns"))).unwrap();
    symlink("mnt:[4026532999]", r.join(format!("proc/{PID}/ns/mnt"))).unwrap();
    // The container's root as /proc/<pid>/root shows it, the bundle's rootfs path inside it.
    let croot = h.dir.path().join("croot");
    std::fs::create_dir_all(croot.join(h.rootfs().strip_prefix("/").unwrap())).unwrap();
    symlink(&croot, r.join(format!("proc/{PID}/root"))).unwrap();
    h.hook["root"] = json!(r);
    mount.join(cg)
}

/// A container with GPU 0 (local to CPU 1 of the 2-CPU e2e host) and `cgroups_path`.
fn host(cgroups_path: &str) -> FakeHost {
    let mut h = FakeHost::bundle_only();
    h.gpu(0);
    h.spec["linux"]["cgroupsPath"] = json!(cgroups_path);
    h.hook["log_level"] = json!("debug");
    h
}

/// A plan file as the container sees it.
fn plan_file(h: &FakeHost, name: &str) -> Option<String> {
    let inside = h.dir.path().join("croot");
    let rootfs = h.rootfs();
    let p = inside
        .join(rootfs.strip_prefix("/").unwrap())
        .join("run/cpuplan")
        .join(name);
    std::fs::read_to_string(p).ok()
}

fn plan_json(h: &FakeHost) -> Value {
    serde_json::from_str(&plan_file(h, "plan.json").expect("plan.json written")).unwrap()
}

/// The hook's logger is the process's: a test that reads its log runs alone in this binary, or
/// another test's run would point the logger at its own file meanwhile.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

fn log(h: &FakeHost) -> String {
    std::fs::read_to_string(h.scratch("hook.log")).unwrap_or_default()
}

#[test]
fn crun_systemd_layout_the_container_child_of_the_scope_gets_the_plan() {
    let _one_at_a_time = serial();
    let id = "h6-ctr";
    let mut h = host(&format!("system.slice:cpuplan:{id}"));
    let leaf = plant_v2(
        &mut h,
        &format!("system.slice/cpuplan-{id}.scope/container"),
        &[(
            &format!("system.slice/cpuplan-{id}.scope/container"),
            "50000 100000",
        )],
    );
    let r = h.allow(Some(PID));
    assert_eq!(r.problem, None, "{}", log(&h));
    // Written where the processes are (the leaf), where it takes effect.
    assert_eq!(r.cpuset_file, Some(leaf.join("cpuset.cpus")));
    assert_eq!(
        std::fs::read_to_string(leaf.join("cpuset.cpus")).unwrap(),
        "1"
    );
    let plan = plan_json(&h);
    assert_eq!(plan["mask"], "1", "{plan}");
    assert_eq!(plan["inputs"]["quota"], 0.5, "{plan}");
    assert!(plan_file(&h, "plan.env")
        .unwrap()
        .contains("CPUPLAN_MASK='1'"));
    // No system bus under this root: the cgroup file alone, said in the log, and no refusal.
    let log = log(&h);
    assert!(
        log.contains("cpuset 1 written to the cgroup file only")
            && log.contains(&format!("cpuplan-{id}.scope")),
        "{log}"
    );
}

#[test]
fn podman_and_crun_cgroupfs_layouts() {
    let _one_at_a_time = serial();
    let id = "h6-ctr";
    // podman --cgroup-manager=systemd: machine.slice:libpod:<id>.
    let mut h = host(&format!("machine.slice:libpod:{id}"));
    let podman = format!("machine.slice/libpod-{id}.scope/container");
    let leaf = plant_v2(&mut h, &podman, &[(podman.as_str(), "50000 100000")]);
    let r = h.allow(Some(PID));
    assert_eq!(r.problem, None, "{}", log(&h));
    assert_eq!(r.cpuset_file, Some(leaf.join("cpuset.cpus")));
    // A cgroupfs path with the runtime's child below it: no systemd call at all.
    let mut h = host("/cpuplan/c1");
    let leaf = plant_v2(
        &mut h,
        "cpuplan/c1/container",
        &[("cpuplan/c1", "50000 100000")],
    );
    let r = h.allow(Some(PID));
    assert_eq!(r.problem, None, "{}", log(&h));
    assert_eq!(r.cpuset_file, Some(leaf.join("cpuset.cpus")));
    assert!(!log(&h).contains("AllowedCPUs"), "{}", log(&h));
    assert!(!log(&h).contains("cgroup file only"), "{}", log(&h));
}

#[test]
fn a_pid_two_levels_below_or_in_another_unit_is_refused() {
    let _one_at_a_time = serial();
    for cg in [
        "system.slice/cpuplan-h6-ctr.scope/container/deeper",
        "system.slice/sshd.service/container",
    ] {
        let mut h = host("system.slice:cpuplan:h6-ctr");
        let leaf = plant_v2(&mut h, cg, &[]);
        let e = h.deny(Some(PID));
        assert!(e.contains("is not the container's init"), "{cg}: {e}");
        assert_eq!(
            std::fs::read_to_string(leaf.join("cpuset.cpus")).unwrap(),
            "\n",
            "{cg}: nothing written"
        );
    }
}

#[test]
fn kubelet_pod_slice_quota_is_the_tightest_of_the_chain() {
    let _one_at_a_time = serial();
    let uid = "0f2a";
    let id = "h6-ctr";
    let pod = format!("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice");
    let scope = format!("{pod}/cri-containerd-{id}.scope");
    let mut h = host(&format!(
        "kubepods-burstable-pod{uid}.slice:cri-containerd:{id}"
    ));
    // The pod slice's CPUQuota (0.5 CPU) is tighter than the container's (1.5 CPUs).
    let leaf = plant_v2(
        &mut h,
        &scope,
        &[
            (pod.as_str(), "50000 100000"),
            (scope.as_str(), "150000 100000"),
        ],
    );
    let r = h.allow(Some(PID));
    assert_eq!(r.problem, None, "{}", log(&h));
    let plan = plan_json(&h);
    assert_eq!(plan["inputs"]["quota"], 0.5, "{plan}");
    assert_eq!(plan["mask"], "1", "{plan}");
    assert_eq!(r.cpuset_file, Some(leaf.join("cpuset.cpus")));
    // And the other way round: the container's own is the tighter.
    let mut h = host(&format!(
        "kubepods-burstable-pod{uid}.slice:cri-containerd:{id}"
    ));
    plant_v2(
        &mut h,
        &scope,
        &[
            (pod.as_str(), "400000 100000"),
            (scope.as_str(), "100000 100000"),
        ],
    );
    h.allow(Some(PID));
    assert_eq!(plan_json(&h)["inputs"]["quota"], 1.0);
}
