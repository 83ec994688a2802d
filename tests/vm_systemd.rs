//! A real cgroup v2 + systemd node: the static hook with runc and crun (systemd and cgroupfs
//! drivers) and podman (`--cgroup-manager=systemd`) in a Debian 12 guest under QEMU
//! (`tests/vm/cgroup2-vm.sh`), every container checked from inside at start and after
//! `systemctl daemon-reload`, `set-property` and the restart of an unrelated unit.
//!
//! One boot runs every check (`tests/vm/guest.sh`, results as JSON lines on the 9p share); each
//! test here asserts its own checks from those results, so a failure names its check. The
//! guest image is built on first use under `$CARGO_TARGET_DIR/vm/img-<hash of the recipe>`
//! (Debian's packages through the machine's own apt sources) and reused until the recipe
//! changes. Needs root and qemu-system-x86 + mmdebstrap (scripts/test.sh installs them).

extern crate cpuplan_test_support as common;

/// Fails this binary at exit when the host's real hook log changed while it ran
/// (`common::log_guard`): an ELF constructor, before `main` and any test thread.
#[used]
#[link_section = ".init_array"]
static LOG_GUARD: extern "C" fn() = common::log_guard::start;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;

use common::statics::{static_hook, target_dir, workspace_root};
use serde_json::Value;

/// What the guest reported: its checks (name → ok, detail) and its figures.
struct Results {
    checks: BTreeMap<String, (bool, String)>,
    facts: BTreeMap<String, String>,
    /// The guest's console and the run's output, for a failure's message.
    log: String,
}

/// The recipe's directory in the repo.
fn vm_dir() -> PathBuf {
    workspace_root().join("tests/vm")
}

/// The image directory: named for a hash of the recipe, so a changed recipe builds a new one.
fn image_dir() -> PathBuf {
    use sha2::{Digest, Sha256};
    let recipe = std::fs::read(vm_dir().join("cgroup2-vm.sh")).unwrap();
    let hash = Sha256::digest(&recipe);
    let hex: String = hash[..6].iter().map(|b| format!("{b:02x}")).collect();
    target_dir().join("vm").join(format!("img-{hex}"))
}

fn recipe(args: &[&str], envs: &[(&str, &Path)]) -> std::process::Output {
    let mut c = Command::new("bash");
    c.arg(vm_dir().join("cgroup2-vm.sh")).args(args);
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().expect("run tests/vm/cgroup2-vm.sh")
}

/// What the guest's one boot found ([`boot`]).
fn results() -> &'static Results {
    // One boot for the binary: a boot that fails fails every test with its cause, and is not
    // tried again by the next test (a `get_or_init` whose closure panics would run it again).
    static RESULTS: OnceLock<Result<Results, String>> = OnceLock::new();
    let r = RESULTS.get_or_init(|| {
        std::panic::catch_unwind(boot).map_err(|e| {
            e.downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "the boot panicked".into())
        })
    });
    r.as_ref()
        .unwrap_or_else(|e| panic!("the guest run failed: {e}"))
}

/// Builds the image when needed, boots the guest once with the static hook, and reads back
/// what `guest.sh` found.
fn boot() -> Results {
    let img = image_dir();
    if !img.join("rootfs.img").exists() {
        let t0 = Instant::now();
        let out = recipe(&["build"], &[("VM_DIR", &img)]);
        assert!(
            out.status.success(),
            "building the guest image failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("vm_systemd: image built in {} s", t0.elapsed().as_secs());
    }
    let share = tempfile::Builder::new()
        .prefix("share-")
        .tempdir_in(target_dir().join("vm"))
        .unwrap();
    let s = share.path();
    std::fs::copy(static_hook(), s.join("cpuplan-hook")).unwrap();
    std::fs::copy(vm_dir().join("guest.sh"), s.join("guest.sh")).unwrap();
    copy_tree(&common::runc::fixtures().join("e2e-host"), &s.join("topo"));
    let t0 = Instant::now();
    let out = {
        let mut c = Command::new("bash");
        c.arg(vm_dir().join("cgroup2-vm.sh"))
            .args(["run", "bash", "guest.sh"])
            .env("VM_DIR", &img)
            .env("VM_SHARE", s)
            .env("VM_TIMEOUT", "600");
        c.output().expect("run tests/vm/cgroup2-vm.sh")
    };
    let round_trip = t0.elapsed();
    let console = std::fs::read_to_string(img.join("last-console.log")).unwrap_or_default();
    let log = format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}\n--- console\n{console}\n--- hook log\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(s.join("hook.log")).unwrap_or_default()
    );
    let text = std::fs::read_to_string(s.join("results.jsonl"))
        .unwrap_or_else(|e| panic!("the guest wrote no results ({e}):\n{log}"));
    let mut r = Results {
        checks: BTreeMap::new(),
        facts: BTreeMap::new(),
        log,
    };
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).expect("a result line parses");
        if let Some(c) = v["check"].as_str() {
            let ok = v["ok"].as_bool().unwrap_or(false);
            r.checks
                .insert(c.into(), (ok, v["detail"].as_str().unwrap_or("").into()));
        } else if let Some(f) = v["fact"].as_str() {
            r.facts
                .insert(f.into(), v["value"].as_str().unwrap_or("").into());
        }
    }
    r.facts
        .insert("round_trip_ms".into(), round_trip.as_millis().to_string());
    // The figures, for the log of a CI run.
    for (k, v) in &r.facts {
        eprintln!("vm_systemd: {k} = {v}");
    }
    r
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let t = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &t);
        } else {
            std::fs::copy(e.path(), t).unwrap();
        }
    }
}

/// Asserts every check named `name` passed in the guest.
fn passed(names: &[String]) {
    let r = results();
    let mut bad = Vec::new();
    for n in names {
        match r.checks.get(n) {
            Some((true, _)) => {}
            Some((false, d)) => bad.push(format!("{n}: {d}")),
            None => bad.push(format!("{n}: not run")),
        }
    }
    assert!(
        bad.is_empty(),
        "failed in the guest:\n{}\n\n{}",
        bad.join("\n"),
        r.log
    );
}

/// The checks of a container under the systemd driver, at start and after each re-apply.
fn systemd_checks(name: &str) -> Vec<String> {
    let mut v = vec![format!("{name}: starts")];
    for when in ["start", "daemon-reload", "set-property", "restart-other"] {
        v.push(format!("{name}: {when}: cpus, quota and plan.env"));
        v.push(format!("{name}: {when}: AllowedCPUs"));
    }
    v.push(format!("{name}: set-property CPUQuota=70%"));
    v
}

#[test]
fn runc_systemd_driver_keeps_the_narrowing_through_systemd() {
    passed(&systemd_checks("runc-systemd"));
}

#[test]
fn crun_systemd_driver_container_child_gets_its_plan_and_keeps_it() {
    passed(&systemd_checks("crun-systemd"));
}

#[test]
fn podman_systemd_cgroup_manager_gets_its_plan_and_keeps_it() {
    passed(&systemd_checks("podman-systemd"));
}

#[test]
fn runc_and_crun_cgroupfs_driver_on_cgroup_v2() {
    let mut names = vec!["cgroupfs: no systemd call".to_string()];
    for rt in ["runc", "crun"] {
        let n = format!("{rt}-cgroupfs");
        names.push(format!("{n}: starts"));
        for when in ["start", "daemon-reload"] {
            names.push(format!("{n}: {when}: cpus, quota and plan.env"));
        }
    }
    passed(&names);
}

#[test]
fn without_the_system_bus_the_start_goes_on_with_the_file_alone() {
    passed(&[
        "runc-nobus: starts".into(),
        "runc-nobus: the fallback is logged".into(),
        "runc-nobus: AllowedCPUs untouched".into(),
        "runc-nobus: start: cpus, quota and plan.env".into(),
        "runc-nobus: daemon-reload: the file alone is undone".into(),
    ]);
}

#[test]
fn poststop_releases_every_claim() {
    passed(&["poststop: every claim released".into()]);
}

#[test]
fn the_systemd_call_is_measured() {
    let r = results();
    for n in ["runc-systemd", "crun-systemd", "podman-systemd"] {
        let v = r
            .facts
            .get(&format!("{n}: dbus_ms"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        assert!(
            !v.is_empty() && v.split(' ').all(|ms| ms.parse::<u64>().is_ok()),
            "{n}: the hook logged no systemd call time ({v:?})\n{}",
            r.log
        );
    }
}
