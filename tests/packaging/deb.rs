//! The Debian package: `scripts/deb.sh --debug` builds it with cargo-deb; `dpkg -i` installs it;
//! a real podman with its default hooks directories (no `--hooks-dir`, no `hooks_dir`) runs a
//! container that sees `/run/cpuplan/plan.env`; `dpkg -r` leaves only the conffile and
//! `dpkg --purge` nothing at all.
//!
//! While the package is installed, its `cpuplan.json` is in podman's default hooks directory and
//! its `/etc/cpuplan/hook.json` is every config-less hook run's config: the test holds the host
//! lock exclusively from before `dpkg -i` until after the purge (`crates/test-support/src/hostlock.rs`),
//! and every private podman of the other tests holds it shared. A package left by a run that
//! died is purged first; the package is purged at the end however the test ends.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::hostlock::{self, HostLock};
use common::podman::Podman;
use common::runc::{line_value, require};
use common::statics::{target_dir, workspace_root};
use cpuplan_hook::elf;
use serde_json::Value;

const PACKAGE: &str = "cpuplan";

/// `dpkg ARGS` (no terminal, no prompt): (status, stdout + stderr).
fn dpkg(args: &[&str]) -> (i32, String) {
    let out = Command::new("dpkg")
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .output()
        .expect("run dpkg");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

/// The package's dpkg status (`install ok installed`, `deinstall ok config-files`…), or `None`
/// when dpkg does not know it.
fn status() -> Option<String> {
    let (rc, out) = dpkg(&["-s", PACKAGE]);
    if rc != 0 {
        return None;
    }
    out.lines()
        .find_map(|l| l.strip_prefix("Status: "))
        .map(str::to_string)
}

/// Purges the package if dpkg knows it in any state; panics if that fails.
fn purge() {
    if status().is_some() {
        let (rc, out) = dpkg(&["--purge", PACKAGE]);
        assert_eq!(rc, 0, "dpkg --purge {PACKAGE}: {out}");
    }
}

/// Holds the host lock and purges the package when dropped, also when the test fails.
struct Installed {
    _lock: HostLock,
}

impl Drop for Installed {
    fn drop(&mut self) {
        if status().is_some() {
            let (rc, out) = dpkg(&["--purge", PACKAGE]);
            if rc != 0 {
                eprintln!("cleanup: dpkg --purge {PACKAGE} failed: {out}");
            }
        }
    }
}

/// Builds the package with `scripts/deb.sh --debug` into `out`; returns its path.
fn build_deb(out: &Path) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let built = Command::new("bash")
        .arg(workspace_root().join("scripts/deb.sh"))
        .arg("--debug")
        .arg(out)
        .current_dir(workspace_root())
        .env("CARGO_TARGET_DIR", target_dir())
        .env("CARGO", &cargo)
        .output()
        .expect("run scripts/deb.sh");
    assert!(
        built.status.success(),
        "scripts/deb.sh failed (cargo-deb missing? cargo install cargo-deb --version 3.8.0 --locked, as scripts/test.sh does): {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let path = PathBuf::from(String::from_utf8_lossy(&built.stdout).trim());
    assert!(
        path.is_file() && path.starts_with(out),
        "deb.sh printed {path:?}"
    );
    path
}

/// Every path the installed package owns (`dpkg -L`), without `/.`.
fn owned() -> Vec<PathBuf> {
    let (rc, out) = dpkg(&["-L", PACKAGE]);
    assert_eq!(rc, 0, "dpkg -L: {out}");
    out.lines()
        .filter(|l| l.starts_with('/') && *l != "/.")
        .map(PathBuf::from)
        .collect()
}

fn exists(p: &Path) -> bool {
    p.symlink_metadata().is_ok()
}

fn repo_json(rel: &str) -> Value {
    serde_json::from_slice(&std::fs::read(workspace_root().join(rel)).unwrap()).unwrap()
}

#[test]
fn the_package_installs_runs_with_podmans_default_hooks_dir_and_purges_clean() {
    require(
        "Debian package",
        &[
            ("dpkg", "dpkg"),
            ("podman", "podman"),
            ("runc", "runc"),
            ("busybox", "busybox-static"),
            ("readelf", "binutils"),
        ],
    );
    let tmp = tempfile::Builder::new()
        .prefix("cpuplan-deb-")
        .tempdir()
        .unwrap();
    let deb = build_deb(&tmp.path().join("debian"));

    let guard = Installed {
        _lock: hostlock::exclusive(),
    };
    // A run that died, or a machine that had it: start from no package at all.
    purge();
    let config = Path::new("/etc/cpuplan/hook.json");
    let hooks_file = Path::new("/usr/share/containers/oci/hooks.d/cpuplan.json");
    for p in [config, hooks_file] {
        assert!(
            !exists(p),
            "{} exists and is not the package's (a `cpuplan-hook install`?): remove it first",
            p.display()
        );
    }

    let hooks_dir_was_there = exists(hooks_file.parent().unwrap());
    let (rc, out) = dpkg(&["-i", deb.to_str().unwrap()]);
    assert_eq!(rc, 0, "dpkg -i: {out}");
    assert_eq!(status().as_deref(), Some("install ok installed"));
    let files = owned();
    let (rc, conffiles) = dpkg(&["-s", PACKAGE]);
    assert_eq!(rc, 0);
    assert!(
        conffiles.contains("Conffiles:\n /etc/cpuplan/hook.json "),
        "hook.json is a conffile: {conffiles}"
    );
    // What it ships, where.
    let hook = Path::new("/usr/libexec/cpuplan/cpuplan-hook");
    let exec = Path::new("/usr/bin/cpuplan-exec");
    for p in [
        hook,
        exec,
        Path::new("/usr/bin/cpuplan-hook"),
        Path::new("/usr/lib/x86_64-linux-gnu/libcpuplan_shim.so"),
        Path::new("/usr/lib/x86_64-linux-gnu/libcpuplan_shim.a"),
        Path::new("/usr/include/cpuplan.h"),
        Path::new("/usr/share/cpuplan/oci/cpuplan-precreate.json"),
        hooks_file,
        config,
    ] {
        assert!(
            files.iter().any(|f| f == p),
            "{} not in dpkg -L: {files:?}",
            p.display()
        );
    }
    for bin in [hook, exec] {
        assert_eq!(
            elf::interpreter(bin).unwrap(),
            None,
            "{} is static",
            bin.display()
        );
    }
    assert_eq!(
        std::fs::read_link("/usr/bin/cpuplan-hook").unwrap(),
        Path::new("../libexec/cpuplan/cpuplan-hook")
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&std::fs::read(hooks_file).unwrap()).unwrap(),
        repo_json("hooks/oci/cpuplan.json"),
        "the hooks.d file is the repo's"
    );
    assert_eq!(
        std::fs::read_to_string(config).unwrap(),
        cpuplan_hook::install::DEFAULT_CONFIG_TEXT,
        "the conffile is install's default config"
    );

    // The conffile, edited as an operator would: the log and the claims go to the test's dir
    // (never the real /var/log/cpuplan-hook.log).
    let log = tmp.path().join("hook.log");
    let mut cfg = repo_json("hooks/hook.json");
    cfg["log"] = log.display().to_string().into();
    cfg["claims_dir"] = tmp.path().join("claims").display().to_string().into();
    std::fs::write(config, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();

    // The postinst checks the config: quiet when it loads (as at `dpkg -i` above), a warning
    // naming the problem when it does not; the package is configured either way.
    assert!(!out.contains("warning"), "dpkg -i: {out}");
    let postinst = Path::new("/var/lib/dpkg/info/cpuplan.postinst");
    let configure = || {
        let o = Command::new(postinst)
            .arg("configure")
            .stdin(Stdio::null())
            .output()
            .expect("run the postinst");
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    assert_eq!(configure(), (Some(0), String::new()), "a config that loads");
    let good = std::fs::read(config).unwrap();
    std::fs::write(config, br#"{"step_thread_cor": "auto"}"#).unwrap();
    let (rc, err) = configure();
    assert_eq!(rc, Some(0), "{err}");
    assert!(
        err.starts_with(
            "cpuplan: warning: hook config /etc/cpuplan/hook.json: unknown field `step_thread_cor`"
        ) && err.contains("cpuplan-hook check-config"),
        "{err}"
    );
    std::fs::write(config, good).unwrap();

    {
        let p = Podman::with_default_hooks_dirs("deb", &guard._lock);
        let init = p.init("deb", &["--cpus", "1"], "cat /run/cpuplan/plan.env");
        assert_eq!(init.rc, 0, "podman create/init: {}", init.err);
        let run = p.start("deb");
        assert_eq!(run.rc, 0, "podman start: {}", run.err);
        assert_eq!(
            line_value(&run.out, "CPUPLAN_USABLE"),
            Some("'1'"),
            "the packaged hook wrote the plan: {}",
            run.out
        );
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            text.contains(" INFO cpuplan-hook[") && text.contains("usable 1"),
            "the packaged hook logged where its conffile says: {text}"
        );
    } // the container is removed (its poststop runs) while the hook is still installed

    let dirs_before: BTreeSet<&PathBuf> = files.iter().filter(|p| p.is_dir()).collect();
    let (rc, out) = dpkg(&["-r", PACKAGE]);
    assert_eq!(rc, 0, "dpkg -r: {out}");
    assert_eq!(status().as_deref(), Some("deinstall ok config-files"));
    let left: Vec<&PathBuf> = files
        .iter()
        .filter(|p| !dirs_before.contains(p) && exists(p))
        .collect();
    assert_eq!(
        left,
        [&config.to_path_buf()],
        "dpkg -r keeps only the (edited) conffile"
    );
    let (rc, out) = dpkg(&["--purge", PACKAGE]);
    assert_eq!(rc, 0, "dpkg --purge: {out}");
    assert_eq!(status(), None, "dpkg forgets the package");
    let left: Vec<&PathBuf> = files
        .iter()
        .filter(|p| !dirs_before.contains(p) && exists(p))
        .collect();
    assert!(left.is_empty(), "left after the purge: {left:?}");
    // Directories only it used are gone too (those shared with other packages stay).
    for d in [
        "/usr/libexec/cpuplan",
        "/usr/share/cpuplan",
        "/usr/share/doc/cpuplan",
        "/etc/cpuplan",
    ] {
        assert!(!exists(Path::new(d)), "{d} is left");
    }
    if !hooks_dir_was_there {
        assert!(
            !exists(hooks_file.parent().unwrap()),
            "the hooks.d dir it created is left"
        );
    }
    drop(guard);
}
