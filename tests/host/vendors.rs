//! AMD and Intel GPUs through the vendor seam, on fake sysfs: the MI300-style
//! host `tests/fixtures/synthetic/host-mi300-xcp` (a whole GPU, and a GPU in four partitions
//! whose `amdgpu_xcp_*` platform devices map back to it through the kfd topology, one
//! partition no topology node lists) and the Intel host `host-intel-vf` (two PFs with two
//! SR-IOV VFs each), given as ROCm's and Intel's device plugins give them (`linux.devices`:
//! `/dev/kfd`, `/dev/dri/cardN`, `/dev/dri/renderDN`), through `explain` and the hook.

use std::path::{Path, PathBuf};
use std::process::Command;

use common::fakehost::run_hook;
use common::fakehost::{FakeHost, PID};
use cpuplan_hook::hook::Report;
use serde_json::{json, Value};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/synthetic")
        .join(name)
}

/// A char device of `linux.devices`.
fn dev(path: &str, major: u32, minor: u32) -> Value {
    json!({"path": path, "type": "c", "major": major, "minor": minor})
}

fn render(minor: u32) -> Value {
    dev(&format!("/dev/dri/renderD{minor}"), 226, minor)
}

fn card(minor: u32) -> Value {
    dev(&format!("/dev/dri/card{minor}"), 226, minor)
}

/// ROCm's device plugin always adds `/dev/kfd` (235:0 on the fixture host).
fn kfd() -> Value {
    dev("/dev/kfd", 235, 0)
}

/// A fake host whose topology is fixture `name` (16 CPUs), its container allowed them all with
/// a quota of 2 CPUs, `step_thread_core auto`, and `devices` in `linux.devices`.
fn host(name: &str, devices: Vec<Value>) -> FakeHost {
    let mut h = FakeHost::new();
    h.hook["topology_root"] = json!(fixture(name));
    h.hook["step_thread_core"] = json!("auto");
    std::fs::write(
        h.file(&format!("proc/{PID}/status")),
        "Name:\tsh\nCpus_allowed_list:\t0-15\n",
    )
    .unwrap();
    std::fs::write(h.file("sys/fs/cgroup/cpuset/ctr/cpuset.cpus"), "0-15\n").unwrap();
    std::fs::write(
        h.file("sys/fs/cgroup/cpu,cpuacct/ctr/cpu.cfs_quota_us"),
        "200000\n",
    )
    .unwrap();
    h.spec["linux"]["devices"] = json!(devices);
    h
}

fn hook(h: &FakeHost) -> Report {
    let (state, cfg) = h.written();
    let r = run_hook(Some("createRuntime"), state.as_bytes(), &cfg)
        .expect("the hook ran")
        .expect("a report");
    assert_eq!(r.problem, None);
    r
}

/// `cpuplan explain ARGS --bundle B --config C` on `h` (written first): its stdout.
fn explain(h: &FakeHost, args: &[&str]) -> String {
    let (_, cfg) = h.written();
    let out = Command::new(env!("CARGO_BIN_EXE_cpuplan"))
        .arg("--config")
        .arg(&cfg)
        .arg("explain")
        .args(args)
        .arg("--bundle")
        .arg(h.bundle())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Node 0's CPUs and node 1's on both fixture hosts.
const NODE0: &str = "0-3,8-11";
const NODE1: &str = "4-7,12-15";

#[test]
fn an_amd_partition_is_planned_on_its_pci_gpu_and_narrowed_to_its_node() {
    // Partition amdgpu_xcp_1 (card3, renderD131) of GPU 0000:9d:00.0 on node 1.
    let h = host("host-mi300-xcp", vec![kfd(), card(3), render(131)]);
    let r = hook(&h);
    assert_eq!(r.plan.inputs.gpus, ["0000:9d:00.0"]);
    assert_eq!(h.cpuset(), NODE1);
    let notes = r.plan.inputs.gpu_notes.join("\n");
    assert!(
        notes.contains(
            "/dev/dri/renderD131 (226:131) is partition amdgpu_xcp_1 of GPU 0000:9d:00.0"
        ),
        "{notes}"
    );
    // explain draws the same plan, and says where the partition went.
    let text = explain(&h, &[]);
    assert!(
        text.contains("is partition amdgpu_xcp_1 of GPU 0000:9d:00.0"),
        "{text}"
    );
    let doc: Value = serde_json::from_str(&explain(&h, &["--json"])).unwrap();
    assert_eq!(doc["inputs"]["gpus"], json!(["0000:9d:00.0"]));
    assert_eq!(doc["inputs"]["cpuset"], NODE1);
    // The whole GPU on node 0, by its own PCI function.
    let h = host("host-mi300-xcp", vec![kfd(), card(0), render(128)]);
    let r = hook(&h);
    assert_eq!(r.plan.inputs.gpus, ["0000:1b:00.0"]);
    assert_eq!(h.cpuset(), NODE0);
    assert!(
        r.plan.inputs.gpu_notes.is_empty(),
        "{:?}",
        r.plan.inputs.gpu_notes
    );
}

#[test]
fn two_partitions_of_one_gpu_are_two_servers_on_it_and_the_second_pins_nothing() {
    let a = host("host-mi300-xcp", vec![kfd(), render(130)]);
    let ra = hook(&a);
    assert_eq!(ra.plan.inputs.gpus, ["0000:9d:00.0"]);
    assert!(
        !ra.plan.plan.why.contains("held by"),
        "{}",
        ra.plan.plan.why
    );
    // Another live container (pid 4243, as tests/host/hook.rs makes one) on partition amdgpu_xcp_2.
    let mut b = a;
    let other = PID + 1;
    for f in ["cgroup", "status", "stat"] {
        let text = std::fs::read_to_string(b.file(&format!("proc/{PID}/{f}"))).unwrap();
        let to = b.file(&format!("proc/{other}/{f}"));
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::write(to, text.replace(&PID.to_string(), &other.to_string())).unwrap();
    }
    std::fs::create_dir_all(b.file(&format!("proc/{other}/ns"))).unwrap();
    std::os::unix::fs::symlink("mnt:[4026532998]", b.file(&format!("proc/{other}/ns/mnt")))
        .unwrap();
    std::os::unix::fs::symlink("/", b.file(&format!("proc/{other}/root"))).unwrap();
    b.spec["linux"]["devices"] = json!([kfd(), render(132)]);
    let (_, cfg) = b.written();
    // Its own bundle and rootfs (a rootfs directory is planned for by one container at a time).
    let bundle2 = b.dir.path().join("bundle2");
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(b.bundle())
        .arg(&bundle2)
        .status()
        .unwrap();
    assert!(copied.success());
    let state = json!({"ociVersion": "1.0.2", "id": "ctr2", "status": "creating", "pid": other, "bundle": bundle2});
    let rb = run_hook(Some("createRuntime"), state.to_string().as_bytes(), &cfg)
        .unwrap()
        .unwrap();
    assert_eq!(rb.plan.inputs.gpus, ["0000:9d:00.0"]);
    let why = &rb.plan.plan.why;
    assert!(
        why.contains("GPU 0000:9d:00.0 is held by another container") && why.contains("partition"),
        "{why}"
    );
    assert!(rb.plan.plan.workers.iter().all(Option::is_none));
}

#[test]
fn an_amd_partition_no_topology_places_is_a_note_never_silence_or_a_problem() {
    // amdgpu_xcp_3 (renderD133): no kfd node lists it. It names no GPU, says so, and the
    // container still gets its plan (the thread env), under deny too.
    let mut h = host("host-mi300-xcp", vec![kfd(), render(133)]);
    h.hook["on_error"] = json!("deny");
    let r = hook(&h);
    assert!(r.plan.inputs.gpus.is_empty());
    let notes = r.plan.inputs.gpu_notes.join("\n");
    assert!(
        notes.contains("is partition amdgpu_xcp_3, not placed on a PCI GPU")
            && notes.contains("drm_render_minor 133"),
        "{notes}"
    );
    let env = h.plan_file("plan.env").unwrap();
    assert!(env.contains("OMP_NUM_THREADS='2'"), "{env}");
    assert!(explain(&h, &[]).contains("is partition amdgpu_xcp_3"));
}

#[test]
fn an_intel_vf_is_a_gpu_of_its_own_narrowed_to_its_own_node() {
    // The second VF of the node-1 PF (0000:9a:00.2: card5, renderD133), and its by-path twin.
    let by_path = dev("/dev/dri/by-path/pci-0000:9a:00.2-render", 226, 133);
    let h = host("host-intel-vf", vec![card(5), render(133), by_path]);
    let r = hook(&h);
    assert_eq!(r.plan.inputs.gpus, ["0000:9a:00.2"]);
    assert_eq!(h.cpuset(), NODE1);
    // The first VF of the node-0 PF, through explain.
    let h = host("host-intel-vf", vec![card(1), render(129)]);
    let doc: Value = serde_json::from_str(&explain(&h, &["--json"])).unwrap();
    assert_eq!(doc["inputs"]["gpus"], json!(["0000:4d:00.1"]));
    assert_eq!(doc["inputs"]["cpuset"], NODE0);
}
