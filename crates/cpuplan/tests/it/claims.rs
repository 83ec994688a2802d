//! GPU claims: all or nothing, stale take-over, release, listing, races and the bounded lock wait.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use cpuplan::{claim_gpus, list_claims, release, ClaimError, ClaimOutcome, Holder};
use nix::fcntl::{Flock, FlockArg};

use crate::claimsfx;
use claimsfx::{
    addrs, claim_as, claims_dir, holder, names, proc_root, scoped, set_start, SCOPE, WAIT,
};

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
    // The same container restarted under a new pid, the old one gone, takes its claims again.
    std::fs::remove_dir_all(root.path().join("proc/100")).unwrap();
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

    let r = root.path();
    assert_eq!(release(&dir, r, "ctr-a", SCOPE, Some(&a), WAIT).unwrap(), 2);
    assert_eq!(release(&dir, r, "ctr-a", SCOPE, Some(&a), WAIT).unwrap(), 0);
    assert_eq!(release(&dir, r, "no-such", SCOPE, None, WAIT).unwrap(), 0);
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
    assert_eq!(release(&missing, r, "ctr-a", SCOPE, None, WAIT).unwrap(), 0);
    assert!(!missing.exists());
}

#[test]
fn listing_tells_live_from_stale_and_skips_other_files() {
    let root = proc_root(&[(100, 5000), (200, 6000)]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = claims_dir(&tmp);
    assert!(list_claims(&dir, root.path()).unwrap().is_empty());
    claim_as(&dir, root.path(), ("ctr-a", 100, 5000), &["0000:18:00.0"]).unwrap();
    claim_as(&dir, root.path(), ("ctr-b", 200, 6000), &["0000:2a:00.0"]).unwrap();
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
    claim_as(&dir, root.path(), ("ctr-a", 100, 5000), &["0000:2a:00.0"]).unwrap();
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
        let err = claim_as(
            &dir,
            root.path(),
            ("ctr-a", 100, 5000),
            &["0000:18:00.0", bad],
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
        claim_as(&dir, root.path(), ("ctr-a", 100, 5000), &["0000:2a:00.0"]).unwrap(),
        ClaimOutcome::Claimed
    );
    assert_eq!(list_claims(&dir, root.path()).unwrap().len(), 1);
}

#[test]
fn a_malformed_stat_file_is_an_error_naming_it() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("proc/77")).unwrap();
    std::fs::write(root.path().join("proc/77/stat"), "77 (x) S 1 2").unwrap();
    let err = Holder::of_pid(root.path(), "c", SCOPE, 77)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("proc/77/stat") && err.contains("\"77 (x) S 1 2\""),
        "{err}"
    );
    assert_eq!(Holder::of_pid(root.path(), "c", SCOPE, 78).unwrap(), None);
}

/// The test process itself as a live holder under the real `/proc`.
fn live_holder(container: &str) -> Holder {
    Holder::of_pid(Path::new("/"), container, SCOPE, std::process::id())
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

/// What a [`race_child`] said of its claim (`true` or `false`), read from its output `out`;
/// `silent` is the failure when it says nothing.
fn outcome(out: &mut BufReader<std::process::ChildStdout>, silent: &str) -> String {
    let mut line = String::new();
    // libtest may print "test race_child ... " before the outcome on the same line.
    loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "{silent}");
        if let Some((_, said)) = line.split_once("OUTCOME=") {
            return said.trim().to_string();
        }
    }
}

/// Run as a child process by the process race and the pid namespace tests below; does nothing
/// in a normal test run.
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
                .args([
                    "--exact",
                    "claims::race_child",
                    "--nocapture",
                    "--test-threads=1",
                ])
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
        let said = outcome(&mut out, "child said no outcome");
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
        release(
            &dir,
            root.path(),
            "ctr-a",
            SCOPE,
            Some(&me),
            Duration::from_millis(50)
        ),
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

#[test]
fn the_same_id_in_another_scope_neither_takes_nor_releases_the_claim() {
    // Two runtime roots each run a container "web": the bundles differ.
    let root = proc_root(&[(100, 5000), (200, 6000)]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = claims_dir(&tmp);
    let first = scoped("web", "/run/root-a/web", 100, 5000);
    let second = scoped("web", "/run/root-b/web", 200, 6000);
    let gpus = addrs(&["0000:2a:00.0"]);
    assert_eq!(
        claim_gpus(&dir, root.path(), &first, &gpus, WAIT).unwrap(),
        ClaimOutcome::Claimed
    );
    assert_eq!(
        claim_gpus(&dir, root.path(), &second, &gpus, WAIT).unwrap(),
        ClaimOutcome::Held {
            address: "0000:2a:00.0".into(),
            by: first.clone()
        }
    );
    // The second one's poststop releases nothing of the first's.
    let r = root.path();
    assert_eq!(
        release(&dir, r, "web", "/run/root-b/web", Some(&second), WAIT).unwrap(),
        0
    );
    assert_eq!(list_claims(&dir, root.path()).unwrap()[0].holder, first);
    // The claim file records the scope.
    let text = std::fs::read_to_string(dir.join("0000:2a:00.0.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["scope"], "/run/root-a/web", "{text}");
    assert_eq!(
        release(&dir, r, "web", "/run/root-a/web", Some(&first), WAIT).unwrap(),
        1
    );
    assert!(list_claims(&dir, root.path()).unwrap().is_empty());
}

#[test]
fn a_claim_file_without_a_scope_parses_is_released_by_nobody_and_taken_over_when_stale() {
    let root = proc_root(&[(100, 5000), (200, 6000)]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = claims_dir(&tmp);
    std::fs::create_dir_all(&dir).unwrap();
    // As the hook wrote claims before scopes.
    std::fs::write(
        dir.join("0000:2a:00.0.json"),
        "{\n  \"container\": \"web\",\n  \"pid\": 100,\n  \"start_time\": 5000\n}\n",
    )
    .unwrap();
    let listed = list_claims(&dir, root.path()).unwrap();
    assert_eq!(listed.len(), 1);
    let legacy = Holder {
        pid_ns: 0,
        ..scoped("web", "", 100, 5000)
    };
    assert_eq!(listed[0].holder, legacy, "no pid namespace: the reader's");
    assert!(listed[0].live);
    // No scope matches it, not even an empty one.
    let r = root.path();
    assert_eq!(release(&dir, r, "web", SCOPE, None, WAIT).unwrap(), 0);
    assert_eq!(release(&dir, r, "web", "", Some(&legacy), WAIT).unwrap(), 0);
    // While its pid lives it holds the GPU, even against the same id.
    let gpus = addrs(&["0000:2a:00.0"]);
    let me = holder("web", 200, 6000);
    assert!(matches!(
        claim_gpus(&dir, root.path(), &me, &gpus, WAIT).unwrap(),
        ClaimOutcome::Held { .. }
    ));
    std::fs::remove_dir_all(root.path().join("proc/100")).unwrap();
    assert_eq!(
        claim_gpus(&dir, root.path(), &me, &gpus, WAIT).unwrap(),
        ClaimOutcome::Claimed
    );
    assert_eq!(list_claims(&dir, root.path()).unwrap()[0].holder, me);
}

/// A child that has exited and is not reaped until dropped: a zombie.
struct Zombie(std::process::Child);

impl Drop for Zombie {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_zombie_holder_is_stale() {
    let child = Command::new("true").spawn().unwrap();
    let zombie = Zombie(child);
    let pid = zombie.0.id();
    // Wait until it has exited (state Z), without reaping it.
    let stat = format!("/proc/{pid}/stat");
    let t = Instant::now();
    loop {
        let text = std::fs::read_to_string(&stat).unwrap();
        if text
            .rsplit_once(')')
            .unwrap()
            .1
            .trim_start()
            .starts_with('Z')
        {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "never a zombie: {text}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let text = std::fs::read_to_string(&stat).unwrap();
    let start: u64 = text
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(19)
        .unwrap()
        .parse()
        .unwrap();
    let dead = holder("ctr-z", pid, start);
    assert!(!dead.is_live(Path::new("/")).unwrap());
    assert_eq!(
        Holder::of_pid(Path::new("/"), "ctr-z", SCOPE, pid).unwrap(),
        None
    );

    // A claim the zombie holds is listed stale and taken over.
    let tmp = tempfile::tempdir().unwrap();
    let dir = claims_dir(&tmp);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("0000:2a:00.0.json"),
        serde_json::to_string(&dead).unwrap(),
    )
    .unwrap();
    let listed = list_claims(&dir, Path::new("/")).unwrap();
    assert!(!listed[0].live, "{listed:?}");
    let me = live_holder("ctr-live");
    assert_eq!(
        claim_gpus(&dir, Path::new("/"), &me, &addrs(&["0000:2a:00.0"]), WAIT).unwrap(),
        ClaimOutcome::Claimed
    );
    drop(zombie);
}

#[test]
fn stale_temporary_files_of_its_own_naming_are_removed_and_nothing_else() {
    let root = proc_root(&[(100, 5000)]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = claims_dir(&tmp);
    std::fs::create_dir_all(&dir).unwrap();
    let ours = [".0000:2a:00.0.json.tmp", ".0000:18:00.0.json.tmp"];
    let others = [
        ".0000:2a:00.0.json.tmp.bak",
        ".notes.json.tmp",
        "0000:2a:00.0.json.tmp",
        ".0000:2A:00.0.json.tmp",
        "README",
    ];
    let plant = || {
        for n in ours.iter().chain(&others) {
            std::fs::write(dir.join(n), "left by a killed claimer").unwrap();
        }
    };
    plant();
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    let with = |extra: &[&str]| {
        let mut v: Vec<String> = others.iter().map(|s| s.to_string()).collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        sorted(v)
    };
    // A claim does not list the directory: another GPU's claim leaves them all.
    claim_as(&dir, root.path(), ("ctr-a", 100, 5000), &["0000:3a:00.0"]).unwrap();
    let mut all = with(&[".lock", "0000:3a:00.0.json"]);
    all.extend(ours.iter().map(|s| s.to_string()));
    assert_eq!(names(&dir), sorted(all));
    // A claim of 2a writes over 2a's and renames it: the claim holds the holder, not the torn text.
    claim_as(&dir, root.path(), ("ctr-a", 100, 5000), &["0000:2a:00.0"]).unwrap();
    let claim = std::fs::read_to_string(dir.join("0000:2a:00.0.json")).unwrap();
    assert!(claim.contains("ctr-a"), "{claim}");
    assert_eq!(
        names(&dir),
        with(&[
            ".0000:18:00.0.json.tmp",
            ".lock",
            "0000:2a:00.0.json",
            "0000:3a:00.0.json"
        ])
    );
    // A release lists the directory and removes every one of its own naming, and nothing else.
    plant();
    let a = holder("ctr-a", 100, 5000);
    assert_eq!(
        release(&dir, root.path(), "ctr-a", SCOPE, Some(&a), WAIT).unwrap(),
        2
    );
    assert_eq!(names(&dir), with(&[".lock"]));
    // A temporary planted as a symlink, a FIFO or a directory is removed (never followed,
    // never blocked on) and the claim is made.
    let target = tmp.path().join("elsewhere");
    std::fs::write(&target, "keep").unwrap();
    let tmp_name = dir.join(".0000:2a:00.0.json.tmp");
    let mode = nix::sys::stat::Mode::from_bits_truncate(0o600);
    for plant in 0..3 {
        match plant {
            0 => std::os::unix::fs::symlink(&target, &tmp_name).unwrap(),
            1 => nix::unistd::mkfifo(&tmp_name, mode).unwrap(),
            _ => std::fs::create_dir(&tmp_name).unwrap(),
        }
        let t = Instant::now();
        claim_as(&dir, root.path(), ("ctr-a", 100, 5000), &["0000:2a:00.0"]).unwrap();
        assert!(t.elapsed() < Duration::from_secs(5));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        assert!(std::fs::symlink_metadata(dir.join("0000:2a:00.0.json"))
            .unwrap()
            .is_file());
        assert!(!tmp_name.exists(), "plant {plant}");
    }
}

#[test]
fn a_fifo_claim_file_or_lock_does_not_block() {
    let root = proc_root(&[(100, 5000)]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = claims_dir(&tmp);
    std::fs::create_dir_all(&dir).unwrap();
    let mode = nix::sys::stat::Mode::from_bits_truncate(0o600);
    nix::unistd::mkfifo(&dir.join("0000:2a:00.0.json"), mode).unwrap();
    let t = Instant::now();
    let err = list_claims(&dir, root.path()).unwrap_err().to_string();
    assert!(
        err.contains("0000:2a:00.0.json") && err.contains("FIFO"),
        "{err}"
    );
    // Taken over: the FIFO is replaced by the claim file.
    assert_eq!(
        claim_as(&dir, root.path(), ("ctr-a", 100, 5000), &["0000:2a:00.0"]).unwrap(),
        ClaimOutcome::Claimed
    );
    assert!(std::fs::metadata(dir.join("0000:2a:00.0.json"))
        .unwrap()
        .is_file());
    // A FIFO as the lock file is refused, at once.
    std::fs::remove_file(dir.join(".lock")).unwrap();
    nix::unistd::mkfifo(&dir.join(".lock"), mode).unwrap();
    let err = release(&dir, root.path(), "ctr-a", SCOPE, None, WAIT)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(".lock") && err.contains("not a regular file"),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
}

#[test]
fn a_hard_link_or_another_user_s_file_is_never_written_through() {
    // Planted by someone with write access to the claims directory: a hard link to a file
    // elsewhere, or a file of another user, under the temporary's name or the lock's.
    let root = proc_root(&[(100, 5000)]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = claims_dir(&tmp);
    std::fs::create_dir_all(&dir).unwrap();
    let target = tmp.path().join("elsewhere");
    let tmp_name = dir.join(".0000:2a:00.0.json.tmp");
    let other = std::fs::metadata(tmp.path()).unwrap().uid() + 1000;
    for plant in ["hard link", "another user's"] {
        std::fs::write(&target, "keep").unwrap();
        if plant == "hard link" {
            std::fs::hard_link(&target, &tmp_name).unwrap();
        } else {
            std::fs::write(&tmp_name, "theirs").unwrap();
            std::os::unix::fs::chown(&tmp_name, Some(other), None).unwrap();
        }
        // The temporary is removed (its name only) and made afresh: the claim is made.
        assert_eq!(
            claim_as(&dir, root.path(), ("ctr-a", 100, 5000), &["0000:2a:00.0"]).unwrap(),
            ClaimOutcome::Claimed,
            "{plant}"
        );
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep", "{plant}");
        let claim = std::fs::metadata(dir.join("0000:2a:00.0.json")).unwrap();
        assert_eq!((claim.nlink(), claim.uid()), (1, 0), "{plant}");
        assert!(!tmp_name.exists(), "{plant}");
        std::fs::remove_file(dir.join("0000:2a:00.0.json")).unwrap();
        // The lock: refused, naming it and what is wrong; nothing written into it.
        std::fs::remove_file(dir.join(".lock")).unwrap();
        if plant == "hard link" {
            std::fs::hard_link(&target, dir.join(".lock")).unwrap();
        } else {
            std::fs::write(dir.join(".lock"), "keep").unwrap();
            std::os::unix::fs::chown(dir.join(".lock"), Some(other), None).unwrap();
        }
        let err = claim_as(&dir, root.path(), ("ctr-a", 100, 5000), &["0000:2a:00.0"])
            .unwrap_err()
            .to_string();
        let what = if plant == "hard link" {
            "2 links to it (a hard link)".to_string()
        } else {
            format!("owned by uid {other}, not by uid 0")
        };
        assert!(
            err.contains(".lock") && err.contains(&what),
            "{plant}: {err}"
        );
        assert!(!dir.join("0000:2a:00.0.json").exists(), "{plant}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep", "{plant}");
        std::fs::remove_file(dir.join(".lock")).unwrap();
    }
}

/// `race_child` in a new pid namespace with its own /proc (`unshare -p -f --mount-proc`), as a
/// process in a container that sees the claims directory would be: its pid there is 1.
fn spawn_in_a_new_pid_namespace(
    dir: &Path,
) -> (
    std::process::Child,
    BufReader<std::process::ChildStdout>,
    bool,
) {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(&exe)
        .args([
            "--exact",
            "claims::race_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("unshare (util-linux; the test runs as root)");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let said = outcome(
        &mut out,
        "the child in a new pid namespace said no outcome (unshare -p needs root)",
    );
    (child, out, said == "true")
}

/// Ends a child of [`spawn_in_a_new_pid_namespace`]: closes its stdin and waits.
fn finish(mut child: std::process::Child, mut out: BufReader<std::process::ChildStdout>) {
    drop(child.stdin.take());
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert!(child.wait().unwrap().success(), "{rest}");
}

#[test]
fn a_process_in_another_pid_namespace_cannot_take_over_a_live_claim() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = claims_dir(&tmp);
    let gpus = addrs(&["0000:18:00.0", "0000:2a:00.0"]);
    let host = live_holder("host-ctr");
    assert_ne!(
        host.pid_ns, 0,
        "the claim records the claimer's pid namespace"
    );
    assert_eq!(
        claim_gpus(&dir, Path::new("/"), &host, &gpus, WAIT).unwrap(),
        ClaimOutcome::Claimed
    );
    // From the new namespace the host's pid is out of sight: the claim holds all the same.
    let (child, out, claimed) = spawn_in_a_new_pid_namespace(&dir);
    assert!(
        !claimed,
        "a process in another pid namespace took a live claim"
    );
    finish(child, out);
    let listed = list_claims(&dir, Path::new("/")).unwrap();
    assert!(
        listed.iter().all(|c| c.holder == host && c.live),
        "{listed:?}"
    );
}

#[test]
fn a_claim_from_another_pid_namespace_is_judged_by_that_namespace() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = claims_dir(&tmp);
    let gpus = addrs(&["0000:18:00.0", "0000:2a:00.0"]);
    let (child, out, claimed) = spawn_in_a_new_pid_namespace(&dir);
    assert!(claimed, "the first claimer takes free GPUs");
    let listed = list_claims(&dir, Path::new("/")).unwrap();
    assert_eq!(listed.len(), 2);
    let theirs = listed[0].holder.clone();
    assert_eq!(theirs.pid, 1, "numbered in its own namespace: {theirs:?}");
    assert_ne!(theirs.pid_ns, cpuplan::own_pid_ns(), "{theirs:?}");
    // The host's pid 1 runs too, with another start time: that is not the holder.
    assert!(listed.iter().all(|c| c.live), "{listed:?}");
    let host = live_holder("host-ctr");
    match claim_gpus(&dir, Path::new("/"), &host, &gpus, WAIT).unwrap() {
        ClaimOutcome::Held { by, .. } => assert_eq!(by, theirs),
        other => panic!("the host took a live claim of another namespace: {other:?}"),
    }
    // Once it has exited (its namespace with it), its claims are stale and taken over.
    finish(child, out);
    let listed = list_claims(&dir, Path::new("/")).unwrap();
    assert!(listed.iter().all(|c| !c.live), "{listed:?}");
    assert_eq!(
        claim_gpus(&dir, Path::new("/"), &host, &gpus, WAIT).unwrap(),
        ClaimOutcome::Claimed
    );
}
