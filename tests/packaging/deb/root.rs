//! The package installed by dpkg into a throwaway root (`dpkg --root`, the maintainer scripts
//! run chrootless with `$DPKG_ROOT`), never the machine's own: the systemd unit
//! (`systemd-analyze verify`, the binary it names, not enabled), the logrotate file (`logrotate
//! -d` as shipped; a forced rotation of a copy, after which the hook creates its log anew), the
//! opt-in hooks.d registration, `cpuplan install`/`uninstall` meeting the package's files (a
//! hint, nothing changed), and the purge (the operator's unit links and the rotated logs go).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::runc::require;
use cpuplan_hook::elf;

use super::{built_deb, repo_json};

/// `dpkg --root ROOT --force-script-chrootless ARGS`: (status, output).
fn dpkg_in(root: &Path, args: &[&str]) -> (i32, String) {
    let options = [
        format!("--root={}", root.display()),
        "--force-script-chrootless".to_string(),
    ];
    super::dpkg_with(&options, args)
}

/// `BIN ARGS`: (status, stdout, stderr).
fn run(bin: &Path, args: &[&str]) -> (i32, String, String) {
    let o = Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", bin.display()));
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Every path under `root` but dpkg's own database, with its bytes and mode.
fn tree(root: &Path) -> Vec<(PathBuf, Option<Vec<u8>>, u32)> {
    use std::os::unix::fs::MetadataExt;
    let mut all = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        if d == root.join("var/lib/dpkg") {
            continue;
        }
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let (p, m) = (e.path(), e.metadata().unwrap());
            let bytes = if m.is_dir() {
                dirs.push(p.clone());
                None
            } else if m.is_file() {
                Some(std::fs::read(&p).unwrap())
            } else {
                Some(
                    std::fs::read_link(&p)
                        .unwrap()
                        .into_os_string()
                        .into_encoded_bytes(),
                )
            };
            all.push((p, bytes, m.mode()));
        }
    }
    all.sort();
    all
}

#[test]
fn in_a_throwaway_root_the_unit_logrotate_and_the_package_s_own_files() {
    require(
        "Debian package in a root",
        &[
            ("dpkg", "dpkg"),
            ("logrotate", "logrotate"),
            ("readelf", "binutils"),
        ],
    );
    let tmp = tempfile::Builder::new()
        .prefix("cpuplan-deb-root-")
        .tempdir()
        .unwrap();
    let deb = built_deb();
    let root = tmp.path().join("root");
    let at = |p: &str| root.join(p.trim_start_matches('/'));
    for d in [
        "var/lib/dpkg/info",
        "var/lib/dpkg/updates",
        "var/lib/dpkg/triggers",
    ] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::write(at("/var/lib/dpkg/status"), "").unwrap();
    // The root has no libc6 (the shim's .so asks for one): the test's root, not a system.
    let (rc, out) = dpkg_in(&root, &["--force-depends", "-i", deb.to_str().unwrap()]);
    assert_eq!(rc, 0, "dpkg --root -i: {out}");
    assert!(
        !out.contains("warning"),
        "the postinst checked the root's config: {out}"
    );
    let (rc, status) = dpkg_in(&root, &["-s", "cpuplan"]);
    assert_eq!(rc, 0, "{status}");
    for conffile in ["/etc/cpuplan/hook.json", "/etc/logrotate.d/cpuplan"] {
        assert!(
            status.contains(&format!("\n {conffile} ")),
            "{conffile} is a conffile: {status}"
        );
    }

    // The unit: valid, naming the installed static plugin (with the option it passes), not
    // enabled by the install.
    let unit = at("/usr/lib/systemd/system/cpuplan-nri.service");
    let text = std::fs::read_to_string(&unit).unwrap();
    assert_eq!(
        text,
        std::fs::read_to_string(super::workspace_root().join("debian/cpuplan-nri.service"))
            .unwrap()
    );
    // systemd's own check where systemd is installed (not on every CI machine; the checks
    // below parse the file either way).
    if !common::runc::which("systemd-analyze")
        .as_os_str()
        .is_empty()
    {
        // The host's units (sysinit.target…) with a copy naming the root's binary: the root
        // holds no systemd of its own.
        let copy = tmp.path().join("units/cpuplan-nri.service");
        std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
        let exec = format!("ExecStart={}", at("/usr/bin/cpuplan-nri").display());
        std::fs::write(&copy, text.replace("ExecStart=/usr/bin/cpuplan-nri", &exec)).unwrap();
        let verify = Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(&copy)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&verify.stderr).into_owned()
            + &String::from_utf8_lossy(&verify.stdout);
        assert!(verify.status.success(), "systemd-analyze verify: {said}");
        assert!(
            !said.contains("cpuplan-nri.service"),
            "systemd-analyze verify: {said}"
        );
    }
    let sections: Vec<&str> = text.lines().filter(|l| l.starts_with('[')).collect();
    assert_eq!(sections, ["[Unit]", "[Service]", "[Install]"]);
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with(['#', '[']))
    {
        assert!(line.contains('='), "not a key=value line: {line:?}");
    }
    let exec: Vec<&str> = text
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("an ExecStart")
        .split_whitespace()
        .collect();
    assert_eq!(exec, ["/usr/bin/cpuplan-nri", "--log", "stderr"]);
    let nri = at(exec[0]);
    assert_eq!(
        elf::interpreter(&nri).unwrap(),
        None,
        "{} is static",
        nri.display()
    );
    let (rc, help, _) = run(&nri, &["--help"]);
    assert_eq!(rc, 0);
    assert!(help.contains("--log stderr"), "{help}");
    for rw in text
        .lines()
        .filter_map(|l| l.strip_prefix("ReadWritePaths="))
        .flat_map(str::split_whitespace)
    {
        assert!(
            ["/run/cpuplan", "/run/cpuplan-nri"].contains(&rw),
            "writable beyond the plugin's directories: {rw}"
        );
    }
    assert!(
        std::fs::read_dir(at("/etc/systemd/system")).is_err(),
        "the install enabled a unit"
    );

    // Run as the unit runs it (its ExecStart, here with a config whose `log` is a file and a
    // runtime that is not there): it logs to stderr, the journal under systemd, and never
    // opens the config's log file.
    let plugin_log = tmp.path().join("plugin-config.log");
    // Claims in a directory of the operator's (none under /tmp is).
    let operator = common::operator_dir::tempdir();
    let plugin_config = tmp.path().join("plugin.json");
    std::fs::write(
        &plugin_config,
        serde_json::to_vec(&serde_json::json!({
            "log": plugin_log,
            "nri_dir": tmp.path().join("nri"),
            "claims_dir": operator.path().join("nri-claims"),
            "inventory_dir": tmp.path().join("nri-inventory"),
        }))
        .unwrap(),
    )
    .unwrap();
    let mut plugin = Command::new(&nri)
        .args(&exec[1..])
        .arg("--config")
        .arg(&plugin_config)
        .arg("--socket")
        .arg(tmp.path().join("no-runtime.sock"))
        .arg("--state")
        .arg(tmp.path().join("plugin-state"))
        .current_dir(tmp.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let said = {
        use std::io::BufRead;
        // Up to its first attempt at the runtime's socket (or the end of its stderr).
        let mut said = String::new();
        let mut err = std::io::BufReader::new(plugin.stderr.take().unwrap());
        while !said.contains("nri: cannot connect to the NRI socket") {
            if err.read_line(&mut said).unwrap() == 0 {
                break;
            }
        }
        said
    };
    common::procs::stop_gently(plugin, std::time::Duration::from_secs(10));
    assert!(
        said.contains("nri: cannot connect to the NRI socket"),
        "the plugin's lines, on stderr: {said:?}"
    );
    assert!(
        !plugin_log.exists() && !tmp.path().join("stderr").exists(),
        "the plugin under the unit's options opened a log file"
    );

    // logrotate's file: as shipped, a dry run over the real paths passes.
    let logrotate = at("/etc/logrotate.d/cpuplan");
    let state = tmp.path().join("logrotate.state");
    let (rc, out, err) = run(
        Path::new("logrotate"),
        &[
            "-d",
            "-s",
            state.to_str().unwrap(),
            logrotate.to_str().unwrap(),
        ],
    );
    assert_eq!(rc, 0, "logrotate -d: {out}{err}");
    assert!(
        !err.to_lowercase().contains("error") && err.contains("/var/log/cpuplan-hook.log"),
        "logrotate -d: {err}"
    );
    // A copy for a log of the test's own, rotated for real: the hook then appends to a fresh
    // file (root's, 0640, as `create` made it), the rotated one keeps what was written before.
    let logs = tmp.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let log = logs.join("hook.log");
    let copy = tmp.path().join("logrotate.conf");
    let conf = std::fs::read_to_string(&logrotate)
        .unwrap()
        .replace("/var/log/cpuplan-hook.log", log.to_str().unwrap());
    std::fs::write(&copy, conf).unwrap();
    let config = tmp.path().join("hook.json");
    std::fs::write(
        &config,
        serde_json::to_vec(&serde_json::json!({
            "log": log, "claims_dir": operator.path().join("claims")
        }))
        .unwrap(),
    )
    .unwrap();
    let hook = at("/usr/libexec/cpuplan/cpuplan-hook");
    let hook_line = || {
        // A stopped container's state: the poststop stage logs one line.
        let mut child = Command::new(&hook)
            .args(["--config", config.to_str().unwrap(), "hook"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(br#"{"ociVersion":"1.0.2","id":"deb-rotate","status":"stopped","bundle":"/nonexistent"}"#)
            .unwrap();
        assert!(child.wait().unwrap().success());
    };
    hook_line();
    let first = std::fs::read_to_string(&log).unwrap();
    assert!(
        first.contains("container deb-rotate: stopped"),
        "the hook logged: {first}"
    );
    let (rc, out, err) = run(
        Path::new("logrotate"),
        &["-f", "-s", state.to_str().unwrap(), copy.to_str().unwrap()],
    );
    assert_eq!(rc, 0, "logrotate -f: {out}{err}");
    assert_eq!(
        std::fs::read_to_string(logs.join("hook.log.1")).unwrap(),
        first
    );
    {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(&log).unwrap();
        assert_eq!(
            (m.len(), m.mode() & 0o777, m.uid()),
            (0, 0o640, 0),
            "create 0640 root"
        );
    }
    hook_line();
    let second = std::fs::read_to_string(&log).unwrap();
    assert!(
        second.contains("container deb-rotate: stopped") && second.lines().count() == 1,
        "the hook logs to the new file: {second}"
    );
    assert_eq!(
        std::fs::read_to_string(logs.join("hook.log.1")).unwrap(),
        first
    );

    // The opt-in registration, installed where the docs say, the repo's.
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(
            &std::fs::read(at("/usr/share/cpuplan/oci/cpuplan-annotated.json")).unwrap()
        )
        .unwrap(),
        repo_json("hooks/oci/cpuplan-annotated.json")
    );

    // cpuplan install and uninstall on this node: the package's files are its own.
    let cpuplan = at("/usr/bin/cpuplan");
    let before = tree(&root);
    let r = root.to_str().unwrap();
    let usr = at("/usr");
    for args in [
        vec!["uninstall", "--root-prefix", r],
        vec![
            "uninstall",
            "--root-prefix",
            r,
            "--prefix",
            usr.to_str().unwrap(),
        ],
        vec!["uninstall", "--root-prefix", r, "--dry-run"],
    ] {
        let (rc, out, err) = run(&cpuplan, &args);
        assert_eq!(rc, 0, "{args:?}: {err}");
        assert!(
            out.starts_with(
                "nothing removed: cpuplan is installed by the Debian package cpuplan: remove it with the package manager (apt remove cpuplan"
            ) || out.starts_with("would change nothing\nnothing removed: cpuplan is installed by the Debian package"),
            "{args:?}: {out}"
        );
        assert!(
            out.contains(&format!(
                "kept {}: installed by the Debian package cpuplan",
                at("/usr/share/containers/oci/hooks.d/cpuplan.json").display()
            )) && out.contains(&format!(
                "kept {}: ",
                at("/etc/cpuplan/hook.json").display()
            )),
            "{args:?}: {out}"
        );
        assert_eq!(tree(&root), before, "{args:?} changed the package's files");
    }
    let (rc, _, err) = run(&cpuplan, &["install", "--root-prefix", r]);
    assert_eq!(rc, 2, "install over the package's files is refused: {err}");
    assert!(
        err.contains("installed by the Debian package cpuplan") && err.contains("cpuplan.json"),
        "{err}"
    );
    assert_eq!(tree(&root), before, "the refused install changed something");

    // The purge takes what the package and its logrotate made, and the operator's enablement.
    let wants = at("/etc/systemd/system/multi-user.target.wants");
    std::fs::create_dir_all(&wants).unwrap();
    std::os::unix::fs::symlink(
        "/usr/lib/systemd/system/cpuplan-nri.service",
        wants.join("cpuplan-nri.service"),
    )
    .unwrap();
    std::os::unix::fs::symlink(
        "/usr/lib/systemd/system/other.service",
        wants.join("other.service"),
    )
    .unwrap();
    std::fs::create_dir_all(at("/var/log")).unwrap();
    for f in [
        "cpuplan-hook.log",
        "cpuplan-hook.log.1",
        "cpuplan-hook.log.2.gz",
        "other.log",
    ] {
        std::fs::write(at("/var/log").join(f), "x").unwrap();
    }
    let (rc, out) = dpkg_in(&root, &["--purge", "cpuplan"]);
    assert_eq!(rc, 0, "dpkg --root --purge: {out}");
    for gone in [
        "/usr/lib/systemd/system/cpuplan-nri.service",
        "/etc/logrotate.d/cpuplan",
        "/etc/systemd/system/multi-user.target.wants/cpuplan-nri.service",
        "/var/log/cpuplan-hook.log",
        "/var/log/cpuplan-hook.log.1",
        "/var/log/cpuplan-hook.log.2.gz",
    ] {
        assert!(
            at(gone).symlink_metadata().is_err(),
            "the purge left {gone}"
        );
    }
    for kept in [
        "/etc/systemd/system/multi-user.target.wants/other.service",
        "/var/log/other.log",
    ] {
        assert!(at(kept).symlink_metadata().is_ok(), "the purge took {kept}");
    }
}
