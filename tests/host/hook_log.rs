//! The hook's log lines, as the binary writes them: RFC 3339 UTC times, no Rust debug text,
//! container text escaped, and the config's `log_level` (`info` by default, `debug`, `warn`).

use std::path::Path;
use std::time::SystemTime;

use common::fakehost::FakeHost;
use common::hookbin;
use cpuplan_hook::rfc3339;
use serde_json::json;

/// Runs the hook binary at createRuntime on `h` (whose state has the id `id`); returns its
/// stderr and the lines of its log file.
fn run(h: &FakeHost, id: &str) -> (String, Vec<String>) {
    let (state, cfg) = h.written();
    let mut state: serde_json::Value = serde_json::from_str(&state).unwrap();
    state["id"] = json!(id);
    let bin = Path::new(env!("CARGO_BIN_EXE_cpuplan-hook"));
    let out = hookbin::run_fed(
        &mut hookbin::create_runtime(bin, &cfg),
        state.to_string().as_bytes(),
    );
    assert!(out.status.success(), "on_error allow: the container starts");
    let log = std::fs::read_to_string(h.dir.path().join("hook.log")).unwrap_or_default();
    (
        String::from_utf8_lossy(&out.stderr).into_owned(),
        log.lines().map(String::from).collect(),
    )
}

/// The line's time, level and message, checking the `TIME LEVEL cpuplan-hook[PID]: ` form.
fn parts(line: &str) -> (&str, &str, &str) {
    let (time, rest) = line.split_once(' ').unwrap();
    let b = time.as_bytes();
    assert!(
        b.len() == 24
            && time.ends_with('Z')
            && [4, 7].iter().all(|&i| b[i] == b'-')
            && b[10] == b'T'
            && [13, 16].iter().all(|&i| b[i] == b':')
            && b[19] == b'.'
            && time
                .char_indices()
                .all(|(i, c)| [4, 7, 10, 13, 16, 19, 23].contains(&i) || c.is_ascii_digit()),
        "not an RFC 3339 UTC time with milliseconds: {line:?}"
    );
    let (level, rest) = rest.split_once(' ').unwrap();
    assert!(
        ["DEBUG", "INFO", "WARN", "ERROR"].contains(&level),
        "{line:?}"
    );
    let (who, message) = rest.split_once(": ").unwrap();
    let pid = who
        .strip_prefix("cpuplan-hook[")
        .and_then(|p| p.strip_suffix(']'))
        .unwrap_or_else(|| panic!("{line:?}"));
    assert!(pid.parse::<u32>().is_ok(), "{line:?}");
    (time, level, message)
}

#[test]
fn lines_carry_rfc3339_utc_times_escaped_text_and_no_debug_text() {
    let mut h = FakeHost::new();
    h.env("NVIDIA_VISIBLE_DEVICES=0");
    h.hook["log_level"] = json!("debug");
    let before = rfc3339(SystemTime::now());
    let (stderr, lines) = run(&h, "ctr\nINFO forged");
    let after = rfc3339(SystemTime::now());
    assert!(lines.len() >= 4, "{lines:#?}");
    for line in &lines {
        let (time, _, message) = parts(line);
        assert!(
            before[..19] <= time[..19] && time[..19] <= after[..19],
            "{time} not within the run ({before} .. {after})"
        );
        for debug_text in ["Some(", "None", "Ok(", "Err(", "\"\\\""] {
            assert!(!message.contains(debug_text), "{debug_text} in {line:?}");
        }
        if message.starts_with("container ") {
            assert!(
                message.starts_with("container ctr\\nINFO forged: "),
                "the id's newline is escaped: {line:?}"
            );
        }
    }
    assert!(
        lines
            .iter()
            .filter(|l| l.contains(": container ctr\\nINFO forged: "))
            .count()
            >= 3,
        "{lines:#?}"
    );
    assert!(
        !lines.iter().any(|l| l.starts_with("INFO forged")),
        "{lines:#?}"
    );
    let levels: Vec<&str> = lines.iter().map(|l| parts(l).1).collect();
    assert!(
        levels.contains(&"DEBUG") && levels.contains(&"INFO"),
        "{lines:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains(": createRuntime with the config ")),
        "{lines:#?}"
    );
    // stderr gets the same lines.
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        lines.iter().map(String::as_str).collect::<Vec<_>>()
    );
}

#[test]
fn log_level_info_is_the_default_and_warn_keeps_only_warnings() {
    let mut h = FakeHost::new();
    h.env("NVIDIA_VISIBLE_DEVICES=0");
    let (_, lines) = run(&h, "a");
    let levels: Vec<&str> = lines.iter().map(|l| parts(l).1).collect();
    assert_eq!(levels, ["INFO"], "one line per container: {lines:#?}");

    // A planning problem: a GPU of the spec's linux.devices the driver does not list (an
    // unknown id in the env is a note, an INFO line, never a problem).
    let mut h = FakeHost::new();
    h.gpus(&[9]);
    h.hook["log_level"] = json!("warn");
    let (_, lines) = run(&h, "b");
    let levels: Vec<&str> = lines.iter().map(|l| parts(l).1).collect();
    assert!(
        !levels.is_empty() && levels.iter().all(|l| *l == "WARN"),
        "the planning problem only: {lines:#?}"
    );
}

#[test]
fn a_bad_log_level_names_file_and_key_and_the_rest_still_logs_where_it_says() {
    let mut h = FakeHost::new();
    h.hook["log_level"] = json!("loud");
    let (stderr, lines) = run(&h, "c");
    let cfg = h.dir.path().join("hook.json");
    assert!(
        stderr.contains(&format!(
            "hook config {}: key \"log_level\": \"loud\" is not \"warn\", \"info\" or \"debug\"",
            cfg.display()
        )),
        "{stderr}"
    );
    // The config is unusable, but its valid `log` still holds: the problem is in its log file.
    assert!(lines.iter().any(|l| l.contains("log_level")), "{lines:#?}");
}

#[test]
fn a_huge_tenant_value_makes_a_short_line_with_its_length() {
    // A 250 KB setting annotation and a 250 KB NVIDIA_VISIBLE_DEVICES: each is quoted cut at 256
    // bytes, with its full length, in the log file and on stderr.
    let mut h = FakeHost::new();
    h.spec["annotations"] = json!({"cpuplan.step-thread-core": "f".repeat(250_000)});
    let (stderr, lines) = run(&h, "big");
    let mut h2 = FakeHost::new();
    h2.env(&format!("NVIDIA_VISIBLE_DEVICES=x{}", "9".repeat(250_000)));
    let (stderr2, lines2) = run(&h2, "big2");
    for (what, stderr, lines) in [("annotation", stderr, lines), ("env", stderr2, lines2)] {
        assert!(!lines.is_empty(), "{what}: no log");
        for line in stderr.lines().chain(lines.iter().map(String::as_str)) {
            assert!(line.len() < 2048, "{what}: a {}-byte line", line.len());
        }
        assert!(
            lines.iter().any(|l| l.contains("… (cut, 250000 bytes)")
                || l.contains("… (cut, 250001 bytes)")),
            "{what}: {lines:#?}"
        );
    }
}
