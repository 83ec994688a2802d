use super::*;

#[test]
fn the_runtime_s_config_replaces_the_file_s_and_a_bad_one_fails_configure() {
    let h = PlanHandler::new(HookConfig::default(), "10-cpuplan", true);
    h.configure_with("").unwrap();
    assert_eq!(h.config(), HookConfig::default(), "no config given: kept");
    h.configure_with(r#"{"nri_dir": "/t/nri", "claims_dir": "/t/claims", "on_error": "deny"}"#)
        .unwrap();
    let c = h.config();
    assert_eq!(c.nri_dir, Path::new("/t/nri"));
    assert_eq!(c.claims_dir, Path::new("/t/claims"));
    assert_eq!(c.on_error, OnError::Deny);
    let x = ContainerId::parse("x").unwrap();
    assert_eq!(h.planner().dirs.dir(&x), Path::new("/t/nri/x"));
    let e = h
        .configure_with(r#"{"step_thread_core": "fast"}"#)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(RUNTIME_CONFIG) && e.contains("step_thread_core"),
        "{e}"
    );
    assert_eq!(h.config(), c, "a bad config changes nothing");
    h.configure_with(r#"{"bogus": 1}"#).unwrap_err();
    // The runtime's config is held to the file's rule for the claims directory: none below a
    // directory others may write.
    let e = h
        .configure_with(r#"{"claims_dir": "/tmp/cpuplan/claims"}"#)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(RUNTIME_CONFIG)
            && e.contains(r#"key "claims_dir": "/tmp/cpuplan/claims" is refused: /tmp (owner"#),
        "{e}"
    );
    assert_eq!(h.config(), c);
}

#[test]
fn a_launched_plugin_holds_the_nri_dir_of_its_configuration_or_fails_configure() {
    // Under /run (root's, 0755): a claims directory there is the operator's; none under /tmp is.
    let t = tempfile::tempdir_in("/run").unwrap();
    let config = |d: &str| {
        serde_json::json!({"nri_dir": t.path().join(d), "claims_dir": t.path().join("claims")})
            .to_string()
    };
    let first = PlanHandler::new(HookConfig::default(), "10-cpuplan", true);
    first.hold_at_configure();
    first.configure_with(&config("a")).unwrap();
    assert!(t
        .path()
        .join("a")
        .join(super::super::instance::LOCK_FILE)
        .is_file());
    // Another one of that directory fails its registration, naming the one there.
    let second = PlanHandler::new(HookConfig::default(), "10-cpuplan", true);
    second.hold_at_configure();
    let e = second.configure_with(&config("a")).unwrap_err().to_string();
    assert!(
        e.contains("one plugin per nri_dir") && e.contains(&format!("pid {}", std::process::id())),
        "{e}"
    );
    // Its own directory is its; configured again for another, it moves there.
    second.configure_with(&config("b")).unwrap();
    first.configure_with(&config("b")).unwrap_err();
    assert_eq!(first.config().nri_dir, t.path().join("a"), "kept");
    second.configure_with(&config("c")).unwrap();
    first.configure_with(&config("b")).unwrap();
}

#[test]
fn the_plugin_s_own_pod_is_found_in_its_cgroup() {
    let uid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
    for text in [
        format!("4:cpu,cpuacct:/kubepods/besteffort/pod{uid}/0123abcd\n"),
        format!("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-0123.scope\n", uid.replace('-', "_")),
        format!("12:pids:/\n4:cpu:/kubepods/pod{uid}/c\n"),
    ] {
        assert_eq!(pod_uid_of_cgroup(&text).as_deref(), Some(uid), "{text}");
    }
    for none in [
        "0::/user.slice/session-1.scope\n",
        "4:cpu:/podman/pod\n",
        "",
    ] {
        assert_eq!(pod_uid_of_cgroup(none), None, "{none}");
    }
}

#[test]
fn a_mount_at_or_under_the_plan_directory_covers_it() {
    let dir = Path::new("/run/cpuplan");
    for covered in [
        "/run/cpuplan",
        "/run/cpuplan/",
        "/run/cpuplan/data",
        "/run/x/../cpuplan",
    ] {
        assert!(at_or_under(covered, dir), "{covered}");
    }
    for apart in ["/run", "/run/cpuplan2", "/var/run/cpuplan", "/", "data"] {
        assert!(!at_or_under(apart, dir), "{apart}");
    }
}

/// A mount at `dest` of `kind` from `source` with `options`.
fn mount(dest: &str, kind: &str, source: &str, options: &[&str]) -> Mount {
    Mount {
        destination: dest.into(),
        r#type: kind.into(),
        source: source.into(),
        options: options.iter().map(|o| o.to_string()).collect(),
    }
}

#[test]
fn the_plan_mount_goes_only_into_the_runtime_s_dev() {
    // containerd's and CRI-O's /dev: a tmpfs of no path.
    let dev = mount(
        "/dev",
        "tmpfs",
        "tmpfs",
        &["nosuid", "strictatime", "mode=755"],
    );
    let volume = mount(
        "/run/cpuplan",
        "bind",
        "/var/lib/kubelet/x",
        &["rbind", "ro"],
    );
    assert_eq!(plan_mount_unsafe(std::slice::from_ref(&dev)), None);
    assert_eq!(
        plan_mount_unsafe(&[dev.clone(), volume]),
        None,
        "the hook's dir is no matter"
    );
    let own = [
        // no /dev of the runtime's: the image's is there
        vec![],
        // a bind at /dev in any spelling, a volume, a tmpfs typed bind
        vec![mount("/dev", "bind", "/dev", &["rbind"])],
        vec![dev.clone(), mount("/dev/", "tmpfs", "/srv/dev", &["bind"])],
        vec![mount("/dev", "tmpfs", "tmpfs", &["rbind"])],
        vec![mount("/dev", "", "/host/dev", &[])],
        // the container's own mount at or under the plan directory, or a path with ..
        vec![dev.clone(), mount("/dev/cpuplan", "bind", "/v", &["rbind"])],
        vec![
            dev.clone(),
            mount("/dev/cpuplan/data", "bind", "/v", &["rbind"]),
        ],
        vec![
            dev.clone(),
            mount("/dev/x/../cpuplan", "bind", "/v", &["rbind"]),
        ],
    ];
    for mounts in own {
        let why = plan_mount_unsafe(&mounts);
        assert!(why.is_some(), "{mounts:?}");
    }
    let why = plan_mount_unsafe(&[mount("/dev", "bind", "/srv/dev", &["rbind"])]).unwrap();
    assert!(
        why.contains("/dev is its own mount (bind from /srv/dev)"),
        "{why}"
    );
}

#[test]
fn a_container_that_mounts_the_plugin_s_directories_is_its_own() {
    let config = HookConfig {
        nri_dir: "/run/cpuplan/nri".into(),
        claims_dir: "/run/cpuplan/claims".into(),
        ..HookConfig::default()
    };
    let p = Planner::new(config, "10-cpuplan", &Arc::default(), &Arc::default());
    let with = |source: &str| Container {
        mounts: vec![nri_plugin::api::Mount {
            destination: "/x".into(),
            source: source.into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let pod = PodSandbox::default();
    for own in [
        "/run/cpuplan",
        "/run",
        "/",
        "/run/cpuplan/nri/c1",
        "/run/cpuplan/claims",
    ] {
        assert!(p.plugin_s_own(&pod, &with(own)).is_some(), "{own}");
    }
    for other in ["/run/cpuplan2", "/var/lib/data", "tmpfs", "/run/other"] {
        assert!(p.plugin_s_own(&pod, &with(other)).is_none(), "{other}");
    }
}

#[test]
fn a_refusal_s_text_is_the_problem_s_once_as_the_runtime_gets_it() {
    let problem = Problem::spec(Why("linux.resources.cpu.quota: -5".into()));
    let create = Refused::Create {
        id: "c1".into(),
        problem: problem.clone(),
    };
    assert_eq!(
        create.to_string(),
        "cpuplan: container c1: linux.resources.cpu.quota: -5"
    );
    // The stub sends the error's chain: the problem is said once.
    assert_eq!(nri_plugin::error::chain(&create), create.to_string());
    let update = Refused::Update {
        id: "c1".into(),
        problem,
    };
    assert_eq!(
        nri_plugin::error::chain(&update),
        "cpuplan: container c1: update: linux.resources.cpu.quota: -5"
    );
}
