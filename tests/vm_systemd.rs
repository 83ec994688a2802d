//! A real cgroup v2 + systemd node: the static hook with runc and crun (systemd and cgroupfs
//! drivers; runc's cgroupfs driver also given a systemd-form path inside a service), podman
//! (`--cgroup-manager=systemd`, with the createRuntime hook and with precreate) and containerd
//! 1.7 driven through CRI (the NRI plugin, the same plugin under the Debian package's systemd
//! unit, then the hook registered by `install --containerd`) in a Debian 12 guest under QEMU
//! (`tests/vm/cgroup2-vm.sh`), every
//! container checked from inside at start and after `systemctl daemon-reload`, `set-property`
//! and the restart of an unrelated unit, the CRI containers also after kubelet's
//! `UpdateContainerResources` (its CPU manager's cpuset, an in-place resize).
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

use common::cri;
use common::statics::{static_bins, target_dir, workspace_root};
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
    let bins = static_bins();
    for (bin, name) in [
        (&bins.hook, "cpuplan-hook"),
        (&bins.nri, "cpuplan-nri"),
        (&bins.cpuplan, "cpuplan"),
    ] {
        std::fs::copy(bin, s.join(name)).unwrap();
    }
    std::fs::copy(vm_dir().join("guest.sh"), s.join("guest.sh")).unwrap();
    std::fs::copy(
        workspace_root().join("debian/cpuplan-nri.service"),
        s.join("cpuplan-nri.service"),
    )
    .unwrap();
    std::fs::copy(cri_client(), s.join("vm-cri")).unwrap();
    // The images the guest's containerd imports: its sandbox image (the recipe's config names
    // it) and the containers' busybox.
    cri::image_tar(
        &s.join("pause.tar"),
        cri::PAUSE_IMAGE,
        &["sleep", "1000000"],
    );
    cri::image_tar(&s.join("busybox.tar"), cri::IMAGE, &["sh"]);
    cri::copy_tree(&common::runc::fixtures().join("e2e-host"), &s.join("topo"));
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
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}\n--- console\n{console}\n--- hook log\n{}\n--- NRI plugin log\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(s.join("hook.log")).unwrap_or_default(),
        std::fs::read_to_string(s.join("nri.log")).unwrap_or_default()
    );
    // Lossy: a detail quotes what a command printed, which need not be UTF-8.
    let text = std::fs::read(s.join("results.jsonl"))
        .map(|b| String::from_utf8_lossy(&b).into_owned())
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

/// The guest's CRI client, the `vm-cri` example (tests/vm/cri_client.rs), built here (a debug
/// build, dynamically linked: the guest's glibc is the host's).
fn cri_client() -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "--example", "vm-cri"])
        .current_dir(workspace_root())
        .env("CARGO_TARGET_DIR", target_dir())
        .output()
        .expect("run cargo build --example vm-cri");
    assert!(
        out.status.success(),
        "cargo build --example vm-cri failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    target_dir().join("debug/examples/vm-cri")
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
fn podman_precreate_gives_cpuset_env_and_plan_env_and_keeps_them() {
    let mut names = systemd_checks("podman-pre");
    names.extend(
        [
            "install --with-precreate",
            "precreate narrowed the spec's cpus",
            "env from precreate is plan.env's",
        ]
        .map(|c| format!("podman-pre: {c}")),
    );
    passed(&names);
}

/// The checks of a CRI container's pod and start (`cri_start` in guest.sh).
fn cri_start_checks(name: &str) -> Vec<String> {
    ["RunPodSandbox", "pod slice CPUQuota=50%", "starts"]
        .iter()
        .map(|c| format!("{name}: {c}"))
        .chain(["pause", "busybox"].map(|t| format!("containerd: ctr images import {t}.tar")))
        .collect()
}

#[test]
fn containerd_cri_nri_plugin_narrows_and_keeps_it_through_systemd() {
    let mut names = systemd_checks("nri-cri");
    names.extend(cri_start_checks("nri-cri"));
    names.push("nri: the plugin synchronized with containerd".into());
    names.push("nri-cri: CPUPLAN_PLAN".into());
    passed(&names);
}

#[test]
fn containerd_cri_nri_plugin_follows_kubelets_updates() {
    let mut names = Vec::new();
    for (when, args) in [
        ("cpu-manager", "--cpuset 0-1"),
        ("resize", "--quota 150000 --period 100000"),
    ] {
        names.push(format!("nri-cri: {when}: UpdateContainerResources {args}"));
        names.push(format!("nri-cri: {when}: cpus, quota and plan.env"));
        names.push(format!("nri-cri: {when}: AllowedCPUs"));
    }
    names.push("nri-cri: resize: pod slice CPUQuota=150%".into());
    names.push("nri-cri: resize-reload: cpus, quota and plan.env".into());
    names.push("nri-cri: resize-reload: AllowedCPUs".into());
    names.push("nri-cri: pod removed, its claim released".into());
    names.push("nri: the plugin stopped".into());
    passed(&names);
}

#[test]
fn containerd_cri_hook_route_narrows_keeps_it_and_goes_stale_on_update() {
    let mut names = cri_start_checks("cri-hook");
    names.push("cri-hook: install --containerd".into());
    for when in [
        "start",
        "daemon-reload",
        "set-property",
        "cpu-manager",
        "cpu-manager-reload",
    ] {
        names.push(format!("cri-hook: {when}: cpus, quota and plan.env"));
        names.push(format!("cri-hook: {when}: AllowedCPUs"));
    }
    names.extend(
        [
            "set-property CPUQuota=70%",
            "cpu-manager: UpdateContainerResources --cpuset 0-1",
            "cpu-manager: claims says the plan is stale",
            "pod removed",
        ]
        .map(|c| format!("cri-hook: {c}")),
    );
    passed(&names);
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

/// runc's cgroupfs driver given a systemd-form path from inside a service (`in_service` in
/// guest.sh): the container's cgroup is below the service, the spec's scope is not where it
/// is, so the hook narrows the container's own file and never sets the service's
/// `AllowedCPUs`; the service's other process keeps its CPUs.
#[test]
fn a_container_below_a_service_never_sets_the_services_allowed_cpus() {
    passed(
        &[
            "starts",
            "its cgroup is below the service",
            "start: cpus, quota and plan.env",
            "the refusal is logged",
            "the service's AllowedCPUs unchanged",
            "the service's other process keeps its CPUs",
            "poststop released its claim",
        ]
        .map(|c| format!("svc-ctr: {c}")),
    );
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

/// The Debian package's unit for the NRI plugin, as shipped (its sandbox: no capabilities, a
/// read-only file system but /run/cpuplan, …), started by the guest's systemd: it registers,
/// plans a CRI container, logs to the journal only and stops.
#[test]
fn the_package_s_nri_unit_runs_in_its_sandbox_and_plans() {
    let mut names = cri_start_checks("nri-unit");
    names.extend(
        [
            "systemctl start",
            "registered (its probe)",
            "its lines in the journal",
            "read-only but /run/cpuplan, in its namespace",
            "start: cpus, quota and plan.env",
            "start: AllowedCPUs",
            "pod removed, its claim released",
            "the hook's log untouched",
            "stopped",
        ]
        .map(|c| format!("nri-unit: {c}")),
    );
    passed(&names);
}

#[test]
fn poststop_releases_every_claim() {
    passed(&["poststop: every claim released".into()]);
}

#[test]
fn the_systemd_call_is_measured() {
    let r = results();
    for n in ["runc-systemd", "crun-systemd", "podman-systemd", "cri-hook"] {
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
