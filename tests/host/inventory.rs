//! The host inventory (`cpuplan::inventory`) as the hook uses it: plans with and without it are
//! the same for every fixture container of `tests/host/pipeline.rs`; a hot-plugged GPU, a CPU taken
//! offline and a driver reload each invalidate it, and the next plan sees the change; a hostile
//! inventory file (another owner, mode 0666, a symlink, a FIFO, truncated, 16 MiB) is never used.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::fakehost::FakeHost;
use common::pipeline_cases::{cases, host};
use cpuplan::inventory::{format, store, HostInventory};
use serde_json::{json, Value};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cpuplan"))
}

/// `explain --json` of the fake host's bundle, with the inventory or without it, and the
/// line explain prints on stderr about it.
fn explain(cfg: &Path, bundle: &Path, inventory: bool) -> (Value, String) {
    let mut cmd = bin();
    cmd.arg("--config")
        .arg(cfg)
        .args(["explain", "--json", "--bundle"])
        .arg(bundle);
    if !inventory {
        cmd.arg("--no-inventory");
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (serde_json::from_slice(&out.stdout).unwrap(), stderr)
}

/// The hook binary's createRuntime on the fake host (its own process, so its own log file):
/// the plan.json it wrote.
fn hook(h: &FakeHost) -> Value {
    let (state, cfg) = h.written();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cpuplan-hook"))
        .arg("--config")
        .arg(&cfg)
        .args(["hook", "createRuntime"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(state.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&h.plan_file("plan.json").unwrap()).unwrap()
}

fn log(h: &FakeHost) -> String {
    std::fs::read_to_string(h.dir.path().join("hook.log")).unwrap_or_default()
}

fn inventory_dir(h: &FakeHost) -> PathBuf {
    PathBuf::from(h.hook["inventory_dir"].as_str().unwrap())
}

/// The inventory file of the fake host's roots.
fn inventory_file(h: &FakeHost) -> PathBuf {
    let root = PathBuf::from(h.hook["root"].as_str().unwrap());
    let topo = PathBuf::from(h.hook["topology_root"].as_str().unwrap());
    store::file_in(&inventory_dir(h), &root, &topo)
}

#[test]
fn plans_with_and_without_the_inventory_are_the_same_for_every_pipeline_container() {
    let all = cases();
    assert!(all.len() >= 20);
    for c in &all {
        let mut h = host(c);
        // The inventory's write is logged at debug (once a boot).
        h.hook["log_level"] = json!("debug");
        let (_, cfg) = h.written();
        let (fresh, said) = explain(&cfg, &h.bundle(), false);
        assert!(said.contains("--no-inventory"), "{}: {said}", c.name);
        // The first start reads the host and writes the inventory; the second uses the file.
        let first = hook(&h);
        assert!(
            log(&h).contains("host inventory read and written"),
            "{}: {}",
            c.name,
            log(&h)
        );
        assert!(inventory_file(&h).is_file(), "{}", c.name);
        let second = hook(&h);
        let (explained, said) = explain(&cfg, &h.bundle(), true);
        assert!(
            said.contains("used (stamp and boot match)"),
            "{}: {said}",
            c.name
        );
        assert_eq!(first, second, "{}: hook, inventory written vs used", c.name);
        assert_eq!(fresh, explained, "{}: explain without vs with", c.name);
        let mut hooked = second.clone();
        hooked.as_object_mut().unwrap().remove("container");
        let mut shown = explained.clone();
        shown.as_object_mut().unwrap().remove("container");
        assert_eq!(hooked, shown, "{}: hook with it vs explain without", c.name);
    }
}

/// A fake host on a copy of the example host (which the test then changes), the container
/// given `/dev/nvidia<minor>`, `step_thread_core auto`, no quota beyond 16 CPUs.
fn changing_host(t: &Path, minor: u32) -> FakeHost {
    let topo = t.join("topology");
    let copied = Command::new("cp")
        .arg("-a")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/host"))
        .arg(&topo)
        .status()
        .unwrap();
    assert!(copied.success());
    let mut h = FakeHost::new();
    h.hook["topology_root"] = json!(topo);
    h.hook["step_thread_core"] = json!("auto");
    h.hook["log_level"] = json!("debug");
    h.spec["linux"]["resources"] = json!({"cpu": {"quota": 1_600_000, "period": 100_000}});
    h.gpus(&[minor]);
    h
}

/// The plan of the same container on a host read afresh (another, empty inventory directory).
fn fresh_plan(h: &mut FakeHost) -> Value {
    let dir = inventory_dir(h);
    h.hook["inventory_dir"] = json!(h.dir.path().join("fresh-inventory"));
    let _ = std::fs::remove_dir_all(h.dir.path().join("fresh-inventory"));
    let plan = hook(h);
    h.hook["inventory_dir"] = json!(dir);
    plan
}

fn write(p: &Path, text: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

#[test]
fn a_hot_plugged_gpu_invalidates_the_inventory() {
    let t = tempfile::tempdir().unwrap();
    let mut h = changing_host(t.path(), 0);
    let before = hook(&h);
    assert!(log(&h).contains("read and written"));
    let f = t.path().join("topology/sys/bus/pci/devices/0000:1c:00.0");
    write(&f.join("class"), "0x030200\n");
    write(&f.join("vendor"), "0x10de\n");
    write(&f.join("numa_node"), "0\n");
    write(&f.join("local_cpulist"), "0-55,112-167\n");
    let after = hook(&h);
    assert!(
        log(&h).contains("the stamp changed: PCI devices changed (17 -> 18 entries)"),
        "{}",
        log(&h)
    );
    assert_ne!(
        before["why"], after["why"],
        "the new GPU is a peer on node 0"
    );
    assert!(
        after["why"].as_str().unwrap().contains("9 host GPUs"),
        "{}",
        after["why"]
    );
    assert_eq!(after, fresh_plan(&mut h));
}

#[test]
fn a_cpu_taken_offline_invalidates_the_inventory() {
    let t = tempfile::tempdir().unwrap();
    let mut h = changing_host(t.path(), 0);
    let before = hook(&h);
    // CPU 112 (CPU 0's sibling) goes offline: the kernel drops it from the online list, from
    // its sibling's list and from every mask.
    let cpu = t.path().join("topology/sys/devices/system/cpu");
    write(&cpu.join("online"), "0-111,113-223\n");
    write(&cpu.join("cpu0/topology/thread_siblings_list"), "0\n");
    write(
        &h.file(&format!("proc/{}/status", common::fakehost::PID)),
        "Name:\tsh\nCpus_allowed_list:\t0-111,113-223\n",
    );
    let after = hook(&h);
    assert!(
        log(&h).contains("the stamp changed: online CPUs 0-223 -> 0-111,113-223"),
        "{}",
        log(&h)
    );
    assert_ne!(before, after);
    assert_eq!(after, fresh_plan(&mut h));
    assert!(!after.to_string().contains("0,112"), "{after}");
}

#[test]
fn a_driver_reload_invalidates_the_inventory() {
    let t = tempfile::tempdir().unwrap();
    let mut h = changing_host(t.path(), 0);
    let before = hook(&h);
    // The driver comes back with the minors of its first two GPUs swapped: a new directory.
    let gpus = t.path().join("topology/proc/driver/nvidia/gpus");
    let new = t.path().join("topology/proc/driver/nvidia/gpus.new");
    assert!(Command::new("cp")
        .arg("-a")
        .arg(&gpus)
        .arg(&new)
        .status()
        .unwrap()
        .success());
    for (address, minor) in [("0000:18:00.0", 1), ("0000:2a:00.0", 0)] {
        let info = new.join(address).join("information");
        let text = std::fs::read_to_string(&info).unwrap();
        let text: String = text
            .lines()
            .map(|l| match l.starts_with("Device Minor:") {
                true => format!("Device Minor: \t {minor}\n"),
                false => format!("{l}\n"),
            })
            .collect();
        std::fs::write(&info, text).unwrap();
    }
    std::fs::remove_dir_all(&gpus).unwrap();
    std::fs::rename(&new, &gpus).unwrap();
    let after = hook(&h);
    assert!(
        log(&h).contains("the stamp changed: the NVIDIA driver's GPUs directory changed"),
        "{}",
        log(&h)
    );
    assert_eq!(
        before["inputs"]["gpus"],
        json!(["0000:18:00.0"]),
        "{before}"
    );
    assert_eq!(after["inputs"]["gpus"], json!(["0000:2a:00.0"]), "{after}");
    assert_eq!(after, fresh_plan(&mut h));
}

/// How a test plants a hostile inventory file at a path.
type Plant<'a> = Box<dyn Fn(&Path) + 'a>;

#[test]
fn a_hostile_inventory_is_never_used() {
    assert!(nix::unistd::geteuid().is_root(), "the tests run as root");
    let t = tempfile::tempdir().unwrap();
    let mut h = changing_host(t.path(), 0);
    let honest = hook(&h);
    let path = inventory_file(&h);
    // A lie that would be used if it were trusted: /dev/nvidia0 as another GPU.
    let mut lie: HostInventory = format::decode(&std::fs::read(&path).unwrap()).unwrap();
    lie.nvidia.swap(0, 1);
    let (a, b) = (lie.nvidia[0].minor, lie.nvidia[1].minor);
    lie.nvidia[0].minor = b;
    lie.nvidia[1].minor = a;
    lie.nvidia.sort_by(|x, y| x.address.cmp(&y.address));
    let lie = format::encode(&lie);
    // Trusted as root's 0600 file, the lie would be used: the test's lie is a real one.
    std::fs::write(&path, &lie).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let lied = hook(&h);
    assert_ne!(lied["inputs"]["gpus"], honest["inputs"]["gpus"], "{lied}");
    let elsewhere = t.path().join("elsewhere");
    std::fs::write(&elsewhere, &lie).unwrap();
    let plant: Vec<(&str, Plant)> = vec![
        (
            "uid 1000",
            Box::new(|p: &Path| {
                std::fs::write(p, &lie).unwrap();
                nix::unistd::chown(p, Some(nix::unistd::Uid::from_raw(1000)), None).unwrap();
            }),
        ),
        (
            "mode 0666",
            Box::new(|p: &Path| {
                std::fs::write(p, &lie).unwrap();
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o666)).unwrap();
            }),
        ),
        (
            "symbolic link",
            Box::new(|p: &Path| std::os::unix::fs::symlink(&elsewhere, p).unwrap()),
        ),
        (
            "not a regular file",
            Box::new(|p: &Path| {
                nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap()
            }),
        ),
        (
            "truncated",
            Box::new(|p: &Path| std::fs::write(p, &lie[..lie.len() - 10]).unwrap()),
        ),
        (
            "limit",
            Box::new(|p: &Path| std::fs::write(p, vec![b'{'; 16 << 20]).unwrap()),
        ),
    ];
    for (why, make) in &plant {
        let _ = std::fs::remove_file(&path);
        make(&path);
        std::fs::write(h.dir.path().join("hook.log"), "").unwrap();
        let plan = hook(&h);
        assert_eq!(plan, honest, "{why}: the plan is a fresh read's");
        let logged = log(&h);
        assert!(
            logged.contains("read again and written") && logged.contains(why),
            "{why}: {logged}"
        );
        let now = std::fs::symlink_metadata(&path).unwrap();
        assert!(now.is_file(), "{why}: replaced by a regular file");
    }
    assert_eq!(fresh_plan(&mut h), honest);
}

/// The `inventory:` line `explain` prints on stderr.
fn inventory_line(said: &str) -> String {
    said.lines()
        .find(|l| l.starts_with("inventory:"))
        .unwrap_or_else(|| panic!("no inventory line: {said}"))
        .to_string()
}

#[test]
fn explain_writes_no_inventory_and_says_the_same_twice_on_this_host() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("inventory");
    let cfg = t.path().join("hook.json");
    std::fs::write(&cfg, json!({ "inventory_dir": dir }).to_string()).unwrap();
    let bundle = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bundle");
    // This machine's own host (root /): explain looks, and writes nothing.
    let (alone, said) = explain(&cfg, &bundle, true);
    let line = inventory_line(&said);
    assert!(
        line.contains("not kept") && line.contains("there is none; a look writes nothing"),
        "{line}"
    );
    assert!(!dir.exists(), "explain made {}", dir.display());
    // `inventory` writes it as a start would; explain then uses it.
    let out = bin()
        .arg("--config")
        .arg(&cfg)
        .arg("inventory")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("read and written"),
        "{text}"
    );
    // Twice, the kernel's dentry and inode caches dropped between: sysfs and procfs then make
    // their directories' in-memory inodes anew, with new times, and a stamp over those times
    // saw "PCI devices changed (17 -> 17 entries)".
    let mut lines = Vec::new();
    for drop in [false, true] {
        if drop {
            std::fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
        }
        let (plan, said) = explain(&cfg, &bundle, true);
        assert_eq!(plan, alone, "the same plan with the file and without");
        lines.push(inventory_line(&said));
    }
    assert!(
        lines[0].contains("used (stamp and boot match)"),
        "{lines:?}"
    );
    assert_eq!(lines[0], lines[1]);
}
