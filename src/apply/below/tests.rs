use std::path::Path;

use nix::sys::stat::Mode;

use super::temps::{runs, temp_name, temp_pid};
use super::write::write_plan_files_in;
use super::*;
use std::os::unix::fs::{symlink, PermissionsExt};

/// Writes each `(name, contents)` into `dir` inside the container's rootfs.
fn write_plan_files(
    proc_root: &Path,
    pid: Option<u32>,
    rootfs: &Path,
    dir: &Path,
    files: &[(&str, &[u8])],
) -> Result<(), RootfsError> {
    write_plan_files_in(&open_rootfs(proc_root, pid, rootfs)?, dir, files).map(drop)
}

fn write(rootfs: &Path, dir: &str) -> Result<(), RootfsError> {
    write_plan_files(
        Path::new("/"),
        None,
        rootfs,
        Path::new(dir),
        &[("plan.env", b"A='1'\n")],
    )
}

#[test]
fn a_strict_umask_still_gives_the_plan_its_modes() {
    // The umask is the process's: the check runs in a child, this
    // test binary again, started with umask 077 as a runtime might run the hook.
    const CHILD: &str = "CPUPLAN_TEST_UMASK_CHILD";
    if std::env::var_os(CHILD).is_some() {
        let t = tempfile::tempdir().unwrap();
        write(t.path(), "/run/cpuplan").unwrap();
        let mode = |p: &str| {
            std::fs::metadata(t.path().join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode("run/cpuplan/plan.env"), 0o644);
        assert_eq!(mode("run/cpuplan"), 0o755);
        assert_eq!(mode("run"), 0o755);
        return;
    }
    let mut child = std::process::Command::new(std::env::current_exe().unwrap());
    child
        .args([
            "--exact",
            "apply::below::tests::a_strict_umask_still_gives_the_plan_its_modes",
        ])
        .env(CHILD, "1");
    // SAFETY: umask(2) is async-signal-safe and allocates nothing.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut child, || {
            nix::libc::umask(0o077);
            Ok(())
        });
    }
    let out = child.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("1 passed"), "the child ran no test: {text}");
}

#[test]
fn creates_dirs_and_files_with_modes() {
    let t = tempfile::tempdir().unwrap();
    write(t.path(), "/run/cpuplan").unwrap();
    let f = t.path().join("run/cpuplan/plan.env");
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "A='1'\n");
    assert_eq!(
        std::fs::metadata(&f).unwrap().permissions().mode() & 0o777,
        0o644
    );
    let d = std::fs::metadata(t.path().join("run/cpuplan")).unwrap();
    assert_eq!(d.permissions().mode() & 0o777, 0o755);
    // Overwrites in place, leaving no temporary file.
    write(t.path(), "/run/cpuplan").unwrap();
    let names: Vec<_> = std::fs::read_dir(t.path().join("run/cpuplan"))
        .unwrap()
        .collect();
    assert_eq!(names.len(), 1);
}

#[test]
fn refuses_symlinked_components() {
    let host = tempfile::tempdir().unwrap();
    let t = tempfile::tempdir().unwrap();
    symlink(host.path(), t.path().join("run")).unwrap();
    let e = write(t.path(), "/run/cpuplan").unwrap_err().to_string();
    assert!(e.contains("symlink"), "{e}");
    assert_eq!(
        std::fs::read_dir(host.path()).unwrap().count(),
        0,
        "nothing written through the link"
    );
}

#[test]
fn replaces_a_planted_file_symlink_without_following_it() {
    let host = tempfile::tempdir().unwrap();
    let secret = host.path().join("shadow");
    std::fs::write(&secret, "secret").unwrap();
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.path().join("run/cpuplan")).unwrap();
    symlink(&secret, t.path().join("run/cpuplan/plan.env")).unwrap();
    write(t.path(), "/run/cpuplan").unwrap();
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "secret");
    let meta = std::fs::symlink_metadata(t.path().join("run/cpuplan/plan.env")).unwrap();
    assert!(meta.file_type().is_file());
}

#[test]
fn a_fifo_is_replaced_without_blocking() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.path().join("run/cpuplan")).unwrap();
    nix::unistd::mkfifo(
        &t.path().join("run/cpuplan/plan.env"),
        Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    write(t.path(), "/run/cpuplan").unwrap();
    assert!(
        std::fs::symlink_metadata(t.path().join("run/cpuplan/plan.env"))
            .unwrap()
            .is_file()
    );
}

#[test]
fn a_directory_in_place_of_the_file_is_an_error() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(t.path().join("run/cpuplan/plan.env/x")).unwrap();
    let e = write(t.path(), "/run/cpuplan").unwrap_err().to_string();
    assert!(e.contains("plan.env") && e.contains("rename"), "{e}");
    assert_eq!(
        std::fs::read_dir(t.path().join("run/cpuplan"))
            .unwrap()
            .count(),
        1,
        "temp file removed"
    );
}

#[test]
fn temporary_names_are_recognised_exactly() {
    let names = ["plan.env", "plan.json"];
    assert_eq!(temp_pid(".plan.env.42.123.tmp", &names), Some(42));
    assert_eq!(temp_pid(".plan.json.7.0.tmp", &names), Some(7));
    let ours = temp_name("plan.env");
    assert_eq!(temp_pid(&ours, &names), Some(std::process::id()));
    for other in [
        "plan.env",
        ".plan.env.tmp",
        ".plan.env.42.tmp",
        ".plan.env.42.x.tmp",
        ".plan.env.-1.2.tmp",
        ".plan.env.42.1.tmp.bak",
        "plan.env.42.1.tmp",
        ".other.42.1.tmp",
        ".plan.envx.42.1.tmp",
    ] {
        assert_eq!(temp_pid(other, &names), None, "{other}");
    }
    assert!(runs(std::process::id()));
    assert!(!runs(u32::MAX));
    assert!(!runs(0));
}

#[test]
fn dot_dot_is_refused() {
    let t = tempfile::tempdir().unwrap();
    assert!(write(t.path(), "/run/../../etc").is_err());
}

#[test]
fn own_pid_is_refused_as_same_namespace() {
    let t = tempfile::tempdir().unwrap();
    let e = write_plan_files(
        Path::new("/"),
        Some(std::process::id()),
        t.path(),
        Path::new("/run/cpuplan"),
        &[],
    )
    .unwrap_err();
    assert!(
        matches!(e, RootfsError::ProcRoot(ProcRootError::SameNamespace(_))),
        "{e}"
    );
    assert!(!t.path().join("run").exists());
}

#[test]
fn a_gone_pid_writes_nothing() {
    let t = tempfile::tempdir().unwrap();
    let e = write_plan_files(
        Path::new("/"),
        Some(u32::MAX - 1),
        t.path(),
        Path::new("/run/cpuplan"),
        &[],
    )
    .unwrap_err();
    assert!(
        matches!(e, RootfsError::ProcRoot(ProcRootError::Process { .. })),
        "{e}"
    );
    assert!(!t.path().join("run").exists());
}

#[test]
fn poststop_removes_only_the_files_written_for_the_container() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    let names = ["plan.env", "plan.json"];
    let files: [(&str, &[u8]); 2] = [
        ("plan.env", b"X=1\n"),
        ("plan.json", br#"{"container":"a"}"#),
    ];
    let dir = Path::new("/run/cpuplan");
    // Nothing there: nothing removed, nothing created.
    assert!(!remove_plan_files_of(r, dir, &names, "plan.json", "a").unwrap());
    assert!(!r.join("run").exists());
    write_plan_files(Path::new("/"), None, r, dir, &files).unwrap();
    // Another container's plan stays.
    assert!(!remove_plan_files_of(r, dir, &names, "plan.json", "b").unwrap());
    assert!(r.join("run/cpuplan/plan.env").exists());
    assert!(remove_plan_files_of(r, dir, &names, "plan.json", "a").unwrap());
    assert!(!r.join("run/cpuplan/plan.env").exists() && !r.join("run/cpuplan/plan.json").exists());
    // A link in the path is never followed out of the rootfs.
    let outside = t.path().join("outside");
    std::fs::create_dir_all(outside.join("cpuplan")).unwrap();
    std::fs::write(outside.join("cpuplan/plan.json"), br#"{"container":"a"}"#).unwrap();
    std::fs::remove_dir_all(r.join("run")).unwrap();
    symlink(&outside, r.join("run")).unwrap();
    assert!(remove_plan_files_of(r, dir, &names, "plan.json", "a").is_err());
    assert!(outside.join("cpuplan/plan.json").exists());
    // A FIFO as plan.json: not opened for reading, nothing removed.
    std::fs::remove_file(r.join("run")).unwrap();
    std::fs::create_dir_all(r.join("run/cpuplan")).unwrap();
    nix::unistd::mkfifo(
        &r.join("run/cpuplan/plan.json"),
        Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    assert!(!remove_plan_files_of(r, dir, &names, "plan.json", "a").unwrap());
}

#[test]
fn an_existing_plan_directory_loses_a_dead_writers_temporaries_a_new_one_is_not_listed() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("run/cpuplan");
    std::fs::create_dir_all(&dir).unwrap();
    // pid u32::MAX never runs: a killed writer's leftover, and a file of another name.
    let stale = format!(".plan.env.{}.1.tmp", u32::MAX);
    std::fs::write(dir.join(&stale), "half").unwrap();
    std::fs::write(dir.join("notes"), "kept").unwrap();
    write(t.path(), "/run/cpuplan").unwrap();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["notes", "plan.env"]);
    // The plan directory as a link (made by the tenant) is refused, not followed, though it
    // is the component the writer makes before it opens.
    let host = tempfile::tempdir().unwrap();
    let t2 = tempfile::tempdir().unwrap();
    std::fs::create_dir(t2.path().join("run")).unwrap();
    symlink(host.path(), t2.path().join("run/cpuplan")).unwrap();
    let e = write(t2.path(), "/run/cpuplan").unwrap_err().to_string();
    assert!(e.contains("symlink"), "{e}");
    assert_eq!(std::fs::read_dir(host.path()).unwrap().count(), 0);
}

#[test]
fn the_writer_says_whether_the_files_are_on_the_rootfs_s_own_filesystem() {
    let on = |rootfs: &Path| {
        write_plan_files_in(
            &open_rootfs(Path::new("/"), None, rootfs).unwrap(),
            Path::new("/run/cpuplan"),
            &[("plan.env", b"A='1'\n")],
        )
        .unwrap()
    };
    let t = tempfile::tempdir().unwrap();
    assert!(
        on(t.path()),
        "a plain directory: the rootfs's own filesystem"
    );
    // A tmpfs over run/ (as runc and podman mount /run): another filesystem.
    let t2 = tempfile::tempdir().unwrap();
    let run = t2.path().join("run");
    std::fs::create_dir(&run).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(&run)
        .status()
        .unwrap();
    assert!(mounted.success(), "mount a tmpfs (the tests run as root)");
    let got = on(t2.path());
    let _ = std::process::Command::new("umount").arg(&run).status();
    assert!(!got, "a tmpfs on run/ is not the rootfs's filesystem");
}

#[test]
fn stale_temporaries_past_the_listing_bound_are_summed_up_and_left_for_a_later_run() {
    use super::temps::MAX_SCAN;
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("cpuplan");
    std::fs::create_dir(&dir).unwrap();
    let many = MAX_SCAN + 904;
    for i in 0..many {
        std::fs::write(dir.join(format!(".plan.env.{}.{i}.tmp", u32::MAX)), "").unwrap();
    }
    std::fs::write(dir.join("notes"), "kept").unwrap();
    let fd = open_dir_in(
        &open_rootfs(Path::new("/"), None, t.path()).unwrap(),
        Path::new("/cpuplan"),
    )
    .unwrap();
    let sweep = || remove_stale_temps_of(&fd, Path::new("/run/cpuplan"), |n| n == "plan.env");
    let first = sweep();
    assert!(first.cut && first.failed == 0, "{first:?}");
    assert!(
        (MAX_SCAN - 1..=MAX_SCAN).contains(&first.removed),
        "{first:?}"
    );
    let line = first.line(Path::new("/run/cpuplan")).unwrap();
    assert!(
        line.starts_with(&format!(
            "removed {} stale temporary file(s) from /run/cpuplan",
            first.removed
        )) && line.contains("the rest wait for a later run"),
        "{line}"
    );
    let second = sweep();
    assert_eq!(second.removed, many - first.removed, "{second:?}");
    assert!(!second.cut);
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(left.len(), 1, "only the other file stays");
    let none = sweep();
    assert_eq!(none.line(Path::new("/run/cpuplan")), None, "nothing to say");
}
