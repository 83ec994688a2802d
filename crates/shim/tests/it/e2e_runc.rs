//! End to end with real runc: the static `cpuplan-exec` in a busybox-static container applies a plan.
//!
//! Runs as root and needs `runc` and `busybox-static` (CI installs them); it fails, not skips, without them.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{elf_program_headers, sample_plan, static_exec, two_cpus, write_plan, PT_INTERP};
use serde_json::{json, Value};

const BUSYBOX: &str = "/bin/busybox";

fn require_tools() {
    let runc = Command::new("runc").arg("--version").output();
    assert!(
        matches!(&runc, Ok(o) if o.status.success()),
        "runc is required for this test (apt-get install -y runc): {runc:?}"
    );
    assert!(
        nix::unistd::geteuid().is_root(),
        "the runc end-to-end test must run as root"
    );
    assert!(
        Path::new(BUSYBOX).exists()
            && !elf_program_headers(Path::new(BUSYBOX)).contains(&PT_INTERP),
        "{BUSYBOX} must be busybox-static (apt-get install -y busybox-static)"
    );
}

/// A bundle with a busybox rootfs, `cpuplan-exec` in `/bin`, and a plan in `/etc/cpuplan`.
fn bundle(dir: &Path) -> PathBuf {
    let b = dir.join("bundle");
    let r = b.join("rootfs");
    for d in ["bin", "proc", "sys", "dev", "run", "tmp", "etc/cpuplan"] {
        std::fs::create_dir_all(r.join(d)).unwrap();
    }
    std::fs::copy(BUSYBOX, r.join("bin/busybox")).unwrap();
    let list = Command::new(BUSYBOX).arg("--list").output().unwrap();
    for applet in String::from_utf8_lossy(&list.stdout).lines() {
        let link = r.join("bin").join(applet);
        if !link.exists() {
            std::os::unix::fs::symlink("busybox", link).unwrap();
        }
    }
    std::fs::copy(static_exec(), r.join("bin/cpuplan-exec")).unwrap();
    write_plan(&r.join("etc/cpuplan"), &sample_plan());
    let st = Command::new("runc")
        .arg("spec")
        .current_dir(&b)
        .status()
        .unwrap();
    assert!(st.success(), "runc spec failed");
    b
}

/// Runs the bundle with `args` as the container's process and `extra_mounts`; returns its stdout.
fn run_container(dir: &Path, b: &Path, args: &[&str], extra_mounts: Vec<Value>) -> String {
    let cfg_path = b.join("config.json");
    let mut cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    cfg["process"]["terminal"] = json!(false);
    cfg["process"]["args"] = json!(args);
    cfg["root"]["readonly"] = json!(false);
    cfg["hostname"] = json!("cpuplan-e2e");
    let mounts = cfg["mounts"].as_array_mut().unwrap();
    mounts.push(
        json!({"destination": "/run", "type": "tmpfs", "source": "tmpfs",
                       "options": ["nosuid", "nodev", "mode=755"]}),
    );
    mounts.extend(extra_mounts);
    std::fs::write(&cfg_path, serde_json::to_string_pretty(&cfg).unwrap()).unwrap();

    let id = format!(
        "cpuplan-e2e-{}-{}",
        std::process::id(),
        dir.file_name().unwrap().to_string_lossy()
    );
    let state = dir.join("state");
    let out = Command::new("timeout")
        .arg("120")
        .arg("runc")
        .arg("--root")
        .arg(&state)
        .args(["run", "--bundle"])
        .arg(b)
        .arg(&id)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let _ = Command::new("runc")
        .arg("--root")
        .arg(&state)
        .args(["delete", "-f", &id])
        .output();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "runc run failed ({:?}): {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn var<'a>(env: &'a str, key: &str) -> Option<&'a str> {
    env.lines().find_map(|l| l.strip_prefix(&format!("{key}=")))
}

#[test]
fn cpuplan_exec_pins_a_worker_in_a_runc_container() {
    require_tools();
    let dir = tempfile::tempdir().unwrap();
    let b = bundle(dir.path());
    let out = run_container(
        dir.path(),
        &b,
        &[
            "/bin/cpuplan-exec",
            "--plan",
            "/etc/cpuplan/plan.json",
            "--worker",
            "0",
            "--",
            "sh",
            "-c",
            "grep Cpus_allowed_list /proc/self/status; env",
        ],
        vec![],
    );
    let (a, bcpu) = two_cpus();
    assert!(
        out.starts_with(&format!("Cpus_allowed_list:\t{bcpu}\n")),
        "{out}"
    );
    assert_eq!(
        var(&out, "CPUPLAN_WORKERS"),
        Some(format!("{bcpu};-").as_str()),
        "{out}"
    );
    assert_eq!(var(&out, "CPUPLAN_RESULT"), Some(a.to_string().as_str()));
    assert_eq!(var(&out, "OMP_NUM_THREADS"), Some("1"));
    assert_eq!(var(&out, "GOMAXPROCS"), Some("2"));
    assert_eq!(var(&out, "CPUPLAN_PLAN"), Some("/etc/cpuplan/plan.json"));
}

#[test]
fn cpuplan_exec_reads_the_default_run_cpuplan_in_a_runc_container() {
    require_tools();
    let dir = tempfile::tempdir().unwrap();
    let b = bundle(dir.path());
    // As the hook leaves it: the plan in the container's /run/cpuplan (here a bind mount).
    let host_plan = b.join("rootfs/etc/cpuplan");
    let out = run_container(
        dir.path(),
        &b,
        &[
            "/bin/cpuplan-exec",
            "--result",
            "--",
            "sh",
            "-c",
            "grep Cpus_allowed_list /proc/self/status; echo \"why=$CPUPLAN_WHY\"",
        ],
        vec![json!({"destination": "/run/cpuplan", "type": "bind",
                    "source": host_plan, "options": ["rbind", "ro"]})],
    );
    let (a, bcpu) = two_cpus();
    assert_eq!(
        out,
        format!(
            "Cpus_allowed_list:\t{a}\nwhy=step_thread_core {bcpu}: the plan's why, with a quote: it's\n"
        )
    );
}

#[test]
fn cpuplan_exec_refuses_a_fifo_and_a_device_plan_env_in_a_runc_container() {
    require_tools();
    let dir = tempfile::tempdir().unwrap();
    let b = bundle(dir.path());
    // As an image can hold them: plan.env a FIFO in one plan directory, a link to /dev/zero
    // in another, each beside a good plan.json.
    let r = b.join("rootfs/etc");
    for d in ["fifo", "zero"] {
        std::fs::create_dir(r.join(d)).unwrap();
        write_plan(&r.join(d), &sample_plan());
        std::fs::remove_file(r.join(d).join("plan.env")).unwrap();
    }
    nix::unistd::mkfifo(
        &r.join("fifo/plan.env"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    std::os::unix::fs::symlink("/dev/zero", r.join("zero/plan.env")).unwrap();
    let out = run_container(
        dir.path(),
        &b,
        &[
            "sh",
            "-c",
            "for d in fifo zero; do /bin/cpuplan-exec --plan /etc/$d/plan.json -- true 2>&1; \
             echo \"$d rc=$?\"; done",
        ],
        vec![],
    );
    assert_eq!(
        out,
        "cpuplan-exec: cannot read /etc/fifo/plan.env: a FIFO, not a regular file\nfifo rc=3\n\
         cpuplan-exec: cannot read /etc/zero/plan.env: a device, not a regular file\nzero rc=3\n",
    );
}
