//! The Debian package: `scripts/deb.sh --debug` builds it with cargo-deb; `dpkg -i` installs it;
//! a real podman with its default hooks directories (no `--hooks-dir`, no `hooks_dir`) runs a
//! container that sees `/run/cpuplan/plan.env`; `dpkg -r` leaves only the conffiles (and removes
//! the precreate link the docs tell the operator to make) and `dpkg --purge` nothing at all: not
//! the hook's state under `/run/cpuplan` nor its default log (the postrm, run on a planted root
//! through `$DPKG_ROOT`, and the real purge).
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
use common::log_guard;
use common::podman::Podman;
use common::runc::{line_value, require};
use common::statics::{target_dir, workspace_root};
use cpuplan_hook::elf;
use serde_json::Value;

const PACKAGE: &str = "cpuplan";

mod root;

/// `dpkg ARGS` (no terminal, no prompt): (status, stdout + stderr).
fn dpkg(args: &[&str]) -> (i32, String) {
    dpkg_with(&[], args)
}

/// `dpkg OPTIONS ARGS` (no terminal, no prompt): (status, stdout + stderr).
fn dpkg_with(options: &[String], args: &[&str]) -> (i32, String) {
    let out = Command::new("dpkg")
        .args(options)
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

/// The machine's own hook log, which a real purge removes: kept aside and put back as it was
/// (content, mode, mtime), so that this machine's log and every test binary's log guard
/// (`crates/test-support/src/log_guard.rs`) see it unchanged.
struct RealLog(Option<(Vec<u8>, std::fs::Permissions, std::time::SystemTime)>);

impl RealLog {
    fn aside() -> RealLog {
        let p = Path::new(log_guard::REAL_LOG);
        RealLog(std::fs::metadata(p).ok().map(|m| {
            (
                std::fs::read(p).unwrap(),
                m.permissions(),
                m.modified().unwrap(),
            )
        }))
    }

    fn restore(self) {
        if let Some((text, mode, mtime)) = self.0 {
            let p = Path::new(log_guard::REAL_LOG);
            std::fs::write(p, text).unwrap();
            std::fs::set_permissions(p, mode).unwrap();
            let f = std::fs::File::options().write(true).open(p).unwrap();
            f.set_modified(mtime).unwrap();
        }
    }
}

/// `dpkg --purge`, the machine's own hook log kept (see [`RealLog`]): (status, output, whether
/// the purge removed the log).
fn purge_keeping_the_real_log() -> (i32, String, bool) {
    let saved = RealLog::aside();
    let (rc, out) = dpkg(&["--purge", PACKAGE]);
    let removed = !exists(Path::new(log_guard::REAL_LOG));
    saved.restore();
    (rc, out, removed)
}

/// Purges the package if dpkg knows it in any state; panics if that fails.
fn purge() {
    if status().is_some() {
        let (rc, out, _) = purge_keeping_the_real_log();
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
            let (rc, out, _) = purge_keeping_the_real_log();
            if rc != 0 {
                eprintln!("cleanup: dpkg --purge {PACKAGE} failed: {out}");
            }
        }
    }
}

/// The package, built once for this binary's tests (they would race on `target/deb-stage`)
/// into `$CARGO_TARGET_DIR/deb-test`.
fn built_deb() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let out = target_dir().join("deb-test");
            let _ = std::fs::remove_dir_all(&out);
            build_deb(&out)
        })
        .clone()
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
    let err = String::from_utf8_lossy(&built.stderr);
    assert!(
        !err.contains("File system loop found"),
        "scripts/deb.sh walked the fixtures' link loops: {err}"
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
    let deb = built_deb();

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
            "{} exists and is not the package's (a `cpuplan install`?): remove it first",
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
    for conffile in ["/etc/cpuplan/hook.json", "/etc/logrotate.d/cpuplan"] {
        assert!(
            conffiles.contains(&format!("\n {conffile} ")),
            "{conffile} is a conffile: {conffiles}"
        );
    }
    // What it ships, where.
    let hook = Path::new("/usr/libexec/cpuplan/cpuplan-hook");
    let exec = Path::new("/usr/bin/cpuplan-exec");
    let nri = Path::new("/usr/bin/cpuplan-nri");
    let cpuplan = Path::new("/usr/bin/cpuplan");
    for p in [
        hook,
        exec,
        nri,
        cpuplan,
        Path::new("/usr/bin/cpuplan-hook"),
        Path::new("/usr/lib/x86_64-linux-gnu/libcpuplan_shim.so"),
        Path::new("/usr/lib/x86_64-linux-gnu/libcpuplan_shim.a"),
        Path::new("/usr/include/cpuplan.h"),
        Path::new("/usr/share/cpuplan/oci/cpuplan-precreate.json"),
        Path::new("/usr/share/cpuplan/oci/cpuplan-annotated.json"),
        Path::new("/usr/lib/systemd/system/cpuplan-nri.service"),
        Path::new("/etc/logrotate.d/cpuplan"),
        hooks_file,
        config,
    ] {
        assert!(
            files.iter().any(|f| f == p),
            "{} not in dpkg -L: {files:?}",
            p.display()
        );
    }
    for bin in [hook, exec, nri, cpuplan] {
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
    let op = common::operator_dir::tempdir();
    cfg["claims_dir"] = op.path().join("claims").display().to_string().into();
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
        ) && err.contains("cpuplan check-config"),
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

    the_postrm_removes_what_is_the_package_s(tmp.path());
    // The precreate registration turned on as README and docs/install.md say.
    let precreate_link = hooks_file.with_file_name("cpuplan-precreate.json");
    std::os::unix::fs::symlink(
        "/usr/share/cpuplan/oci/cpuplan-precreate.json",
        &precreate_link,
    )
    .unwrap();

    let dirs_before: BTreeSet<&PathBuf> = files.iter().filter(|p| p.is_dir()).collect();
    let (rc, out) = dpkg(&["-r", PACKAGE]);
    assert_eq!(rc, 0, "dpkg -r: {out}");
    assert_eq!(status().as_deref(), Some("deinstall ok config-files"));
    let left: Vec<&PathBuf> = files
        .iter()
        .filter(|p| !dirs_before.contains(p) && exists(p))
        .collect();
    let logrotate = PathBuf::from("/etc/logrotate.d/cpuplan");
    assert_eq!(
        left.into_iter().collect::<BTreeSet<_>>(),
        BTreeSet::from([&config.to_path_buf(), &logrotate]),
        "dpkg -r keeps only the conffiles"
    );
    assert!(
        std::fs::symlink_metadata(&precreate_link).is_err(),
        "dpkg -r leaves the precreate link dangling"
    );
    let (rc, out, log_removed) = purge_keeping_the_real_log();
    assert_eq!(rc, 0, "dpkg --purge: {out}");
    assert!(
        log_removed,
        "dpkg --purge leaves {} (restored now)",
        log_guard::REAL_LOG
    );
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

/// The installed postrm on a planted root (`$DPKG_ROOT`, as dpkg gives it for `--root`): `remove`
/// takes the links to the package's registrations and nothing else; `purge` also the hook's
/// state under `/run/cpuplan` and its default log, and leaves every other file, link and log.
fn the_postrm_removes_what_is_the_package_s(tmp: &Path) {
    let root = tmp.join("postrm-root");
    let at = |p: &str| root.join(p.trim_start_matches('/'));
    let usr_hooks = "/usr/share/containers/oci/hooks.d";
    let etc_hooks = "/etc/containers/oci/hooks.d";
    for d in [
        usr_hooks,
        etc_hooks,
        "/var/log",
        "/run/cpuplan/claims",
        "/run/cpuplan/inventory",
    ] {
        std::fs::create_dir_all(at(d)).unwrap();
    }
    let links = [
        // the docs' precreate link, absolute and relative; cpuplan.json linked into another dir
        (
            format!("{usr_hooks}/cpuplan-precreate.json"),
            "/usr/share/cpuplan/oci/cpuplan-precreate.json",
        ),
        (
            format!("{etc_hooks}/cpuplan-precreate.json"),
            "../../../../usr/share/cpuplan/oci/cpuplan-precreate.json",
        ),
        (
            format!("{etc_hooks}/cpuplan.json"),
            "/usr/share/containers/oci/hooks.d/cpuplan.json",
        ),
    ];
    for (link, target) in &links {
        std::os::unix::fs::symlink(target, at(link)).unwrap();
    }
    let others = [
        format!("{usr_hooks}/other.json"),
        format!("{etc_hooks}/mine.json"),
        "/var/log/other.log".to_string(),
        "/var/log/cpuplan-hook.log.keep".to_string(),
    ];
    std::os::unix::fs::symlink("/usr/share/other/oci/other.json", at(&others[0])).unwrap();
    for f in &others[1..] {
        std::fs::write(at(f), "x").unwrap();
    }
    let state = [
        "/var/log/cpuplan-hook.log",
        "/run/cpuplan/claims/0000:3b:00.0.json",
        "/run/cpuplan/inventory/cache",
    ];
    for f in state {
        std::fs::write(at(f), "x").unwrap();
    }
    let there = |p: &str| std::fs::symlink_metadata(at(p)).is_ok();
    let postrm = |stage: &str| {
        let o = Command::new("/var/lib/dpkg/info/cpuplan.postrm")
            .arg(stage)
            .env("DPKG_ROOT", &root)
            .stdin(Stdio::null())
            .output()
            .expect("run the postrm");
        assert!(
            o.status.success(),
            "postrm {stage}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    postrm("remove");
    for (link, _) in &links {
        assert!(!there(link), "postrm remove leaves the link {link}");
    }
    for f in others.iter().map(String::as_str).chain(state) {
        assert!(there(f), "postrm remove takes {f}");
    }
    postrm("purge");
    for f in state {
        assert!(!there(f), "postrm purge leaves {f}");
    }
    assert!(!there("/run/cpuplan"), "postrm purge leaves /run/cpuplan");
    for f in &others {
        assert!(there(f), "postrm purge takes {f}, not the package's");
    }
}

/// cargo's walk of the root package (what it fingerprints a build script's package by before the
/// script first runs, and what it would package) leaves out `tests/fixtures`, whose sysfs dumps
/// hold the kernel's own link loops: without Cargo.toml's `exclude` it follows them and prints
/// one "File system loop found" warning per loop (370) on a first build and in scripts/deb.sh.
#[test]
fn cargo_s_walk_of_the_package_skips_the_fixtures_link_loops() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["package", "--list", "--allow-dirty", "-p", "cpuplan-hook"])
        .current_dir(workspace_root())
        .env("CARGO_TARGET_DIR", target_dir())
        .output()
        .expect("run cargo package --list");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "cargo package --list: {err}");
    assert!(!err.contains("File system loop found"), "{err}");
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(listed.lines().any(|l| l == "Cargo.toml"), "{listed}");
    assert!(
        !listed.lines().any(|l| l.starts_with("tests/fixtures/")),
        "the fixtures are in the package's walk"
    );
    let fixtures_have_loops = Command::new("find")
        .args(["-L", "tests/fixtures", "-maxdepth", "12"])
        .current_dir(workspace_root())
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&fixtures_have_loops.stderr).contains("loop"),
        "the fixtures hold link loops (what the exclude is for)"
    );
}
