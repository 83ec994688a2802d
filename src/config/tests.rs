//! The hook config's tests: parsing, defaults, and what each bad value says.

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
    ] {
        let e = parse(text).unwrap_err().to_string();
        assert!(
            e.contains("/etc/cpuplan/hook.json") && e.contains(needle),
            "{text}: {e}"
        );
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
