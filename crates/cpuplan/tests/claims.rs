//! GPU claims: all or nothing, stale take-over, release, listing, races and the bounded lock wait.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use cpuplan::{claim_gpus, list_claims, release, ClaimError, ClaimOutcome, Holder};
use nix::fcntl::{Flock, FlockArg};

const WAIT: Duration = Duration::from_secs(5);

/// A fixture root whose `proc/<pid>/stat` gives each pid its start time.
fn proc_root(pids: &[(u32, u64)]) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    for &(pid, start) in pids {
        set_start(root.path(), pid, start);
    }
    root
}

/// Write `<root>/proc/<pid>/stat` with a comm holding spaces and parentheses.
fn set_start(root: &Path, pid: u32, start: u64) {
    let dir = root.join(format!("proc/{pid}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("stat"),
        format!("{pid} (runc:[2:INIT]) (x) S 1 {pid} {pid} 0 -1 4194560 10 0 0 0 3 1 0 0 20 0 1 0 {start} 1000 20 18446744073709551615\n"),
    )
    .unwrap();
}

fn holder(container: &str, pid: u32, start_time: u64) -> Holder {
    Holder {
        container: container.into(),
        pid,
        start_time,
    }
}

fn addrs(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// The names in the claims dir, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

fn claims_dir(tmp: &tempfile::TempDir) -> PathBuf {
    tmp.path().join("run/cpuplan/claims")
}

#[test]
fn claims_are_all_or_nothing_and_name_the_live_holder() {
    let root = proc_root(&[(100, 5000), (200, 6000)]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = claims_dir(&tmp);
    let a = holder("ctr-a", 100, 5000);
    let b = holder("ctr-b", 200, 6000);

    let got = claim_gpus(&dir, root.path(), &a, &addrs(&["0000:2a:00.0"]), WAIT).unwrap();
    assert_eq!(got, ClaimOutcome::Claimed);

    let got = claim_gpus(
        &dir,
        root.path(),
        &b,
        &addrs(&["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0"]),
        WAIT,
    )
    .unwrap();
    assert_eq!(
        got,
        ClaimOutcome::Held {
            address: "0000:2a:00.0".into(),
            by: a.clone()
        }
    );
    // Nothing of b's was written, not even the free GPU listed before the held one.
    assert_eq!(names(&dir), [".lock", "0000:2a:00.0.json"]);
    let listed = list_claims(&dir, root.path()).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].holder, a);

    // Free GPUs alone can be claimed by b.
    let got = claim_gpus(
        &dir,
        root.path(),
        &b,
        &addrs(&["0000:18:00.0", "0000:3a:00.0"]),
        WAIT,
    )
    .unwrap();
    assert_eq!(got, ClaimOutcome::Claimed);
    assert_eq!(
        names(&dir),
        [
            ".lock",
            "0000:18:00.0.json",
            "0000:2a:00.0.json",
            "0000:3a:00.0.json"
        ]
    );
}

#[test]
fn a_dead_pid_leaves_a_stale_claim_that_is_taken_over() {
    let root = proc_root(&[(100, 5000), (200, 6000)]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = claims_dir(&tmp);
    let a = holder("ctr-a", 100, 5000);
    let b = holder("ctr-b", 200, 6000);
    let gpus = addrs(&["0000:18:00.0", "0000:2a:00.0"]);
    assert_eq!(
        claim_gpus(&dir, root.path(), &a, &gpus, WAIT).unwrap(),
        ClaimOutcome::Claimed
    );
    std::fs::remove_dir_all(root.path().join("proc/100")).unwrap();

    let listed = list_claims(&dir, root.path()).unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().all(|c| !c.live && c.holder == a));

    assert_eq!(
        claim_gpus(&dir, root.path(), &b, &gpus, WAIT).unwrap(),
        ClaimOutcome::Claimed
    );
    let listed = list_claims(&dir, root.path()).unwrap();
    assert!(listed.iter().all(|c| c.live && c.holder == b), "{listed:?}");
    // Replaced in place: one file per GPU plus the lock, no temporaries left.
    assert_eq!(
        names(&dir),
        [".lock", "0000:18:00.0.json", "0000:2a:00.0.json"]
    );
}

#[test]
fn a_reused_pid_with_another_start_time_is_stale() {
    let root = proc_root(&[(100, 5000), (200, 6000)]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = claims_dir(&tmp);
    let a = holder("ctr-a", 100, 5000);
    let b = holder("ctr-b", 200, 6000);
    let gpus = addrs(&["0000:2a:00.0"]);
    claim_gpus(&dir, root.path(), &a, &gpus, WAIT).unwrap();
    assert!(matches!(
        claim_gpus(&dir, root.path(), &b, &gpus, WAIT).unwrap(),
        ClaimOutcome::Held { .. }
    ));
    // Pid 100 now belongs to a process started later.
    set_start(root.path(), 100, 9999);
    assert!(!list_claims(&dir, root.path()).unwrap()[0].live);
    assert_eq!(
        claim_gpus(&dir, root.path(), &b, &gpus, WAIT).unwrap(),
        ClaimOutcome::Claimed
    );
    assert_eq!(list_claims(&dir, root.path()).unwrap()[0].holder, b);
}

#[test]
fn the_same_container_claims_again() {
    let root = proc_root(&[(100, 5000), (101, 7000)]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = claims_dir(&tmp);
    let gpus = addrs(&["0000:2a:00.0", "0000:18:00.0", "0000:2a:00.0"]);
    let a = holder("ctr-a", 100, 5000);
    assert_eq!(
        claim_gpus(&dir, root.path(), &a, &gpus, WAIT).unwrap(),
        ClaimOutcome::Claimed
    );
    assert_eq!(
        claim_gpus(&dir, root.path(), &a, &gpus, WAIT).unwrap(),
        ClaimOutcome::Claimed
    );
    // The same container restarted under a new pid takes its claims again, with the new pid.
    let again = holder("ctr-a", 101, 7000);
    assert_eq!(
        claim_gpus(&dir, root.path(), &again, &gpus, WAIT).unwrap(),
        ClaimOutcome::Claimed
    );
    let listed = list_claims(&dir, root.path()).unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|c| c.address.as_str())
            .collect::<Vec<_>>(),
        ["0000:18:00.0", "0000:2a:00.0"]
    );
    assert!(listed.iter().all(|c| c.live && c.holder == again));
}

#[test]
fn release_drops_only_that_containers_claims_and_keeps_the_lock_file() {
    let root = proc_root(&[(100, 5000), (200, 6000)]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = claims_dir(&tmp);
    let a = holder("ctr-a", 100, 5000);
    let b = holder("ctr-b", 200, 6000);
    claim_gpus(
        &dir,
        root.path(),
        &a,
        &addrs(&["0000:18:00.0", "0000:2a:00.0"]),
        WAIT,
    )
    .unwrap();
    claim_gpus(&dir, root.path(), &b, &addrs(&["0000:3a:00.0"]), WAIT).unwrap();
    let lock_inode = std::fs::metadata(dir.join(".lock")).unwrap().ino();

    assert_eq!(release(&dir, "ctr-a", WAIT).unwrap(), 2);
    assert_eq!(release(&dir, "ctr-a", WAIT).unwrap(), 0);
    assert_eq!(release(&dir, "no-such", WAIT).unwrap(), 0);
    assert_eq!(names(&dir), [".lock", "0000:3a:00.0.json"]);
    assert_eq!(
        std::fs::metadata(dir.join(".lock")).unwrap().ino(),
        lock_inode
    );
    // The released GPUs are free again while b still holds its own.
    assert_eq!(
        claim_gpus(
            &dir,
            root.path(),
            &b,
            &addrs(&["0000:18:00.0", "0000:3a:00.0"]),
            WAIT
        )
        .unwrap(),
        ClaimOutcome::Claimed
    );
    // Releasing in a directory that does not exist drops nothing and creates nothing.
    let missing = tmp.path().join("missing");
    assert_eq!(release(&missing, "ctr-a", WAIT).unwrap(), 0);
    assert!(!missing.exists());
}

#[test]
fn listing_tells_live_from_stale_and_skips_other_files() {
    let root = proc_root(&[(100, 5000), (200, 6000)]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = claims_dir(&tmp);
    assert!(list_claims(&dir, root.path()).unwrap().is_empty());
    claim_gpus(
        &dir,
        root.path(),
        &holder("ctr-a", 100, 5000),
        &addrs(&["0000:18:00.0"]),
        WAIT,
    )
    .unwrap();
    claim_gpus(
        &dir,
        root.path(),
        &holder("ctr-b", 200, 6000),
        &addrs(&["0000:2a:00.0"]),
        WAIT,
    )
    .unwrap();
    std::fs::remove_dir_all(root.path().join("proc/200")).unwrap();
    std::fs::write(dir.join("README"), "not a claim").unwrap();
    std::fs::write(dir.join("junk.json"), "{}").unwrap();

    let listed = list_claims(&dir, root.path()).unwrap();
    let seen: Vec<(&str, &str, bool)> = listed
        .iter()
        .map(|c| (c.address.as_str(), c.holder.container.as_str(), c.live))
        .collect();
    assert_eq!(
        seen,
        [
            ("0000:18:00.0", "ctr-a", true),
            ("0000:2a:00.0", "ctr-b", false)
        ]
    );
}

#[test]
fn the_dir_and_lock_file_are_created_with_their_modes() {
    let root = proc_root(&[(100, 5000)]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = claims_dir(&tmp);
    claim_gpus(
        &dir,
        root.path(),
        &holder("ctr-a", 100, 5000),
        &addrs(&["0000:2a:00.0"]),
        WAIT,
    )
    .unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir.join(".lock")), 0o600);
    // The umask may take bits away but never adds them.
    assert_eq!(mode(&dir) & !0o755, 0);
    assert!(mode(&dir) & 0o700 == 0o700);
    let text = std::fs::read_to_string(dir.join("0000:2a:00.0.json")).unwrap();
    let h: Holder = serde_json::from_str(&text).unwrap();
    assert_eq!(h, holder("ctr-a", 100, 5000));
}

#[test]
fn addresses_that_are_not_pci_addresses_are_refused_before_any_file_is_touched() {
    let root = proc_root(&[(100, 5000)]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = claims_dir(&tmp);
    for bad in [
        "../../etc/passwd",
        "0000:2A:00.0",
        "2a:00.0",
        "",
        "0000:2a:00.0/x",
    ] {
        let err = claim_gpus(
            &dir,
            root.path(),
            &holder("ctr-a", 100, 5000),
            &addrs(&["0000:18:00.0", bad]),
            WAIT,
        )
        .unwrap_err();
        assert!(matches!(err, ClaimError::Address { .. }), "{err:?}");
        assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
    }
    assert!(!dir.exists());
}

#[test]
fn a_torn_claim_file_is_taken_over_but_listing_names_it() {
    let root = proc_root(&[(100, 5000)]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = claims_dir(&tmp);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("0000:2a:00.0.json"), "{\"container\": \"x\"").unwrap();

    let err = list_claims(&dir, root.path()).unwrap_err().to_string();
    assert!(
        err.contains("0000:2a:00.0.json") && err.contains("{\\\"container\\\": \\\"x\\\""),
        "{err}"
    );
    assert_eq!(
        claim_gpus(
            &dir,
            root.path(),
            &holder("ctr-a", 100, 5000),
            &addrs(&["0000:2a:00.0"]),
            WAIT
        )
        .unwrap(),
        ClaimOutcome::Claimed
    );
    assert_eq!(list_claims(&dir, root.path()).unwrap().len(), 1);
}

#[test]
fn a_malformed_stat_file_is_an_error_naming_it() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("proc/77")).unwrap();
    std::fs::write(root.path().join("proc/77/stat"), "77 (x) S 1 2").unwrap();
    let err = Holder::of_pid(root.path(), "c", 77)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("proc/77/stat") && err.contains("\"77 (x) S 1 2\""),
        "{err}"
    );
    assert_eq!(Holder::of_pid(root.path(), "c", 78).unwrap(), None);
}

/// The test process itself as a live holder under the real `/proc`.
fn live_holder(container: &str) -> Holder {
    Holder::of_pid(Path::new("/"), container, std::process::id())
        .unwrap()
        .expect("own pid runs")
}

#[test]
fn sixteen_threads_racing_for_the_same_gpus_yield_one_winner() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = Arc::new(claims_dir(&tmp));
    let gpus = Arc::new(addrs(&["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0"]));
    let barrier = Arc::new(Barrier::new(16));
    let handles: Vec<_> = (0..16)
        .map(|i| {
            let (dir, gpus, barrier) = (dir.clone(), gpus.clone(), barrier.clone());
            std::thread::spawn(move || {
                let me = live_holder(&format!("ctr-{i}"));
                barrier.wait();
                claim_gpus(&dir, Path::new("/"), &me, &gpus, Duration::from_secs(30)).unwrap()
            })
        })
        .collect();
    let outcomes: Vec<ClaimOutcome> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let winners = outcomes
        .iter()
        .filter(|o| **o == ClaimOutcome::Claimed)
        .count();
    assert_eq!(winners, 1, "{outcomes:?}");
    let listed = list_claims(&dir, Path::new("/")).unwrap();
    assert_eq!(listed.len(), 3);
    let owner = &listed[0].holder.container;
    assert!(listed
        .iter()
        .all(|c| c.live && &c.holder.container == owner));
    // Every loser was told about the winner.
    for o in &outcomes {
        if let ClaimOutcome::Held { by, .. } = o {
            assert_eq!(&by.container, owner);
        }
    }
}

const CHILD_DIR: &str = "CPUPLAN_CLAIMS_TEST_CHILD_DIR";

/// Run as a child process by the process race below; does nothing in a normal test run.
///
/// It claims, prints its outcome, and stays alive (so its claim stays live) until its stdin closes.
#[test]
fn race_child() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    let me = live_holder(&format!("proc-{}", std::process::id()));
    let gpus = addrs(&["0000:18:00.0", "0000:2a:00.0"]);
    let outcome = claim_gpus(
        Path::new(&dir),
        Path::new("/"),
        &me,
        &gpus,
        Duration::from_secs(30),
    )
    .unwrap();
    println!("OUTCOME={}", outcome == ClaimOutcome::Claimed);
    std::io::stdout().flush().unwrap();
    let mut rest = String::new();
    std::io::stdin().read_to_string(&mut rest).unwrap();
}

#[test]
fn processes_racing_for_the_same_gpus_yield_one_winner() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = claims_dir(&tmp);
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<_> = (0..6)
        .map(|_| {
            Command::new(&exe)
                .args(["--exact", "race_child", "--nocapture", "--test-threads=1"])
                .env(CHILD_DIR, &dir)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut wins = 0;
    let mut outs = Vec::new();
    for child in &mut children {
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        // libtest may print "test race_child ... " before the outcome on the same line.
        let said = loop {
            line.clear();
            assert!(
                out.read_line(&mut line).unwrap() > 0,
                "child said no outcome"
            );
            if let Some((_, said)) = line.split_once("OUTCOME=") {
                break said.trim().to_string();
            }
        };
        match said.as_str() {
            "true" => wins += 1,
            other => assert_eq!(other, "false"),
        }
        outs.push(out);
    }
    assert_eq!(wins, 1);
    // Every child still runs, so the winner's claims are live under the real /proc.
    let listed = list_claims(&dir, Path::new("/")).unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().all(|c| c.live), "{listed:?}");
    for (mut child, mut out) in children.into_iter().zip(outs) {
        drop(child.stdin.take());
        let mut rest = String::new();
        out.read_to_string(&mut rest).unwrap();
        assert!(child.wait().unwrap().success(), "{rest}");
    }
    // Once the winner has exited its claims are stale.
    let listed = list_claims(&dir, Path::new("/")).unwrap();
    assert!(listed.iter().all(|c| !c.live), "{listed:?}");
}

#[test]
fn a_held_lock_is_waited_on_only_as_long_as_asked() {
    let root = proc_root(&[(100, 5000)]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = claims_dir(&tmp);
    std::fs::create_dir_all(&dir).unwrap();
    let lock = File::create(dir.join(".lock")).unwrap();
    let held = Flock::lock(lock, FlockArg::LockExclusive).unwrap();

    let me = holder("ctr-a", 100, 5000);
    let gpus = addrs(&["0000:2a:00.0"]);
    let start = Instant::now();
    let err = claim_gpus(&dir, root.path(), &me, &gpus, Duration::from_millis(200)).unwrap_err();
    let took = start.elapsed();
    assert!(matches!(err, ClaimError::Busy { .. }), "{err:?}");
    assert!(err.to_string().contains(".lock"), "{err}");
    assert!(took >= Duration::from_millis(200), "{took:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert!(matches!(
        release(&dir, "ctr-a", Duration::from_millis(50)),
        Err(ClaimError::Busy { .. })
    ));
    // A shared holder blocks changes but not listing.
    drop(held);
    let lock = File::open(dir.join(".lock")).unwrap();
    let shared = Flock::lock(lock, FlockArg::LockShared).unwrap();
    assert!(list_claims(&dir, root.path()).unwrap().is_empty());
    assert!(matches!(
        claim_gpus(&dir, root.path(), &me, &gpus, Duration::from_millis(50)),
        Err(ClaimError::Busy { .. })
    ));
    drop(shared);
    assert_eq!(
        claim_gpus(&dir, root.path(), &me, &gpus, Duration::ZERO).unwrap(),
        ClaimOutcome::Claimed
    );
}
