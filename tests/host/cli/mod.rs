//! The command lines of `cpuplan` (plan, quota, gpus, explain, claims…), `cpuplan-hook` and
//! `cpuplan-nri`: help, versions, each binary's own commands, and exit statuses.

/// The tests' one run/check/parse helper.
use common::hookbin;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

mod escape;
mod explain;
mod inspect;
mod status;

/// `cpuplan`, the operator's command, which most tests here run.
pub(crate) fn bin() -> Command {
    Command::new(hookbin::cpuplan_bin())
}

pub(crate) fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

pub(crate) fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run cpuplan")
}

/// `path ARGS`, its output.
pub(crate) fn run_of(path: &Path, args: &[&str]) -> Output {
    Command::new(path)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", path.display()))
}

/// `cpuplan ARGS`' stdout, after checking it exited 0 (the message shows stderr).
pub(crate) fn ok_text(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub(crate) fn ok_json(args: &[&str]) -> Value {
    hookbin::ok_json(&format!("{args:?}"), &run(args))
}

/// Exit 2 and exactly one line on stderr that contains `needle`.
pub(crate) fn bad(args: &[&str], needle: &str) {
    bad_of(&hookbin::cpuplan_bin(), args, needle)
}

/// [`bad`] of the binary at `path`.
pub(crate) fn bad_of(path: &Path, args: &[&str], needle: &str) {
    let out = run_of(path, args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains(needle), "{args:?}: {err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn inventory_shows_the_kept_inventory_as_text_and_json() {
    assert!(nix::unistd::geteuid().is_root(), "the tests run as root");
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("inventory");
    let cfg = t.path().join("hook.json");
    std::fs::write(
        &cfg,
        serde_json::json!({ "inventory_dir": dir }).to_string(),
    )
    .unwrap();
    let host = repo("examples/host");
    let args = [
        "--config",
        cfg.to_str().unwrap(),
        "inventory",
        "--json",
        "--root",
        host.to_str().unwrap(),
    ];
    let first = ok_json(&args);
    let said = first["used"].as_str().unwrap();
    assert!(said.contains("read and written"), "{said}");
    let again = ok_json(&args);
    let said = again["used"].as_str().unwrap();
    assert!(said.contains("used (stamp and boot match)"), "{said}");
    assert_eq!(again["inventory"], first["inventory"]);
    let inv = &again["inventory"];
    assert_eq!(inv["online"], "0-223");
    assert_eq!(inv["cores"].as_array().unwrap().len(), 112);
    assert_eq!(inv["cores"][0], "0,112");
    assert_eq!(inv["core_of"][113], 1);
    assert_eq!(inv["nvidia"].as_array().unwrap().len(), 8);
    assert_eq!(again["stamp"]["pci"]["entries"], 17);
    let file = Path::new(again["path"].as_str().unwrap());
    assert!(std::fs::read(file)
        .unwrap()
        .starts_with(b"cpuplan-inventory 6\n"));
    let text = ok_text(&[&args[..3], &args[4..]].concat());
    assert!(text.contains("online CPUs 0-223 (112 cores)"), "{text}");
    assert!(
        text.contains("PCI 0000:18:00.0 class 0x030200 vendor 0x10de"),
        "{text}"
    );
}

#[test]
fn bad_arguments_and_files_exit_2_with_one_line() {
    let host = repo("examples/host");
    let h = host.to_str().unwrap();
    bad(
        &[
            "plan",
            "--setting",
            "fast",
            "--devices",
            "-",
            "--mask",
            "0",
            "--usable",
            "1",
        ],
        "\"fast\"",
    );
    bad(
        &[
            "plan",
            "--setting",
            "auto",
            "--devices",
            "-",
            "--mask",
            "3-1",
            "--usable",
            "1",
        ],
        "\"3-1\"",
    );
    bad(
        &[
            "plan",
            "--setting",
            "auto",
            "--devices",
            "-",
            "--mask",
            "0-3",
            "--usable",
            "x",
        ],
        "--usable \"x\"",
    );
    bad(
        &[
            "plan",
            "--setting",
            "auto",
            "--devices",
            "-",
            "--mask",
            "0-3",
        ],
        "--usable is required",
    );
    bad(
        &[
            "plan",
            "--setting",
            "9",
            "--devices",
            "-",
            "--mask",
            "0-3",
            "--usable",
            "2",
            "--root",
            h,
        ],
        "9",
    );
    bad(&["plan", "--bogus"], "unknown option --bogus");
    bad(
        &["gpus", "--like", "0000:77:00.0", "--root", h],
        "0000:77:00.0",
    );
    bad(&["gpus", "--like", "zz"], "\"zz\" is not a PCI address");
    bad(
        &["--config", "/nonexistent/hook.json", "claims"],
        "cannot read hook config /nonexistent/hook.json",
    );
    bad(
        &["explain", "--bundle", "x", "--root", "/nonexistent-root"],
        "--root \"/nonexistent-root\": no such directory",
    );
    bad(
        &[
            "explain",
            "--bundle",
            "x",
            "--topology-root",
            "/nonexistent-t",
        ],
        "--topology-root \"/nonexistent-t\": no such directory",
    );
    for usable in ["0", "-1", "x"] {
        bad(
            &[
                "plan",
                "--setting",
                "off",
                "--devices",
                "",
                "--mask",
                "0-3",
                "--usable",
                usable,
                "--root",
                h,
            ],
            "is not a count of at least 1",
        );
    }
    bad(
        &[
            "plan",
            "--setting",
            "off",
            "--devices",
            "",
            "--mask",
            "0-300",
            "--usable",
            "2",
            "--root",
            h,
        ],
        "CPUs 224-300 are not among the host's online CPUs 0-223",
    );
    bad(&["quota", "--pid", "abc"], "\"abc\"");
    bad(
        &["quota", "--root", "/nonexistent-root", "--pid", "1"],
        "--root \"/nonexistent-root\": no such directory",
    );
    let empty_root = tempfile::tempdir().unwrap();
    let r = empty_root.path().to_str().unwrap();
    bad(
        &["quota", "--root", r, "--pid", "1"],
        &format!("{r}/proc/1/cgroup"),
    );
    bad(
        &["explain", "--bundle", "/nonexistent-bundle"],
        "/nonexistent-bundle/config.json",
    );
    let t = tempfile::tempdir().unwrap();
    let cfg = t.path().join("hook.json");
    std::fs::write(&cfg, r#"{"cpuset": "sometimes"}"#).unwrap();
    bad(&["check-config", cfg.to_str().unwrap()], "hook.json");
    bad(&["frobnicate"], "unknown subcommand \"frobnicate\"");
}

#[test]
fn every_subcommand_has_help() {
    let (hook, cpuplan) = (hookbin::hook_bin(), hookbin::cpuplan_bin());
    let operator = [
        "explain",
        "inventory",
        "plan",
        "quota",
        "gpus",
        "claims",
        "check-config",
        "install",
        "uninstall",
    ];
    for (path, name, subs) in [
        (&hook, "cpuplan-hook", &["hook", "precreate"][..]),
        (&cpuplan, "cpuplan", &operator[..]),
    ] {
        for sub in subs {
            let out = run_of(path, &[sub, "--help"]);
            assert!(out.status.success(), "{name} {sub}");
            assert!(
                String::from_utf8_lossy(&out.stdout).starts_with(&format!("usage: {name} ")),
                "{name} {sub}"
            );
        }
        let out = run_of(path, &["--help"]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("subcommands:"), "{text}");
        assert!(text.starts_with(&format!("{name}: ")), "{text}");
    }
    let out = run_of(&hookbin::nri_bin(), &["--help"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("cpuplan-nri: "));
}

#[test]
fn each_binary_runs_only_its_own_commands() {
    let (hook, nri, cpuplan) = (
        hookbin::hook_bin(),
        hookbin::nri_bin(),
        hookbin::cpuplan_bin(),
    );
    for sub in ["explain", "install", "uninstall", "claims", "status", "nri"] {
        bad_of(&hook, &[sub], &format!("unknown subcommand \"{sub}\""));
    }
    for sub in ["hook", "precreate", "nri"] {
        bad_of(&cpuplan, &[sub], &format!("unknown subcommand \"{sub}\""));
    }
    // The plugin takes options only: a subcommand word is refused.
    for sub in ["install", "nri", "hook"] {
        bad_of(&nri, &[sub], "takes no arguments");
    }
    // Each --help lists its own commands and none of the others'.
    let help = |p: &Path| String::from_utf8_lossy(&run_of(p, &["--help"]).stdout).into_owned();
    let (h, c) = (help(&hook), help(&cpuplan));
    for other in ["  explain", "  install", "  nri"] {
        assert!(!h.contains(other), "{other} in cpuplan-hook --help: {h}");
    }
    for other in ["  hook ", "  precreate", "  nri"] {
        assert!(!c.contains(other), "{other} in cpuplan --help: {c}");
    }
    // `cpuplan` without a subcommand: its usage, status 2 (it has no default command).
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("subcommands:"));
}

#[test]
fn version_on_every_subcommand() {
    let v = env!("CARGO_PKG_VERSION");
    for (path, name, args) in [
        (hookbin::cpuplan_bin(), "cpuplan", &["--version"][..]),
        (hookbin::cpuplan_bin(), "cpuplan", &["-V"]),
        (hookbin::cpuplan_bin(), "cpuplan", &["plan", "--version"]),
        (hookbin::hook_bin(), "cpuplan-hook", &["--version"]),
        (hookbin::hook_bin(), "cpuplan-hook", &["hook", "--version"]),
        (hookbin::nri_bin(), "cpuplan-nri", &["--version"]),
    ] {
        let out = run_of(&path, args);
        assert!(out.status.success(), "{name} {args:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{name} {v}\n"),
            "{args:?}"
        );
    }
}

#[test]
fn a_bare_command_on_a_terminal_prints_the_usage_instead_of_waiting() {
    // `script` gives the command a pseudo-terminal as stdin; `timeout` would end a wait.
    let out = Command::new("script")
        .args([
            "-qec",
            &format!("timeout 5 {}", hookbin::hook_bin().display()),
            "/dev/null",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run script");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("stdin is a terminal") && text.contains("subcommands:"),
        "{text}"
    );
}

#[test]
fn check_config_says_ok_or_what_is_wrong_with_exit_2() {
    let d = tempfile::tempdir().unwrap();
    let good = d.path().join("good.json");
    std::fs::write(&good, r#"{"step_thread_core": "auto", "on_error": "deny"}"#).unwrap();
    let typo = d.path().join("typo.json");
    std::fs::write(&typo, r#"{"step_thread_cor": "auto"}"#).unwrap();
    let missing = d.path().join("missing.json");
    let (g, t, m) = (
        good.to_str().unwrap(),
        typo.to_str().unwrap(),
        missing.to_str().unwrap(),
    );
    for args in [vec!["check-config", g], vec!["--config", g, "check-config"]] {
        let out = run(&args);
        assert!(out.status.success(), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), format!("ok: {g}\n"));
        assert!(out.stderr.is_empty());
    }
    bad(
        &["check-config", t],
        &format!("hook config {t}: unknown field `step_thread_cor`"),
    );
    bad(&["--config", t, "check-config"], "step_thread_cor");
    bad(
        &["check-config", m],
        &format!("cannot read hook config {m}"),
    );
    bad(&["check-config", g, t], "at most one FILE");
}

#[test]
fn a_bad_config_names_the_key_and_the_value_in_one_line() {
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("hook.json");
    let c = cfg.to_str().unwrap();
    let (b, h) = (repo("examples/bundle"), repo("examples/host"));
    let (b, h) = (b.to_str().unwrap(), h.to_str().unwrap());
    for (text, needle) in [
        (
            r#"{"on_error": true}"#,
            r#"key "on_error": true is not "allow" or "deny""#,
        ),
        (
            r#"{"claim_wait_ms": "2000"}"#,
            r#"key "claim_wait_ms": "2000" is not a whole number of milliseconds"#,
        ),
        (r#"{"on_error": 1}"#, r#"key "on_error": 1 is not"#),
        ("[]", "the file holds an array, not an object of keys"),
        (
            r#"{"dir": "/run/cpuplan\u0000"}"#,
            r#"key "dir": "/run/cpuplan\0" holds a NUL byte"#,
        ),
        (
            r#"{"claims_dir": "/etc"}"#,
            r#"key "claims_dir": "/etc" is a system directory"#,
        ),
        (
            r#"{"claim_wait_ms": 15000}"#,
            r#"key "claim_wait_ms": 15000 is over 8000"#,
        ),
    ] {
        std::fs::write(&cfg, text).unwrap();
        let line = format!("hook config {c}: {needle}");
        bad(&["check-config", c], &line);
        bad_of(&hookbin::nri_bin(), &["--config", c], &line);
        // The commands that diagnose go on, after that line as a warning.
        for args in [
            &[
                "--config",
                c,
                "explain",
                "--bundle",
                b,
                "--root",
                h,
                "--no-inventory",
            ][..],
            &[
                "explain",
                "--json",
                "--no-inventory",
                "--bundle",
                b,
                "--config",
                c,
            ],
        ] {
            let out = run(args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{args:?}: {err}");
            assert!(
                err.starts_with(&format!("cpuplan: warning: {line}")),
                "{err}"
            );
        }
    }
}

#[test]
fn claims_lists_the_claims_of_a_broken_config_after_one_warning_line() {
    let d = common::operator_dir::tempdir();
    let claims = d.path().join("claims");
    // A claim of this test process, as the hook would take it.
    common::operator_dir::claim_as_this_process(&claims, "web", "/b/web", &["0000:3b:00.0"]);
    let cfg = d.path().join("hook.json");
    std::fs::write(
        &cfg,
        format!(
            r#"{{"claims_dir": "{}", "on_error": true}}"#,
            claims.display()
        ),
    )
    .unwrap();
    let c = cfg.to_str().unwrap();
    for json in [false, true] {
        let mut args = vec!["--config", c, "claims"];
        if json {
            args.push("--json");
        }
        let out = run(&args);
        let (stdout, err) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stdout}{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with(&format!(
                "cpuplan: warning: hook config {c}: key \"on_error\": true"
            )),
            "{err}"
        );
        if json {
            let v: Value = serde_json::from_str(&stdout).unwrap();
            assert_eq!(v[0]["address"], "0000:3b:00.0", "{v}");
            assert_eq!(v[0]["holder"]["container"], "web", "{v}");
        } else {
            assert!(
                stdout.starts_with("0000:3b:00.0  container web  bundle /b/web"),
                "{stdout}"
            );
        }
    }
}

#[test]
fn install_refuses_an_existing_config_that_fails_to_load_and_changes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("etc/cpuplan/hook.json");
    std::fs::create_dir_all(cfg.parent().unwrap()).unwrap();
    std::fs::write(&cfg, r#"{"step_thread_cor": "auto"}"#).unwrap();
    let (prefix, hooks) = (d.path().join("prefix"), d.path().join("hooks.d"));
    let args = [
        "--config",
        cfg.to_str().unwrap(),
        "install",
        "--prefix",
        prefix.to_str().unwrap(),
        "--hooks-dir",
        hooks.to_str().unwrap(),
        "--allow-dynamic",
    ];
    bad(&args, "unknown field `step_thread_cor`");
    bad(&args, "nothing was changed");
    assert!(
        !prefix.exists() && !hooks.exists(),
        "install wrote something"
    );
    assert_eq!(
        std::fs::read_to_string(&cfg).unwrap(),
        r#"{"step_thread_cor": "auto"}"#
    );
}

#[test]
fn the_words_come_from_argv_and_one_that_is_not_utf8_is_named() {
    use std::os::unix::ffi::OsStrExt;
    // The words are main's argv (src/cli/mod.rs): a command that takes them works at all only
    // because they arrive; an option's value in them is used.
    assert!(
        ok_text(&["gpus", "--root", repo("examples/host").to_str().unwrap()])
            .contains("0000:18:00.0")
    );
    // A word that is not UTF-8: one line naming its place and its bytes (escaped), status 2.
    let out = bin()
        .arg("plan")
        .arg(std::ffi::OsStr::from_bytes(b"--root=/x\xff"))
        .output()
        .expect("run cpuplan");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("argument 2 is not UTF-8: --root=/x"), "{err}");
    assert!(out.stdout.is_empty());
}
