//! The functions the fuzz targets drive, one per target: each parses untrusted bytes the way the
//! hook does and checks what must hold (no panic; a parsed CPU list formats back to itself).
//! `tests/host/fuzz_regressions.rs` feeds every saved input under `fuzz/regressions/<target>/` to these.
#![allow(dead_code)]

use std::path::Path;

/// A CPU list (sysfs form): parse, and a parsed list formats to text that parses to the same set.
pub fn cpu_list(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(set) = cpuplan::parse_cpu_list(&text) {
        let again = cpuplan::format_cpu_list(&set);
        assert_eq!(
            cpuplan::parse_cpu_list(&again).expect("a formatted list parses"),
            set,
            "{text:?} -> {again:?}"
        );
        assert!(set.iter().all(|c| c <= cpuplan::MAX_CPU));
    }
}

/// `/proc/self/mountinfo`.
pub fn mountinfo(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(mounts) = cpuplan::fuzzing::parse_mountinfo(&text) {
        for m in &mounts {
            assert!(m.mount_point.starts_with('/'));
            let _ = m.super_option_list().count();
        }
    }
    for line in text.lines() {
        let _ = cpuplan::fuzzing::decode_octal(line);
    }
}

/// `/proc/<pid>/cgroup`, then each path translated against a mount root taken from the input.
pub fn proc_cgroup(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (roots, lines) = text.split_once("\n\n").unwrap_or(("/", &text));
    if let Ok(parsed) = cpuplan::fuzzing::parse_proc_cgroup(lines) {
        for l in &parsed {
            let _ = l.is_v2();
            for root in roots.lines() {
                if let Some(parts) = cpuplan::fuzzing::translate(&l.path, root) {
                    assert!(parts
                        .iter()
                        .all(|p| *p != ".." && *p != "." && !p.is_empty()));
                }
            }
        }
    }
}

/// cgroup limit files: `cpu.max`, `cpu.cfs_quota_us`, `cpu.cfs_period_us`.
pub fn cgroup_limits(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(Some(q)) = cpuplan::fuzzing::parse_cpu_max(&text) {
        assert!(q.is_finite() && q > 0.0, "{text:?} -> {q}");
    }
    if let Ok(Some(q)) = cpuplan::fuzzing::parse_cfs_quota(&text) {
        assert!(q > 0);
    }
    if let Ok(p) = cpuplan::fuzzing::parse_cfs_period(&text) {
        assert!(p > 0);
    }
}

/// `NVIDIA_VISIBLE_DEVICES`.
pub fn visible_devices(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match cpuplan::gpu::nvidia::parse_visible_devices(Some(&text)) {
        Ok(cpuplan::gpu::nvidia::VisibleDevices::List(ids)) => assert!(!ids.is_empty()),
        Ok(_) => {}
        Err(e) => assert!(e.to_string().contains("NVIDIA_VISIBLE_DEVICES")),
    }
}

/// An NVIDIA `information` file.
pub fn nvidia_info(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let path = Path::new("/proc/driver/nvidia/gpus/0000:3b:00.0/information");
    if let Err(e) = cpuplan::gpu::nvidia::parse_information(path, &text) {
        assert!(e.to_string().contains("information"));
    }
}

/// The OCI state on the hook's stdin.
pub fn state(data: &[u8]) {
    if let Ok(s) = cpuplan_hook::fuzzing::read_state(data) {
        assert!(!s.id().is_empty());
        assert!(s.bundle().is_absolute());
        let _ = (s.pid(), s.stopped());
    }
}

/// The hook config (`hook.json`) and a bundle's `config.json`.
pub fn config(data: &[u8]) {
    let path = Path::new("/etc/cpuplan/hook.json");
    if let Err(e) = cpuplan_hook::config::HookConfig::parse(path, data) {
        assert!(e.to_string().contains("/etc/cpuplan/hook.json"));
    }
    let config_json = Path::new("/bundle/config.json");
    match cpuplan_hook::fuzzing::parse_spec(data, config_json, Path::new("/bundle")) {
        Ok(spec) => {
            assert!(spec
                .env
                .keys()
                .all(|k| cpuplan_hook::fuzzing::env_of_interest(k)));
            assert!(spec.annotations.keys().all(|k| k.starts_with("cpuplan.")));
        }
        Err(e) => assert!(e.to_string().contains("/bundle/config.json")),
    }
}

/// A target's function.
pub type Target = fn(&[u8]);

/// Every target by name, as `fuzz/fuzz_targets/<name>.rs` and `fuzz/regressions/<name>/` name them.
pub const TARGETS: &[(&str, Target)] = &[
    ("cpu_list", cpu_list),
    ("mountinfo", mountinfo),
    ("proc_cgroup", proc_cgroup),
    ("cgroup_limits", cgroup_limits),
    ("visible_devices", visible_devices),
    ("nvidia_info", nvidia_info),
    ("state", state),
    ("config", config),
];
