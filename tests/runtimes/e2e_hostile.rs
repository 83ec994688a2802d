//! Hostile images, end to end with real runc: an image plants links, FIFOs, directories and
//! foreign files at or above the plan directory, or swaps a directory for a link while the hook
//! runs. In every case nothing outside the rootfs is created, changed or read, the hook does not
//! block, and the container starts (or is refused under `on_error: deny`) with the cause logged.
//! The bundle's `config.json` itself may be hostile too (a FIFO, a link to `/dev/zero`, a
//! directory, one byte over 16 MiB): one line names it within a second; one near 16 MiB costs
//! the hook a bounded peak RSS.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::fakehost::{fingerprint, list_tree};
use common::runc::{fixtures, hook_bin, Bundle};
use serde_json::json;

/// Host paths an escaping write would touch, fingerprinted before and after every run.
fn host_sentinels() -> Vec<PathBuf> {
    [
        "/etc/shadow",
        "/etc/passwd",
        "/etc/plan.env",
        "/etc/plan.json",
        "/plan.env",
        "/plan.json",
        "/cpuplan",
        "/run/cpuplan/plan.env",
        "/tmp/host-path",
        "/tmp/plan.env",
    ]
    .iter()
    .map(PathBuf::from)
    .collect()
}

struct Outcome {
    rc: i32,
    out: String,
    err: String,
    log: String,
    wall: Duration,
}

/// Runs a container whose image was given `plant(rootfs, host_path)`, with the plan dir `dir`,
/// no tmpfs on /run, and the container printing what it finds at `dir`.
fn hostile(
    tag: &str,
    dir: &str,
    on_error: &str,
    plant: impl FnOnce(&Path, &Path),
) -> (Outcome, Bundle) {
    let cmd = format!(
        "echo started; ls -la {dir}/ 2>&1 | sed 's/^/ls: /'; \
         if [ -f {dir}/plan.env ] && [ ! -L {dir}/plan.env ]; then (. {dir}/plan.env && echo \"omp=$OMP_NUM_THREADS\"); fi; true"
    );
    let mut b = Bundle::new(tag, &cmd);
    b.config["mounts"]
        .as_array_mut()
        .unwrap()
        .retain(|m| m["destination"] != "/run");
    b.config["linux"]["resources"]["cpu"] = json!({"quota": 100000, "period": 100000});
    b.env("NVIDIA_VISIBLE_DEVICES=0");
    let cfg = b.hook_config(json!({
        "topology_root": fixtures().join("e2e-host"),
        "claims_dir": b.scratch("claims"),
        "log": b.scratch("hook.log"),
        "step_thread_core": "off",
        "dir": dir,
        "on_error": on_error,
    }));
    b.hook_with_config(&cfg);
    // The host path an escaping relative link would reach: <tempdir>/host-path, with a sentinel file.
    let host_path = b.dir.path().join("host-path");
    std::fs::create_dir_all(&host_path).unwrap();
    std::fs::write(host_path.join("keep"), "host data\n").unwrap();
    plant(&b.rootfs(), &host_path);
    let host_before: Vec<String> = host_sentinels().iter().map(|p| fingerprint(p)).collect();
    let tree_before = list_tree(&host_path);
    let t = Instant::now();
    let (rc, out, err) = b.run();
    let wall = t.elapsed();
    let host_after: Vec<String> = host_sentinels().iter().map(|p| fingerprint(p)).collect();
    for ((p, a), b) in host_sentinels().iter().zip(&host_before).zip(&host_after) {
        assert_eq!(a, b, "{tag}: host path {} changed", p.display());
    }
    assert_eq!(
        tree_before,
        list_tree(&host_path),
        "{tag}: the host-path dir outside the rootfs changed"
    );
    let log = std::fs::read_to_string(b.scratch("hook.log")).unwrap_or_default();
    assert!(
        wall < Duration::from_secs(20),
        "{tag}: runc took {wall:?}: the hook blocked?"
    );
    (
        Outcome {
            rc,
            out,
            err,
            log,
            wall,
        },
        b,
    )
}

fn started(tag: &str, o: &Outcome) {
    assert_eq!(
        o.rc, 0,
        "{tag}: the container must start: {}\n{}",
        o.err, o.out
    );
    assert!(o.out.contains("started"), "{tag}: {}", o.out);
}

fn refused_link(tag: &str, o: &Outcome, component: &str) {
    started(tag, o);
    assert!(
        o.log.contains("planning problem")
            && o.log.contains(component)
            && o.log.contains("symlink"),
        "{tag}: cause not logged: {}",
        o.log
    );
    assert!(
        !o.out.contains("omp="),
        "{tag}: a plan was written: {}",
        o.out
    );
}

#[test]
fn run_linked_to_root_is_refused() {
    let (o, b) = hostile("run-root", "/run/cpuplan", "allow", |r, _| {
        std::fs::remove_dir(r.join("run")).unwrap();
        symlink("/", r.join("run")).unwrap();
    });
    refused_link("run-root", &o, "/run");
    assert!(!b.rootfs().join("cpuplan").exists());
}

#[test]
fn plan_dir_linked_to_etc_is_refused_under_allow_and_deny() {
    let plant = |r: &Path, _: &Path| {
        std::fs::write(r.join("etc/passwd"), "root:x:0:0::/:/bin/sh\n").unwrap();
        symlink("/etc", r.join("run/cpuplan")).unwrap();
    };
    let (o, b) = hostile("etc-allow", "/run/cpuplan", "allow", plant);
    refused_link("etc-allow", &o, "/run/cpuplan");
    assert!(
        !b.rootfs().join("etc/plan.env").exists(),
        "followed within the rootfs"
    );
    let (o, b) = hostile("etc-deny", "/run/cpuplan", "deny", plant);
    assert_ne!(o.rc, 0, "deny must refuse: {}", o.out);
    assert!(!o.out.contains("started"));
    assert!(
        o.err.contains("/run/cpuplan") && o.err.contains("symlink"),
        "{}",
        o.err
    );
    assert!(o.log.contains("planning problem"), "{}", o.log);
    assert!(!b.rootfs().join("etc/plan.env").exists());
}

#[test]
fn plan_dir_linked_above_the_rootfs_is_refused() {
    // /var/run/cpuplan -> ../../../../host-path lands on <tempdir>/host-path outside the rootfs.
    let (o, b) = hostile("dotdot-link", "/var/run/cpuplan", "allow", |r, host| {
        std::fs::create_dir_all(r.join("var/run")).unwrap();
        symlink("../../../../host-path", r.join("var/run/cpuplan")).unwrap();
        let resolved = r.join("var/run").join("../../../../host-path");
        assert_eq!(
            std::fs::canonicalize(resolved).unwrap(),
            std::fs::canonicalize(host).unwrap(),
            "the planted link reaches the host path"
        );
    });
    refused_link("dotdot-link", &o, "/var/run/cpuplan");
    assert!(!b.dir.path().join("host-path/plan.env").exists());
}

#[test]
fn a_dot_dot_laden_layout_is_refused() {
    let (o, _b) = hostile("dotdot-layout", "/opt/plan", "allow", |r, _| {
        std::fs::create_dir_all(r.join("opt")).unwrap();
        symlink("./../opt/../../../../../../..", r.join("opt/plan")).unwrap();
        std::fs::create_dir_all(r.join("x/..y/...")).unwrap();
    });
    refused_link("dotdot-layout", &o, "/opt/plan");
}

#[test]
fn plan_env_linked_to_shadow_is_replaced_not_followed() {
    for (tag, target) in [
        ("shadow-abs", "/etc/shadow"),
        ("shadow-rel", "../../../../../../etc/shadow"),
    ] {
        let (o, b) = hostile(tag, "/opt/plan", "allow", |r, _| {
            std::fs::create_dir_all(r.join("opt/plan")).unwrap();
            std::fs::write(r.join("etc/shadow"), "image-shadow\n").unwrap();
            symlink(target, r.join("opt/plan/plan.env")).unwrap();
            symlink(target, r.join("opt/plan/plan.json")).unwrap();
        });
        started(tag, &o);
        assert!(o.out.contains("omp=1"), "{tag}: {}", o.out);
        assert_eq!(
            std::fs::read_to_string(b.rootfs().join("etc/shadow")).unwrap(),
            "image-shadow\n",
            "{tag}: the image's shadow changed"
        );
        // Inside, plan.env was a plain file (omp=1 above); the rootfs is a host directory, so
        // poststop removed the plan files: the planted links are gone with them.
        assert!(
            std::fs::symlink_metadata(b.rootfs().join("opt/plan/plan.env")).is_err(),
            "{tag}: plan.env is left in the rootfs"
        );
    }
}

#[test]
fn plan_env_as_a_fifo_does_not_block() {
    let (o, b) = hostile("fifo", "/opt/plan", "allow", |r, _| {
        std::fs::create_dir_all(r.join("opt/plan")).unwrap();
        nix::unistd::mkfifo(
            &r.join("opt/plan/plan.env"),
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .unwrap();
    });
    started("fifo", &o);
    assert!(o.out.contains("omp=1"), "{}", o.out);
    assert!(o.wall < Duration::from_secs(10), "{:?}", o.wall);
    // Replaced by a plain file inside (omp=1), removed at poststop (a host-directory rootfs).
    assert!(std::fs::symlink_metadata(b.rootfs().join("opt/plan/plan.env")).is_err());
}

#[test]
fn plan_env_as_a_directory_is_logged_and_left_alone() {
    let plant = |r: &Path, _: &Path| {
        std::fs::create_dir_all(r.join("opt/plan/plan.env/inner")).unwrap();
        std::fs::write(r.join("opt/plan/plan.env/inner/f"), "x").unwrap();
    };
    let (o, b) = hostile("dir-allow", "/opt/plan", "allow", plant);
    started("dir-allow", &o);
    assert!(
        o.log.contains("planning problem") && o.log.contains("plan.env"),
        "{}",
        o.log
    );
    assert_eq!(
        std::fs::read_to_string(b.rootfs().join("opt/plan/plan.env/inner/f")).unwrap(),
        "x"
    );
    let (o, _b) = hostile("dir-deny", "/opt/plan", "deny", plant);
    assert_ne!(o.rc, 0);
    assert!(o.err.contains("plan.env"), "{}", o.err);
}

#[test]
fn plan_env_owned_by_another_user_is_replaced() {
    let (o, b) = hostile("foreign", "/opt/plan", "allow", |r, _| {
        std::fs::create_dir_all(r.join("opt/plan")).unwrap();
        let f = r.join("opt/plan/plan.env");
        std::fs::write(&f, "OMP_NUM_THREADS=999\n").unwrap();
        std::os::unix::fs::chown(&f, Some(12345), Some(12345)).unwrap();
        std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        std::os::unix::fs::chown(r.join("opt/plan"), Some(12345), Some(12345)).unwrap();
    });
    started("foreign", &o);
    // The container read the hook's plan.env (omp=1), not the planted one (999); poststop
    // removed it from the rootfs (a host directory).
    assert!(
        o.out.contains("omp=1") && !o.out.contains("omp=999"),
        "{}",
        o.out
    );
    assert!(std::fs::symlink_metadata(b.rootfs().join("opt/plan/plan.env")).is_err());
}

#[test]
fn swapping_a_directory_for_a_link_while_the_hook_runs_never_escapes() {
    // Another process flips /opt/plan between a directory and a link to the host path as fast
    // as it can while containers start; whatever the hook meets, it writes only inside the rootfs.
    let mut seen_plans = 0;
    let mut seen_refusals = 0;
    for round in 0..6 {
        let stop = Arc::new(AtomicBool::new(false));
        let mut swapper = None;
        let tag = format!("race{round}");
        let (o, _b) = hostile(&tag, "/opt/plan", "allow", |r, host| {
            std::fs::create_dir_all(r.join("opt")).unwrap();
            let (opt, host) = (r.join("opt"), host.to_path_buf());
            let stop = stop.clone();
            swapper = Some(std::thread::spawn(move || {
                let mut n = 0u64;
                let (dir, link, tmp) = (
                    opt.join("plan"),
                    opt.join("plan.link"),
                    opt.join("plan.dir"),
                );
                let _ = std::fs::create_dir(&tmp);
                let _ = symlink(&host, &link);
                while !stop.load(Ordering::Relaxed) {
                    // rename(2) swaps atomically: plan is a directory, then a link to the host path.
                    let _ = std::fs::rename(&tmp, &dir);
                    let _ = std::fs::rename(&dir, &tmp);
                    let _ = std::fs::rename(&link, &dir);
                    let _ = std::fs::rename(&dir, &link);
                    n += 1;
                }
                n
            }));
        });
        stop.store(true, Ordering::Relaxed);
        let swaps = swapper.unwrap().join().unwrap();
        assert!(swaps > 0);
        started(&tag, &o);
        // Either the hook wrote into a directory it opened inside the rootfs (which the loop may
        // have moved since), or it met the link and refused it.
        if o.log.contains("planning problem") {
            seen_refusals += 1;
            assert!(o.log.contains("/opt/plan"), "{}", o.log);
        } else {
            seen_plans += 1;
            assert!(o.log.contains("cpuset 1"), "{}", o.log);
        }
    }
    eprintln!("race: {seen_plans} runs wrote the plan, {seen_refusals} were refused");
}

/// A hostile or broken `config.json`: its name, how to plant it at a path, and what the hook says of it.
struct HostileConfig {
    tag: &'static str,
    plant: fn(&Path),
    why: &'static str,
}

fn hostile_configs() -> Vec<HostileConfig> {
    vec![
        HostileConfig {
            tag: "fifo",
            plant: |p| {
                nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap()
            },
            why: "a FIFO, not a regular file",
        },
        HostileConfig {
            tag: "dev-zero",
            plant: |p| symlink("/dev/zero", p).unwrap(),
            why: "a device, not a regular file",
        },
        HostileConfig {
            tag: "directory",
            plant: |p| std::fs::create_dir(p).unwrap(),
            why: "a directory, not a regular file",
        },
        HostileConfig {
            tag: "oversized",
            plant: |p| {
                let f = std::fs::File::create(p).unwrap();
                f.set_len(cpuplan_hook::MAX_CONFIG as u64 + 1).unwrap();
            },
            why: "over the 16777216-byte limit",
        },
    ]
}

#[test]
fn a_hostile_config_json_is_one_line_within_a_second() {
    use common::fakehost::FakeHost;
    use common::hookbin;
    for HostileConfig { tag, plant, why } in hostile_configs() {
        let fx = FakeHost::bundle_only();
        fx.write();
        let config = fx.bundle().join("config.json");
        std::fs::remove_file(&config).unwrap();
        plant(&config);
        let t = Instant::now();
        let out = hookbin::run_fed(
            &mut hookbin::create_runtime(&hook_bin(), &fx.hook_path()),
            fx.state(None).as_bytes(),
        );
        let took = t.elapsed();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{tag}: allow: {err}");
        assert!(took < Duration::from_secs(1), "{tag}: took {took:?}");
        let lines: Vec<&str> = err.lines().filter(|l| l.contains("config.json")).collect();
        assert_eq!(lines.len(), 1, "{tag}: {err}");
        assert!(
            lines[0].contains(&format!("{}: cannot read: {why}", config.display())),
            "{tag}: {err}"
        );
        assert!(
            fx.plan_files("").is_empty(),
            "{tag}: no rootfs known, nothing written"
        );
    }
}

#[test]
fn a_config_json_swapped_for_a_hostile_one_still_starts_the_container() {
    // runc has read config.json before the hooks run: a createRuntime hook registered before
    // cpuplan's swaps it for the hostile one, as a tenant with write access to the bundle could.
    for HostileConfig { tag, plant, why } in hostile_configs() {
        let mut b = Bundle::new(&format!("cfg-{tag}"), "echo started");
        let hostile = b.path().join("hostile");
        plant(&hostile);
        let swap = b.scratch("swap.sh");
        std::fs::write(
            &swap,
            format!(
                "#!/bin/sh\ncat >/dev/null\nrm -f '{c}' && mv '{h}' '{c}'\n",
                c = b.path().join("config.json").display(),
                h = hostile.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&swap, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        b.hook(&["createRuntime"], &[swap.display().to_string()]);
        let cfg = b.hook_config(json!({
            "topology_root": fixtures().join("e2e-host"),
            "claims_dir": b.scratch("claims"),
            "log": b.scratch("hook.log"),
        }));
        b.hook_with_config(&cfg);
        b.env("NVIDIA_VISIBLE_DEVICES=0");
        // Registering appended the hook's stage name to the swapper's argv too; harmless.
        let t = Instant::now();
        let (rc, out, err) = b.run();
        let wall = t.elapsed();
        let log = std::fs::read_to_string(b.scratch("hook.log")).unwrap_or_default();
        assert_eq!(rc, 0, "{tag}: {err}\n{out}\n{log}");
        assert!(out.contains("started"), "{tag}: {out}");
        assert!(wall < Duration::from_secs(20), "{tag}: {wall:?}");
        let lines: Vec<&str> = log.lines().filter(|l| l.contains("config.json")).collect();
        assert_eq!(lines.len(), 1, "{tag}: {log}");
        assert!(
            lines[0].contains("planning problem")
                && lines[0].contains(&format!(
                    "{}/config.json: cannot read: {why}",
                    b.path().display()
                )),
            "{tag}: {log}"
        );
    }
}

/// Runs `cmd` fed `input` and reaps it with wait4: its exit code and peak RSS in KiB (ru_maxrss).
// The child is reaped by wait4 below (which gives its rusage), not by `Child::wait`.
#[allow(clippy::zombie_processes)]
fn run_measured(cmd: &mut std::process::Command, input: &[u8]) -> (i32, u64, String) {
    use std::io::{Read, Write};
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input).unwrap();
    drop(stdin);
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid, and wait4 fills it for our own child, which is
    // reaped here (std's Child never waits for it afterwards: it is dropped unwaited).
    let mut usage: nix::libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as nix::libc::pid_t;
    let got = unsafe { nix::libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(got, pid, "wait4: {}", std::io::Error::last_os_error());
    let code = if nix::libc::WIFEXITED(status) {
        nix::libc::WEXITSTATUS(status)
    } else {
        -1
    };
    (code, usage.ru_maxrss as u64, err)
}

/// The test process's own peak RSS (`VmHWM`) in KiB.
fn own_peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn a_config_json_near_the_limit_costs_the_hook_under_64_mib() {
    use common::fakehost::FakeHost;
    use common::hookbin;
    use std::io::Write;
    let fx = FakeHost::bundle_only();
    fx.write();
    // A big environment and big annotations, near 16 MiB in all, written as a stream: the test
    // never holds them, so its own peak RSS (which a spawned child's ru_maxrss starts from, the
    // child sharing its memory until exec) stays small and the figure is the hook's.
    let path = fx.bundle().join("config.json");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let value = "e".repeat(1300);
    write!(
        w,
        r#"{{"ociVersion":"1.0.2","root":{{"path":"rootfs"}},"linux":{{"cgroupsPath":"/ctr"}},"process":{{"cwd":"/","args":["sh"],"env":["PATH=/bin","NVIDIA_VISIBLE_DEVICES=0""#
    )
    .unwrap();
    for i in 0..6000 {
        write!(w, r#","BIG_{i}={value}""#).unwrap();
    }
    write!(w, r#"]}},"annotations":{{"cpuplan.step-thread-core":"off""#).unwrap();
    for i in 0..6000 {
        write!(w, r#","example.com/a{i}":"{value}""#).unwrap();
    }
    write!(w, "}}}}").unwrap();
    w.into_inner().unwrap().sync_all().unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    let max = cpuplan_hook::MAX_CONFIG as u64;
    assert!(size <= max && size > max - (1 << 20), "{size}");
    let own = own_peak_rss_kib();
    let (code, maxrss_kib, err) = run_measured(
        &mut hookbin::create_runtime(&hook_bin(), &fx.hook_path()),
        fx.state(None).as_bytes(),
    );
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("planning problem"), "{err}");
    assert!(
        err.contains("setting off (annotation cpuplan.step-thread-core)"),
        "the config was read: {err}"
    );
    assert_eq!(fx.plan_files("run/cpuplan"), ["plan.env", "plan.json"]);
    eprintln!(
        "a {size}-byte config.json: the hook's peak RSS was {maxrss_kib} KiB (the test's own: {own} KiB)"
    );
    assert!(maxrss_kib < 64 << 10, "peak RSS {maxrss_kib} KiB");
}
