//! Privileges: the static hook and launcher ignore LD_PRELOAD; the hook drops every capability
//! but the kept ones; without privileges (no capabilities, cgroup not writable) it writes the
//! plan without the cpuset, with a warning, never an error.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::as_user::{reachable_by_others, Shared};
use common::fakehost::{self, fingerprint, FakeHost, FakeRoot};
use common::hookbin;
use common::statics::static_bins;
use cpuplan_hook::elf::PT_INTERP;
use serde_json::json;

/// ELF program header types (64-bit little-endian), by the one parser in `cpuplan_hook::elf`.
fn program_headers(path: &Path) -> Vec<u32> {
    cpuplan_hook::elf::program_headers(path)
        .unwrap_or_else(|e| panic!("{e}"))
        .iter()
        .map(|h| h.kind)
        .collect()
}

/// A shared library whose constructor writes the file named by `$MARKER`.
fn hostile_preload(dir: &Path) -> PathBuf {
    let c = dir.join("evil.c");
    std::fs::write(
        &c,
        r#"#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void evil(void) {
    const char *m = getenv("MARKER");
    if (m) { FILE *f = fopen(m, "a"); if (f) { fputs("loaded\n", f); fclose(f); } }
}
"#,
    )
    .unwrap();
    let so = dir.join("libevil.so");
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&c)
        .output()
        .expect("cc (apt-get install gcc; .ci/run does)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    so
}

fn run_preloaded(bin: &Path, args: &[&str], so: &Path, marker: &Path) -> std::process::Output {
    Command::new(bin)
        .args(args)
        .env("LD_PRELOAD", so)
        .env("LD_LIBRARY_PATH", so.parent().unwrap())
        .env("MARKER", marker)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn static_hook_and_launcher_ignore_a_hostile_ld_preload() {
    let bins = static_bins();
    let (hook, nri, cpuplan, exec) = (&bins.hook, &bins.nri, &bins.cpuplan, &bins.exec);
    for bin in [hook, nri, cpuplan, exec] {
        let ph = program_headers(bin);
        assert!(
            !ph.contains(&PT_INTERP),
            "{} asks for a dynamic loader: {ph:?}",
            bin.display()
        );
    }
    let t = tempfile::tempdir().unwrap();
    let so = hostile_preload(t.path());
    // The library works: a dynamic program loads it.
    let marker = t.path().join("true.marker");
    let out = run_preloaded(Path::new("/bin/true"), &[], &so, &marker);
    assert!(out.status.success());
    assert!(
        program_headers(Path::new("/bin/true")).contains(&PT_INTERP),
        "/bin/true should be dynamic"
    );
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap_or_default(),
        "loaded\n",
        "the preload library did not load into /bin/true"
    );
    // The static binaries never load it.
    for (bin, args) in [
        (hook, vec!["--help"]),
        (nri, vec!["--help"]),
        (cpuplan, vec!["--help"]),
        (exec, vec!["--help"]),
        (
            cpuplan,
            vec!["gpus", "--like", "0000:3b:00.0", "--root", "/nonexistent"],
        ),
    ] {
        let marker = t.path().join(format!(
            "{}.marker",
            bin.file_name().unwrap().to_string_lossy()
        ));
        let out = run_preloaded(bin, &args, &so, &marker);
        assert!(
            !marker.exists(),
            "{} {args:?} loaded the preload library",
            bin.display()
        );
        if args == ["--help"] {
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(!out.stdout.is_empty());
        }
    }
    // The static hook also runs as a hook with the preload set: it plans and still loads nothing.
    let fx = FakeHost::bundle_only();
    fx.write();
    let marker = t.path().join("hook-run.marker");
    let out = hookbin::run_fed(
        hookbin::create_runtime(hook, &fx.hook_path())
            .env("LD_PRELOAD", &so)
            .env("MARKER", &marker),
        fx.state(None).as_bytes(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(fx.rootfs().join("run/cpuplan/plan.env").is_file());
    assert!(!marker.exists());
}

fn status_field(pid: u32, key: &str) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
        .unwrap_or_default()
}

#[test]
fn the_hook_keeps_exactly_its_capabilities() {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "this test runs as root (CI does)"
    );
    let keep: u64 = cpuplan_hook::privileges::KEEP
        .iter()
        .map(|c| 1u64 << c.index())
        .fold(0, |a, b| a | b);
    assert_eq!(
        keep,
        (1 << 1) | (1 << 2) | (1 << 3) | (1 << 19),
        "DAC_OVERRIDE, DAC_READ_SEARCH, FOWNER, SYS_PTRACE"
    );
    let fx = FakeHost::bundle_only();
    fx.write();
    let child = hookbin::create_runtime(
        Path::new(env!("CARGO_BIN_EXE_cpuplan-hook")),
        &fx.hook_path(),
    )
    .spawn()
    .unwrap();
    let pid = child.id();
    // The hook drops its capabilities, then blocks reading the state on stdin.
    let t = Instant::now();
    let want = format!("{keep:016x}");
    // no_new_privs is set last, after every capability set was changed.
    while status_field(pid, "NoNewPrivs") != "1" && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let caps: Vec<(String, String)> = [
        "CapInh",
        "CapPrm",
        "CapEff",
        "CapBnd",
        "CapAmb",
        "NoNewPrivs",
    ]
    .iter()
    .map(|k| (k.to_string(), status_field(pid, k)))
    .collect();
    let out = hookbin::feed(child, fx.state(None).as_bytes());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let get = |k: &str| caps.iter().find(|(n, _)| n == k).unwrap().1.clone();
    assert_eq!(get("CapEff"), want, "{caps:?}");
    assert_eq!(get("CapPrm"), want, "{caps:?}");
    // The bounding set is left as it was: with no_new_privs an exec gains nothing from it.
    assert_ne!(get("CapBnd"), "", "{caps:?}");
    assert_eq!(get("CapInh"), "0000000000000000", "{caps:?}");
    assert_eq!(get("CapAmb"), "0000000000000000", "{caps:?}");
    assert_eq!(get("NoNewPrivs"), "1", "{caps:?}");
    // And with those alone it planned.
    assert!(fx.rootfs().join("run/cpuplan/plan.env").is_file());
}

#[test]
fn rootless_without_capabilities_writes_the_plan_without_the_cpuset() {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "this test runs as root (CI does): it drops to nobody with setpriv"
    );
    let nobody = 65534u32;
    // nobody reads nothing in the checkout (it may be a clone other users cannot read): the
    // hook binary and the topology are copies in a directory every user may read.
    let t = Shared::new();
    let hook = t.binary(Path::new(env!("CARGO_BIN_EXE_cpuplan-hook")));
    let topology = t.copy(&fakehost::fixtures().join("e2e-host"), "e2e-host");
    let croot = t.path().join("croot");
    let fake = FakeRoot::new(&t.path().join("host"), 4244, "/ctr", &croot);
    let mut fx = FakeHost::bundle_only();
    std::fs::set_permissions(fx.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    fx.hook["topology_root"] = json!(topology);
    // The container's rootfs as the fake /proc/<pid>/root shows it, owned by the unprivileged user.
    let inside = croot.join(fx.rootfs().strip_prefix("/").unwrap());
    std::fs::create_dir_all(&inside).unwrap();
    std::os::unix::fs::chown(&inside, Some(nobody), Some(nobody)).unwrap();
    fx.hook["root"] = json!(fake.root);
    fx.hook["log"] = json!("stderr");
    fx.env("NVIDIA_VISIBLE_DEVICES=0");
    fx.spec["linux"]["resources"] = json!({"cpu": {"quota": 100000, "period": 100000}});
    fx.write();
    for p in [&hook, &topology, &fx.hook_path(), &fake.root, &fx.bundle()] {
        reachable_by_others(p);
    }
    let cpuset = fake.cg_file("cpuset", "cpuset.cpus");
    let before = fingerprint(&cpuset);
    let mut child = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ])
        .arg(&hook)
        .arg("--config")
        .arg(fx.hook_path())
        .args(["hook", "createRuntime"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("setpriv (util-linux)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(fx.state(Some(4244)).as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "rootless must not fail: {err}");
    assert!(
        err.contains("WARN") && err.contains("cpuset kept") && err.contains("Permission denied"),
        "{err}"
    );
    assert_eq!(fingerprint(&cpuset), before, "the cpuset changed");
    let env = std::fs::read_to_string(inside.join("run/cpuplan/plan.env")).unwrap();
    assert!(env.contains("CPUPLAN_DEVICES='0000:3b:00.0'"), "{env}");
    assert!(env.contains("rootless or read-only cgroups"), "{env}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(inside.join("run/cpuplan/plan.json")).unwrap())
            .unwrap();
    assert_eq!(json["inputs"]["cpuset"], serde_json::Value::Null);
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(inside.join("run/cpuplan/plan.env"))
            .unwrap()
            .uid(),
        nobody
    );
}

/// A read-only bind mount, unmounted on drop.
struct RoBind(PathBuf);

impl RoBind {
    fn new(dir: &Path) -> RoBind {
        let sh = |args: &[&str]| {
            let out = Command::new("mount")
                .args(args)
                .arg(dir)
                .arg(dir)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "mount {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        sh(&["--bind"]);
        let guard = RoBind(dir.to_path_buf());
        let out = Command::new("mount")
            .args(["-o", "remount,ro,bind"])
            .arg(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "remount ro: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        guard
    }
}

impl Drop for RoBind {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).output();
    }
}

#[test]
fn a_read_only_cgroup_degrades_to_a_warning() {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "runs as root (CI does)"
    );
    let t = tempfile::tempdir().unwrap();
    let croot = t.path().join("croot");
    let fake = FakeRoot::new(&t.path().join("host"), 4245, "/ctr", &croot);
    let cgdir = fake
        .cg_file("cpuset", "cpuset.cpus")
        .parent()
        .unwrap()
        .to_path_buf();
    let _guard = RoBind::new(&cgdir);
    let mut fx = FakeHost::bundle_only();
    let inside = croot.join(fx.rootfs().strip_prefix("/").unwrap());
    std::fs::create_dir_all(&inside).unwrap();
    fx.hook["root"] = json!(fake.root);
    fx.env("NVIDIA_VISIBLE_DEVICES=0");
    fx.spec["linux"]["resources"] = json!({"cpu": {"quota": 100000, "period": 100000}});
    let r = fx.allow(Some(4245));
    assert_eq!(r.problem, None, "{r:?}");
    assert_eq!(r.cpuset_file, None);
    assert!(
        r.plan.plan.why.contains("Read-only file system"),
        "{}",
        r.plan.plan.why
    );
    assert_eq!(
        std::fs::read_to_string(cgdir.join("cpuset.cpus")).unwrap(),
        "0-1\n"
    );
    assert!(inside.join("run/cpuplan/plan.env").is_file());
    // Under deny too: degradation is not a planning problem.
    fx.hook["on_error"] = json!("deny");
    let r = fx.run(Some(4245));
    assert!(r.is_ok(), "{r:?}");
}
