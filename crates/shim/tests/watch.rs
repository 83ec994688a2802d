//! Following a plan rewritten while the container runs (the NRI plugin at UpdateContainer):
//! the generation read without blocking, a watch that returns when it changes, a refresh that
//! installs the new plan.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::sample_plan;
use cpuplan::PlanFile;
use cpuplan_shim::{generation, install, installed, refresh_from, watch};

/// Writes the sample plan with `usable` and `generation` to `path`, whole (by rename).
fn write(path: &Path, usable: usize, generation: u64) {
    let mut doc = serde_json::to_value(PlanFile::new(&sample_plan())).unwrap();
    doc["usable"] = usable.into();
    doc["generation"] = generation.into();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, doc.to_string()).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn the_generation_is_read_without_blocking_and_0_where_there_is_none() {
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("plan.json");
    assert_eq!(generation(&path), 0, "no file");
    write(&path, 2, 4);
    assert_eq!(generation(&path), 4);
    std::fs::write(&path, "{\"version\": 1}").unwrap();
    assert_eq!(generation(&path), 0, "a file before generations");
    std::fs::remove_file(&path).unwrap();
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let start = Instant::now();
    assert_eq!(generation(&path), 0, "a FIFO is no plan");
    assert_eq!(
        watch(
            &path,
            0,
            Duration::from_millis(10),
            Some(Duration::from_millis(100))
        ),
        None,
        "the watch times out, never blocked on the FIFO"
    );
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_watch_returns_the_new_generation_and_a_refresh_installs_its_plan() {
    let t = tempfile::tempdir().unwrap();
    let path = t.path().join("plan.json");
    write(&path, 1, 1);
    let first = refresh_from(&path).unwrap();
    assert_eq!(first.file.usable, 1);
    let seen = generation(&path);
    assert_eq!(seen, 1);
    let writer = {
        let path = path.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(150));
            write(&path, 2, 2);
        })
    };
    let now = watch(
        &path,
        seen,
        Duration::from_millis(20),
        Some(Duration::from_secs(10)),
    );
    writer.join().unwrap();
    assert_eq!(now, Some(2));
    assert_eq!(
        installed().unwrap().file.usable,
        1,
        "nothing changes until a refresh"
    );
    let second = refresh_from(&path).unwrap();
    assert_eq!(second.file.usable, 2);
    assert_eq!(installed().unwrap().file.usable, 2);
    assert!(refresh_from(&t.path().join("absent.json")).is_err());
    assert_eq!(
        installed().unwrap().file.usable,
        2,
        "a failed refresh keeps the plan"
    );
    install(None);
}
