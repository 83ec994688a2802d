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

/// One systemd test at a time: each starts its own private bus and fake systemd (the hook runs
/// in process one at a time anyway: `common::fakehost::run_hook`).
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

/// A private D-Bus bus (the machine's `dbus-daemon`, a config of its own) listening where the
/// hook looks for the system bus of the host under its `root`
/// (`<root>/run/dbus/system_bus_socket`), with a fake systemd on it: a connection that owns
/// `org.freedesktop.systemd1` and records every method call it gets. It answers
/// `SetUnitProperties` as systemd does (an empty return), or only the first `answer` of them,
/// leaving the rest unanswered.
struct PrivateBus {
    daemon: std::process::Child,
    calls: std::sync::Arc<std::sync::Mutex<Vec<Call>>>,
}

/// One method call the fake systemd got: its member, and for `SetUnitProperties` the unit, the
/// runtime flag and the `AllowedCPUs` bitmask.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Call {
    member: String,
    unit: String,
    runtime: bool,
    allowed_cpus: Option<Vec<u8>>,
}

impl PrivateBus {
    fn start(root: &Path, answer: usize) -> PrivateBus {
        assert!(
            std::env::var_os("DBUS_SYSTEM_BUS_ADDRESS").is_none(),
            "DBUS_SYSTEM_BUS_ADDRESS is set: the hook would call that bus, not the test's"
        );
        let sock = root.join("run/dbus/system_bus_socket");
        std::fs::create_dir_all(sock.parent().unwrap()).unwrap();
        let conf = root.join("run/dbus/test-bus.conf");
        std::fs::write(
            &conf,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"#,
                sock.display()
            ),
        )
        .unwrap();
        let mut daemon = std::process::Command::new("dbus-daemon")
            .arg(format!("--config-file={}", conf.display()))
            .args(["--nofork", "--nopidfile", "--print-address"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run dbus-daemon (Debian's dbus-daemon package)");
        // It prints its address once it listens.
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(daemon.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        if line.trim().is_empty() {
            let _ = daemon.kill();
            let out = daemon.wait_with_output().unwrap();
            panic!(
                "dbus-daemon did not start: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let calls = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (ready, up) = std::sync::mpsc::channel();
        let addr = line.trim().to_string();
        let rec = calls.clone();
        std::thread::spawn(move || {
            let r = zbus::block_on(fake_systemd(addr, rec, answer, ready.clone()));
            if let Err(e) = r {
                let _ = ready.send(Err(e.to_string()));
            }
        });
        let bus = PrivateBus { daemon, calls };
        match up.recv_timeout(std::time::Duration::from_secs(30)) {
            Ok(Ok(())) => bus,
            Ok(Err(e)) => panic!("the fake systemd did not start: {e}"),
            Err(e) => panic!("the fake systemd did not start: {e}"),
        }
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }
}

impl Drop for PrivateBus {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

/// The fake systemd's loop: owns the name, records each call, answers the first `answer`
/// `SetUnitProperties` calls; ends when the bus goes.
async fn fake_systemd(
    addr: String,
    calls: std::sync::Arc<std::sync::Mutex<Vec<Call>>>,
    answer: usize,
    ready: std::sync::mpsc::Sender<Result<(), String>>,
) -> zbus::Result<()> {
    use zbus::export::futures_core::Stream;
    let conn = zbus::connection::Builder::address(addr.as_str())
        .build()
        .await?;
    conn.request_name("org.freedesktop.systemd1").await?;
    let mut stream = zbus::MessageStream::from(&conn);
    let _ = ready.send(Ok(()));
    let mut answered = 0;
    loop {
        let next = std::future::poll_fn(|cx| std::pin::Pin::new(&mut stream).poll_next(cx)).await;
        let Some(Ok(msg)) = next else {
            return Ok(());
        };
        let header = msg.header();
        if header.message_type() != zbus::message::Type::MethodCall {
            continue;
        }
        let member = header.member().map(|m| m.to_string()).unwrap_or_default();
        let mut call = Call {
            member: member.clone(),
            unit: String::new(),
            runtime: false,
            allowed_cpus: None,
        };
        if member == "SetUnitProperties" {
            type Props = Vec<(String, zbus::OwnedVariant)>;
            let (unit, runtime, props): (String, bool, Props) = msg.body().deserialize()?;
            call.unit = unit;
            call.runtime = runtime;
            call.allowed_cpus = props
                .into_iter()
                .find(|(k, _)| k == "AllowedCPUs")
                .and_then(|(_, v)| Vec::<u8>::try_from(v).ok());
        }
        calls.lock().unwrap().push(call);
        if member == "SetUnitProperties" && answered < answer {
            answered += 1;
            conn.reply(&header, &()).await?;
        }
    }
}

/// The layouts where the container's cgroup sits below a unit that is not its own, each with
/// the `cgroupsPath` its engine gave and the unit the spec names.
const BELOW_ANOTHER_UNIT: &[(&str, &str, &str)] = &[
    // containerd with `SystemdCgroup = false` passing kubelet's systemd form to runc's cgroupfs
    // driver, which takes it as a path below its own cgroup (here, a shim's below the service).
    (
        "system.slice/containerd.service/kubepods-burstable-pod0f2a.slice:cri-containerd:h6-ctr",
        "kubepods-burstable-pod0f2a.slice:cri-containerd:h6-ctr",
        "cri-containerd-h6-ctr.scope",
    ),
    // runc run by hand from a login session, its cgroupfs driver given the systemd form.
    (
        "user.slice/user-1000.slice/session-3.scope/system.slice:cpuplan:h6-ctr",
        "system.slice:cpuplan:h6-ctr",
        "cpuplan-h6-ctr.scope",
    ),
    // The same from a user's service manager.
    (
        "user.slice/user-1000.slice/user@1000.service/app.slice/system.slice:cpuplan:h6-ctr",
        "system.slice:cpuplan:h6-ctr",
        "cpuplan-h6-ctr.scope",
    ),
    // rootless podman: the scope is the user manager's, not the system bus's.
    (
        "user.slice/user-1000.slice/user@1000.service/user.slice/libpod-h6-ctr.scope/container",
        "user.slice:libpod:h6-ctr",
        "libpod-h6-ctr.scope",
    ),
    // An engine nested in another container's scope, with either driver.
    (
        "system.slice/docker-0a1b2c.scope/system.slice:docker:h6-ctr",
        "system.slice:docker:h6-ctr",
        "docker-h6-ctr.scope",
    ),
    (
        "system.slice/docker-0a1b2c.scope/system.slice/docker-h6-ctr.scope",
        "system.slice:docker:h6-ctr",
        "docker-h6-ctr.scope",
    ),
];

#[test]
fn a_cgroup_below_another_unit_gets_no_systemd_call_only_its_file() {
    let _one_at_a_time = serial();
    for &(cg, cgroups_path, named) in BELOW_ANOTHER_UNIT {
        let mut h = host(cgroups_path);
        let leaf = plant_v2(&mut h, cg, &[(cg, "50000 100000")]);
        let bus = PrivateBus::start(&h.dir.path().join("root"), usize::MAX);
        let r = h.allow(Some(PID));
        let log = log(&h);
        assert_eq!(r.problem, None, "{cg}: {log}");
        // The container is narrowed in its own cgroup's file, as on any cgroupfs node.
        assert_eq!(r.cpuset_file, Some(leaf.join("cpuset.cpus")), "{cg}");
        assert_eq!(
            std::fs::read_to_string(leaf.join("cpuset.cpus")).unwrap(),
            "1",
            "{cg}"
        );
        // No call reached systemd: not the parent unit, not any.
        assert_eq!(bus.calls(), [], "{cg}: {log}");
        // One line says so, naming the unit and the cgroup.
        let said: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("AllowedCPUs not set on"))
            .collect();
        assert_eq!(said.len(), 1, "{cg}: {log}");
        assert!(
            said[0].contains(&format!("AllowedCPUs not set on {named}"))
                && said[0].contains(&format!("{cg} is not that unit's cgroup")),
            "{cg}: {}",
            said[0]
        );
    }
}

#[test]
fn the_runtimes_own_unit_gets_allowed_cpus_on_the_bus() {
    let _one_at_a_time = serial();
    let pod = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f2a.slice";
    for (cg, cgroups_path, unit) in [
        // runc's scope.
        (
            "system.slice/cpuplan-h6-ctr.scope".to_string(),
            "system.slice:cpuplan:h6-ctr",
            "cpuplan-h6-ctr.scope",
        ),
        // crun's `container` child of it.
        (
            "system.slice/cpuplan-h6-ctr.scope/container".to_string(),
            "system.slice:cpuplan:h6-ctr",
            "cpuplan-h6-ctr.scope",
        ),
        // kubelet's pod slice with containerd's systemd driver.
        (
            format!("{pod}/cri-containerd-h6-ctr.scope"),
            "kubepods-burstable-pod0f2a.slice:cri-containerd:h6-ctr",
            "cri-containerd-h6-ctr.scope",
        ),
    ] {
        let mut h = host(cgroups_path);
        let leaf = plant_v2(&mut h, &cg, &[(cg.as_str(), "50000 100000")]);
        let bus = PrivateBus::start(&h.dir.path().join("root"), usize::MAX);
        let r = h.allow(Some(PID));
        let log = log(&h);
        assert_eq!(r.problem, None, "{cg}: {log}");
        assert_eq!(r.cpuset_file, Some(leaf.join("cpuset.cpus")), "{cg}");
        // One call, on the container's own unit: CPU 1, at runtime.
        assert_eq!(
            bus.calls(),
            [Call {
                member: "SetUnitProperties".into(),
                unit: unit.into(),
                runtime: true,
                allowed_cpus: Some(vec![0b10]),
            }],
            "{cg}: {log}"
        );
        assert!(
            log.contains(&format!("set AllowedCPUs=1 on {unit} through systemd")),
            "{cg}: {log}"
        );
        assert!(!log.contains("AllowedCPUs not set"), "{cg}: {log}");
    }
}

#[test]
fn the_units_restore_waits_what_the_registration_leaves() {
    let _one_at_a_time = serial();
    let id = "h6-ctr";
    let mut h = host(&format!("system.slice:cpuplan:{id}"));
    let scope = format!("system.slice/cpuplan-{id}.scope");
    let leaf = plant_v2(&mut h, &scope, &[(scope.as_str(), "50000 100000")]);
    // This hook's registration (the test binary is the hook's executable here) gives it 2 s.
    let me = std::env::current_exe().unwrap();
    h.spec["hooks"] = json!({"createRuntime": [{"path": me, "timeout": 2}]});
    // The plan files cannot be written (a directory where plan.json goes): the cpuset is put
    // back, and so is the unit's AllowedCPUs, which systemd here takes and then never answers.
    let inside = h.dir.path().join("croot");
    let rootfs = h.rootfs();
    let blocker = inside
        .join(rootfs.strip_prefix("/").unwrap())
        .join("run/cpuplan/plan.json");
    std::fs::create_dir_all(blocker.join("in-the-way")).unwrap();
    let bus = PrivateBus::start(&h.dir.path().join("root"), 1);
    let _ = h.run(Some(PID));
    let log = log(&h);
    assert!(log.contains("cpuset put back to"), "{log}");
    assert_eq!(
        std::fs::read_to_string(leaf.join("cpuset.cpus")).unwrap(),
        "\n",
        "the file is put back"
    );
    let calls = bus.calls();
    let masks: Vec<_> = calls
        .iter()
        .map(|c| (c.unit.as_str(), &c.allowed_cpus))
        .collect();
    let unit = format!("cpuplan-{id}.scope");
    assert_eq!(
        masks,
        [
            (unit.as_str(), &Some(vec![0b10])),
            // What the scope had: nothing of its own (it inherits), so the property is cleared.
            (unit.as_str(), &Some(vec![])),
        ],
        "{log}"
    );
    // The unanswered restore waited what the 2 s registration had left less the reserve
    // (at most 1500 ms), not the full bound of 2000 ms.
    let waited: u64 = log
        .lines()
        .find_map(|l| {
            let rest = l.split("cannot put the unit's AllowedCPUs back: ").nth(1)?;
            rest.split("did not answer within ")
                .nth(1)?
                .split(" ms")
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no unanswered restore logged: {log}"));
    assert!(waited <= 1500, "waited {waited} ms: {log}");
}
