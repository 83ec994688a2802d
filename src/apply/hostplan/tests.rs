use super::*;

/// A holder of container `id` of scope `/b`, whose pid is this test's: live with `live`, else
/// with a start time the pid never had (gone, as claims judge holders).
fn holder(id: &str, live: bool) -> Holder {
    let mut h = Holder::of_pid(Path::new("/"), id, "/b", std::process::id())
        .unwrap()
        .unwrap();
    if !live {
        h.start_time += 1;
    }
    h
}

/// A holder whose pid was a child of this test, spawned, killed and reaped: gone for good (a
/// pid taken again runs with a later start time). Never `pid + 1` of this process: that id is
/// often a thread of this very process, started in the same clock tick.
fn gone_child(root: &Path) -> Holder {
    let mut child = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .expect("sleep");
    let h = Holder::of_pid(root, "gone", "/b", child.id())
        .unwrap()
        .expect("the child runs until killed");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        !h.is_live(root).unwrap(),
        "pid {} came back with its start time",
        h.pid
    );
    h
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != ".lock")
        .collect();
    v.sort();
    v
}

const WAIT: Duration = Duration::from_millis(200);

#[test]
fn a_plan_directory_is_held_by_one_live_container_and_released_at_its_poststop() {
    let t = tempfile::tempdir().unwrap();
    let claims = t.path().join("claims");
    let root = Path::new("/");
    let a = holder("a", true);
    assert!(
        !take(&claims, root, "/b", "a", WAIT),
        "none yet, no directory"
    );
    let got = hold(&claims, root, "1-2", &a, WAIT).unwrap();
    assert_eq!(got, Hold::Taken { collected: vec![] });
    assert!(
        !claims.exists(),
        "nothing in (or made as) the claims directory"
    );
    let records = t.path().join("hostplans");
    let listed = names(&records);
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(
        listed.contains(&".plandir.1-2".to_string()) && listed.iter().all(|n| !n.contains("/b")),
        "named by the directory and a hash, never the id or bundle: {listed:?}"
    );
    // Another live container on the same directory: held, nothing changed.
    // (b's pid gone: its poststop below finds it so.)
    let b = holder("b", false);
    match hold(&claims, root, "1-2", &b, WAIT).unwrap() {
        Hold::Held { by, .. } => assert_eq!(by, a),
        other => panic!("{other:?}"),
    }
    assert_eq!(names(&records), listed, "b recorded nothing");
    // On another directory it is free.
    assert!(matches!(
        hold(&claims, root, "1-3", &b, WAIT).unwrap(),
        Hold::Taken { .. }
    ));
    // The same container again (started again, another pid, which has since exited): its own,
    // taken; on the way b's records (its pid gone, its poststop never ran) are collected.
    let a2 = Holder {
        container: a.container.clone(),
        scope: a.scope.clone(),
        ..gone_child(root)
    };
    assert_eq!(
        hold(&claims, root, "1-2", &a2, WAIT).unwrap(),
        Hold::Taken {
            collected: vec![b.clone()]
        }
    );
    assert!(!take(&claims, root, "/b", "b", WAIT), "collected already");
    assert_eq!(names(&records).len(), 2);
    // a's poststop (its record now a2's, whose pid is not this process: gone) removes both.
    assert!(take(&claims, root, "/b", "a", WAIT));
    assert_eq!(names(&records), Vec::<String>::new());
}

#[test]
fn a_poststop_leaves_the_records_of_the_same_container_started_again() {
    let t = tempfile::tempdir().unwrap();
    let claims = t.path().join("claims");
    let root = Path::new("/");
    hold(&claims, root, "1-2", &holder("a", true), WAIT).unwrap();
    // The record's pid (this process) runs: the records are that run's.
    assert!(!take(&claims, root, "/b", "a", WAIT));
    assert_eq!(names(&t.path().join("hostplans")).len(), 2);
}

#[test]
fn a_gone_holder_s_records_are_collected_and_its_directory_taken_over() {
    let t = tempfile::tempdir().unwrap();
    let claims = t.path().join("claims");
    let root = Path::new("/");
    let gone = holder("a", false);
    hold(&claims, root, "1-2", &gone, WAIT).unwrap();
    let b = holder("b", true);
    match hold(&claims, root, "1-2", &b, WAIT).unwrap() {
        Hold::Taken { collected } => assert_eq!(collected, [gone]),
        other => panic!("{other:?}"),
    }
    let records = t.path().join("hostplans");
    // a's container record went; the directory's is b's now, with b's own.
    assert_eq!(names(&records).len(), 2);
    assert_eq!(read_record(&dir_record(&claims, "1-2")).unwrap().holder, b);
}

#[test]
fn collection_is_bounded_and_leaves_live_and_unreadable_records() {
    let t = tempfile::tempdir().unwrap();
    let claims = t.path().join("claims");
    let root = Path::new("/");
    let records = t.path().join("hostplans");
    std::fs::create_dir(&records).unwrap();
    for i in 0..40 {
        let h = holder(&format!("g{i}"), false);
        let rec = Record {
            holder: h.clone(),
            dir: format!("9-{i}"),
        };
        write_record(&dir_record(&claims, &rec.dir), &rec).unwrap();
        write_record(&record(&claims, &h.scope, &h.container), &rec).unwrap();
    }
    assert_eq!(names(&records).len(), 80);
    // A record from before records held their holder (empty), and a link: left alone.
    std::fs::write(records.join(".hostplan.00000000000000ff"), "").unwrap();
    std::os::unix::fs::symlink("/etc/hostname", records.join(".hostplan.00000000000000fe"))
        .unwrap();
    let live = holder("live", true);
    hold(&claims, root, "1-1", &live, WAIT).unwrap();
    let after = names(&records).len();
    // 80 stale + 2 kept + live's 2, less at most COLLECT collected.
    assert!((84 - COLLECT..84).contains(&after), "{after}");
    // Later holds collect the rest; the kept two and the live one's two stay.
    for _ in 0..40 {
        hold(&claims, root, "1-1", &live, WAIT).unwrap();
    }
    let left = names(&records);
    assert_eq!(left.len(), 4, "{left:?}");
    assert!(left.contains(&".hostplan.00000000000000ff".to_string()));
    assert!(std::fs::symlink_metadata(records.join(".hostplan.00000000000000fe")).is_ok());
}

#[test]
fn a_link_planted_as_a_record_is_never_followed() {
    let t = tempfile::tempdir().unwrap();
    let claims = t.path().join("claims");
    let records = t.path().join("hostplans");
    std::fs::create_dir(&records).unwrap();
    let target = t.path().join("elsewhere");
    std::os::unix::fs::symlink(&target, dir_record(&claims, "1-2")).unwrap();
    let e = hold(&claims, Path::new("/"), "1-2", &holder("a", true), WAIT).unwrap_err();
    assert!(e.to_string().contains(".plandir.1-2"), "{e}");
    assert!(!target.exists());
}

#[test]
fn a_hard_link_or_another_user_s_file_planted_as_a_record_is_never_written() {
    let t = tempfile::tempdir().unwrap();
    let claims = t.path().join("claims");
    let records = t.path().join("hostplans");
    std::fs::create_dir(&records).unwrap();
    let target = t.path().join("elsewhere");
    std::fs::write(&target, "keep").unwrap();
    std::fs::hard_link(&target, dir_record(&claims, "1-2")).unwrap();
    let e = hold(&claims, Path::new("/"), "1-2", &holder("a", true), WAIT).unwrap_err();
    assert!(e.to_string().contains("a hard link"), "{e}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    std::fs::remove_file(dir_record(&claims, "1-2")).unwrap();
    std::fs::write(dir_record(&claims, "1-2"), "").unwrap();
    std::os::unix::fs::chown(dir_record(&claims, "1-2"), Some(4242), None).unwrap();
    let e = hold(&claims, Path::new("/"), "1-2", &holder("a", true), WAIT).unwrap_err();
    assert!(e.to_string().contains("owned by uid 4242"), "{e}");
}
