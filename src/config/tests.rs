//! The hook config's tests: parsing, defaults, and what each bad value says.

use super::checks::{is_system_dir, SYSTEM_DIRS};
use super::*;

fn parse(s: &str) -> Result<HookConfig, ConfigError> {
    HookConfig::parse(Path::new("/etc/cpuplan/hook.json"), s.as_bytes())
}

#[test]
fn missing_file_means_defaults() {
    let d = tempfile::tempdir().unwrap();
    assert_eq!(
        HookConfig::load(&d.path().join("none.json")).unwrap(),
        HookConfig::default()
    );
}

#[test]
fn every_key() {
    let c = parse(
        r#"{"step_thread_core": 3, "cpuset": "keep", "dir": "/run/x", "claims_dir": "/tmp/c",
            "on_error": "deny", "log": "stderr", "root": "/r", "claim_wait_ms": 10,
            "log_level": "debug"}"#,
    )
    .unwrap();
    assert_eq!(c.step_thread_core, Setting::Cpu(3));
    assert_eq!(c.cpuset, CpusetRule::Keep);
    assert_eq!(c.dir, PathBuf::from("/run/x"));
    assert_eq!(c.on_error, OnError::Deny);
    assert_eq!(c.log, None);
    assert_eq!(c.log_level, LogLevel::Debug);
    assert_eq!(
        parse(r#"{"log_level": "warn"}"#).unwrap().log_level,
        LogLevel::Warn
    );
    assert_eq!(parse("{}").unwrap().log_level, LogLevel::Info);
    assert_eq!(
        c.topology_root,
        PathBuf::from("/r"),
        "topology_root defaults to root"
    );
    assert_eq!(c.claim_wait_ms, 10);
    assert_eq!(c.gpu_sources, DEFAULT_GPU_SOURCES);
    assert_eq!(
        parse(r#"{"gpu_sources": ["env", "devices", "env"]}"#)
            .unwrap()
            .gpu_sources,
        [GpuSource::Env, GpuSource::Devices]
    );
    assert_eq!(
        parse(r#"{"step_thread_core": "off"}"#)
            .unwrap()
            .step_thread_core,
        Setting::Off
    );
    assert_eq!(parse("{}").unwrap().pool_split, PoolSplit::PerProcess);
    assert_eq!(
        parse(r#"{"pool_split": "off"}"#).unwrap().pool_split,
        PoolSplit::Off
    );
    assert_eq!(
        parse(r#"{"topology_root": "/t"}"#).unwrap().topology_root,
        PathBuf::from("/t")
    );
}

#[test]
fn bad_keys_and_values_name_file_and_key() {
    for (text, needle) in [
        (r#"{"nope": 1}"#, "nope"),
        (r#"{"cpuset": "all"}"#, "all"),
        (r#"{"step_thread_core": "fast"}"#, "step_thread_core"),
        (r#"{"step_thread_core": true}"#, "step_thread_core"),
        (
            r#"{"pool_split": "one"}"#,
            "key \"pool_split\": pool_split \"one\" is not per-process or off",
        ),
        (
            r#"{"pool_split": 1}"#,
            "key \"pool_split\": pool_split \"1\"",
        ),
        (r#"{"dir": "run/x"}"#, "dir"),
        (r#"{"dir": "/run/../etc"}"#, "dir"),
        (r#"{"dir": "/"}"#, "dir"),
        (r#"{"log": "relative.log"}"#, "log"),
        (r#"{"root": "r"}"#, "root"),
        (r#"{"on_error": "maybe"}"#, "maybe"),
        (r#"{"log_level": "trace"}"#, "key \"log_level\": \"trace\""),
        (r#"{"log_level": 3}"#, "log_level"),
        (
            r#"{"gpu_sources": ["devices", "bios"]}"#,
            "\"bios\" is not devices, nodes, mounts or env",
        ),
        (r#"{"gpu_sources": "env"}"#, "gpu_sources"),
        ("{", "EOF"),
        // A wrong type names the key and quotes the value.
        (
            r#"{"on_error": true}"#,
            r#"key "on_error": true is not "allow" or "deny""#,
        ),
        (r#"{"on_error": 1}"#, r#"key "on_error": 1 is not"#),
        (
            r#"{"claim_wait_ms": "2000"}"#,
            r#"key "claim_wait_ms": "2000" is not a whole number of milliseconds"#,
        ),
        (r#"{"claim_wait_ms": -1}"#, r#"key "claim_wait_ms": -1"#),
        (r#"{"cpuset": ["numa"]}"#, r#"key "cpuset": ["numa"]"#),
        (
            r#"{"claims_dir": 7}"#,
            r#"key "claims_dir": 7 is not a path"#,
        ),
        (r#"{"log": false}"#, r#"key "log": false"#),
        // A file that is not an object says what it holds.
        ("[1, 2]", "the file holds an array, not an object of keys"),
        ("\"x\"", "the file holds a string, not an object of keys"),
        ("null", "the file holds null"),
        // A NUL in any path.
        (
            r#"{"dir": "/run/x\u0000y"}"#,
            r#"key "dir": "/run/x\0y" holds a NUL byte"#,
        ),
        (r#"{"root": "/r\u0000"}"#, r#"key "root""#),
        (r#"{"log": "/var/log/x\u0000"}"#, r#"key "log""#),
        // System directories, whatever their spelling, and `..`.
        (
            r#"{"claims_dir": "/etc"}"#,
            r#"key "claims_dir": "/etc" is a system directory"#,
        ),
        (
            r#"{"claims_dir": "/"}"#,
            r#"key "claims_dir": "/" is a system directory"#,
        ),
        (r#"{"claims_dir": "//tmp/"}"#, "is a system directory"),
        (r#"{"nri_dir": "/var/lib"}"#, r#"key "nri_dir""#),
        (r#"{"inventory_dir": "/lib64"}"#, r#"key "inventory_dir""#),
        (
            r#"{"inventory_dir": "/usr/./local"}"#,
            "is a system directory",
        ),
        (
            r#"{"dir": "/proc"}"#,
            r#"key "dir": "/proc" is a system directory"#,
        ),
        (
            r#"{"claims_dir": "/run/cpuplan/../../etc"}"#,
            "holds a .. component",
        ),
        // A wait the shipped registrations' timeout cannot hold, saying the figure.
        (
            r#"{"rank_placement": "on"}"#,
            r#"key "rank_placement": "on" is not auto or off"#,
        ),
        (
            r#"{"rank_placement": 1}"#,
            r#"key "rank_placement": 1 is not auto or off"#,
        ),
        (
            r#"{"claim_wait_ms": 8001}"#,
            "8001 is over 8000: the hook's registrations time it out after 10 s",
        ),
    ] {
        let e = parse(text).unwrap_err().to_string();
        assert!(
            e.contains("/etc/cpuplan/hook.json") && e.contains(needle),
            "{text}: {e}"
        );
    }
}

#[test]
fn every_key_is_known_and_an_unknown_one_is_named_after_the_known_ones_values() {
    for key in KEYS {
        parse(&format!(r#"{{"{key}": null}}"#)).unwrap_or_else(|e| panic!("{key}: {e}"));
    }
    let e = parse(r#"{"step_thread_cor": "auto"}"#)
        .unwrap_err()
        .to_string();
    assert!(
        e.ends_with(
            "unknown field `step_thread_cor`, expected one of `step_thread_core`, `pool_split`, \
             `rank_placement`, `cpuset`, `dir`, \
             `claims_dir`, `on_error`, `log`, `log_level`, `root`, `topology_root`, \
             `claim_wait_ms`, `gpu_sources`, `nri_dir`, `inventory_dir`, `metrics`"
        ),
        "{e}"
    );
    let e = parse(r#"{"on_error": "maybe", "surprise": 1}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains(r#"key "on_error": "maybe""#), "{e}");
}

#[test]
fn a_directory_of_cpuplan_s_own_below_a_system_directory_is_fine() {
    let c = parse(
        r#"{"claims_dir": "/var/lib/cpuplan/claims", "nri_dir": "/run/cpuplan/nri",
            "inventory_dir": "/run/cpuplan/inventory", "dir": "/run/cpuplan",
            "claim_wait_ms": 8000}"#,
    )
    .unwrap();
    assert_eq!(c.claims_dir, PathBuf::from("/var/lib/cpuplan/claims"));
    assert_eq!(c.claim_wait_ms, MAX_CLAIM_WAIT_MS);
    assert!(is_system_dir(Path::new("/libx32")) && is_system_dir(Path::new("/etc/")));
    assert!(!is_system_dir(Path::new("/etc/cpuplan")) && !is_system_dir(Path::new("/library/x")));
    for key in ["claims_dir", "nri_dir", "inventory_dir"] {
        for dir in SYSTEM_DIRS {
            let e = parse(&format!(r#"{{"{key}": "{dir}"}}"#)).unwrap_err();
            assert!(
                e.to_string().contains("is a system directory"),
                "{key} {dir}: {e}"
            );
        }
    }
}

#[test]
fn an_unusable_config_keeps_its_valid_on_error_log_and_log_level() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("hook.json");
    std::fs::write(
        &path,
        r#"{"cpuset": "everything", "on_error": "deny", "log": "/tmp/x.log", "log_level": "debug"}"#,
    )
    .unwrap();
    assert!(HookConfig::load(&path).is_err());
    let c = HookConfig::of_unusable(&path);
    assert_eq!(c.on_error, OnError::Deny);
    assert_eq!(c.log, Some(PathBuf::from("/tmp/x.log")));
    assert_eq!(c.log_level, LogLevel::Debug);
    assert_eq!(c.cpuset, CpusetRule::Numa, "the rest is the defaults");
    // Where the off plan goes and the host roots hold too, each where valid on its own.
    std::fs::write(
        &path,
        r#"{"step_thread_cor": 1, "dir": "/run/x", "root": "/r", "topology_root": "t"}"#,
    )
    .unwrap();
    let c = HookConfig::of_unusable(&path);
    assert_eq!(c.dir, PathBuf::from("/run/x"));
    assert_eq!(c.root, PathBuf::from("/r"));
    assert_eq!(
        c.topology_root,
        PathBuf::from("/r"),
        "a relative one is dropped"
    );
    // Each key on its own: a bad one falls back to its default alone.
    std::fs::write(
        &path,
        r#"{"on_error": "maybe", "log": "stderr", "log_level": "loud"}"#,
    )
    .unwrap();
    let c = HookConfig::of_unusable(&path);
    assert_eq!(c.on_error, OnError::Allow);
    assert_eq!(c.log, None);
    assert_eq!(c.log_level, LogLevel::Info);
    // Where the claims are: what `claims` lists from a broken config.
    std::fs::write(
        &path,
        r#"{"on_error": true, "claims_dir": "/srv/cpuplan/claims"}"#,
    )
    .unwrap();
    assert_eq!(
        HookConfig::of_unusable(&path).claims_dir,
        PathBuf::from("/srv/cpuplan/claims")
    );
    std::fs::write(&path, r#"{"on_error": true, "claims_dir": "/etc"}"#).unwrap();
    assert_eq!(
        HookConfig::of_unusable(&path).claims_dir,
        HookConfig::default().claims_dir
    );
    std::fs::write(&path, "{").unwrap();
    assert_eq!(HookConfig::of_unusable(&path), HookConfig::default());
}

#[test]
fn overlapping_nri_dir_claims_dir_and_log_are_refused_in_one_line_naming_both() {
    for (text, a, b) in [
        (
            r#"{"nri_dir": "/d", "claims_dir": "/d/claims"}"#,
            "nri_dir",
            "claims_dir",
        ),
        (
            r#"{"nri_dir": "/d/nri", "claims_dir": "/d"}"#,
            "nri_dir",
            "claims_dir",
        ),
        (
            r#"{"nri_dir": "/d", "claims_dir": "/d/"}"#,
            "nri_dir",
            "claims_dir",
        ),
        // the easy mistake: the DaemonSet's hostPath, above the default claims_dir
        (r#"{"nri_dir": "/run/cpuplan"}"#, "nri_dir", "claims_dir"),
        (
            r#"{"nri_dir": "/p/nri", "log": "/p/nri/p.log"}"#,
            "nri_dir",
            "log",
        ),
        (
            r#"{"claims_dir": "/c", "log": "/c/x.log"}"#,
            "claims_dir",
            "log",
        ),
    ] {
        let e = parse(text).unwrap_err().to_string();
        assert!(
            e.contains(&format!("keys {a:?} and {b:?} overlap")) && !e.contains('\n'),
            "{text}: {e}"
        );
    }
    for ok in [
        r#"{"nri_dir": "/d/nri", "claims_dir": "/d/claims", "log": "/d/log"}"#,
        r#"{"nri_dir": "/d/nri", "claims_dir": "/d/nri2"}"#,
        r#"{"nri_dir": "/x", "log": "stderr"}"#,
    ] {
        parse(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    assert!(parse("{}").is_ok(), "the defaults are apart");
}

#[test]
fn metrics_are_off_by_default_and_on_at_the_address_given() {
    assert_eq!(HookConfig::default().metrics, None);
    assert_eq!(parse(r#"{"metrics": "off"}"#).unwrap().metrics, None);
    let c = parse(r#"{"metrics": {"address": "127.0.0.1:9464"}}"#).unwrap();
    assert_eq!(c.metrics, Some("127.0.0.1:9464".parse().unwrap()));
    let c = parse(r#"{"metrics": {"address": "[::]:9464"}}"#).unwrap();
    assert_eq!(c.metrics, Some("[::]:9464".parse().unwrap()));
}

#[test]
fn a_bad_metrics_value_is_one_line_naming_the_key_and_the_value() {
    for (text, says) in [
        (
            r#"{"metrics": {"address": "localhost:9464"}}"#,
            r#"key "metrics": address "localhost:9464" is not an IP address and port (e.g. "127.0.0.1:9464")"#,
        ),
        (
            r#"{"metrics": {"address": "127.0.0.1"}}"#,
            r#"key "metrics": address "127.0.0.1" is not an IP address and port"#,
        ),
        (
            r#"{"metrics": {"address": 9464}}"#,
            r#"key "metrics": address 9464 is not a string"#,
        ),
        (
            r#"{"metrics": {"port": 9464}}"#,
            r#"key "metrics": unknown field "port" (it takes "address")"#,
        ),
        (
            r#"{"metrics": {}}"#,
            r#"key "metrics": {} has no "address""#,
        ),
        (
            r#"{"metrics": "on"}"#,
            r#"key "metrics": "on" is not "off" or {"address": "IP:PORT"}"#,
        ),
        (
            r#"{"metrics": true}"#,
            r#"key "metrics": true is not "off""#,
        ),
    ] {
        let e = parse(text).unwrap_err().to_string();
        assert!(e.contains(says), "{text}: {e}");
        assert!(!e.contains('\n'), "{text}: one line: {e}");
    }
}

#[test]
fn a_claims_dir_below_a_directory_others_may_write_is_refused_at_load_naming_it() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("hook.json");
    for (dir, at) in [
        ("/tmp/cpuplan/claims", "/tmp (owner uid 0, mode 1777)"),
        (
            "/dev/shm/cpuplan/claims",
            "/dev/shm (owner uid 0, mode 1777)",
        ),
        (
            "/var/tmp/cpuplan/claims",
            "/var/tmp (owner uid 0, mode 1777)",
        ),
    ] {
        let text = format!(r#"{{"claims_dir": "{dir}", "on_error": "deny"}}"#);
        // The parse looks at nothing on the host: the value is a valid path.
        assert!(parse(&text).is_ok(), "{dir}");
        std::fs::write(&path, &text).unwrap();
        let e = HookConfig::load(&path).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "hook config {}: key \"claims_dir\": \"{dir}\" is refused: {at} is writable",
                path.display()
            )) && !e.contains('\n'),
            "{e}"
        );
        // A config that fails to load keeps no such claims directory, and its other keys.
        let kept = HookConfig::of_unusable(&path);
        assert_eq!(kept.claims_dir, HookConfig::default().claims_dir, "{dir}");
        assert_eq!(kept.on_error, OnError::Deny);
    }
    // The defaults are the operator's here: /run is root's 0755.
    assert!(HookConfig::load(&d.path().join("none.json")).is_ok());
}

#[test]
fn a_config_that_is_not_json_still_gives_the_kept_keys_read_before_the_fault() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("hook.json");
    std::fs::write(
        &path,
        "{\n  \"log\": \"/var/log/cpuplan/hook.log\",\n  \"on_error\": \"deny\",\n  \"cpuset\": \"keep\",\n}\n",
    )
    .unwrap();
    let e = HookConfig::load(&path).unwrap_err().to_string();
    assert!(e.contains("trailing comma"), "{e}");
    let c = HookConfig::of_unusable(&path);
    assert_eq!(c.log, Some(PathBuf::from("/var/log/cpuplan/hook.log")));
    assert_eq!(c.on_error, OnError::Deny);
    assert_eq!(c.cpuset, CpusetRule::Numa, "only the kept keys");
    // A key after the fault is not read; one of the kept keys that is bad alone falls back.
    std::fs::write(&path, r#"{"log": "relative.log" "on_error": "deny"}"#).unwrap();
    assert_eq!(HookConfig::of_unusable(&path), HookConfig::default());
}
