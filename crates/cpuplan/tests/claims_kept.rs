//! A claims directory kept open by a long-running claimer ([`ClaimsDir`], the NRI plugin's):
//! the same protocol as the one-shot [`claim_gpus`] (the hook's), file for file and lock for lock.

use std::fs::File;
use std::time::Duration;

use cpuplan::{claim_gpus, list_claims, release, ClaimError, ClaimOutcome, ClaimsDir};
use nix::fcntl::{Flock, FlockArg};

#[path = "common/claimsfx.rs"]
mod claimsfx;
use claimsfx::{addrs, claims_dir, holder, names, proc_root, SCOPE, WAIT};

#[test]
fn a_kept_claim_and_a_one_shot_claim_hold_against_each_other() {
    let root = proc_root(&[(100, 5000), (200, 6000)]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = claims_dir(&tmp);
    let (plugin, hook) = (holder("ctr-a", 100, 5000), holder("ctr-b", 200, 6000));
    let mut kept = ClaimsDir::new(&dir);
    let gpu = addrs(&["0000:2a:00.0"]);

    // The kept directory is made at its first claim; the hook's claim then meets it.
    assert_eq!(
        kept.claim(root.path(), &plugin, &gpu, WAIT).unwrap(),
        ClaimOutcome::Claimed
    );
    assert_eq!(
        claim_gpus(&dir, root.path(), &hook, &gpu, WAIT).unwrap(),
        ClaimOutcome::Held {
            address: "0000:2a:00.0".into(),
            by: plugin.clone()
        }
    );
    // The other way round: the hook's claim holds against the kept directory's second claim.
    let other = addrs(&["0000:18:00.0"]);
    assert_eq!(
        claim_gpus(&dir, root.path(), &hook, &other, WAIT).unwrap(),
        ClaimOutcome::Claimed
    );
    assert_eq!(
        kept.claim(root.path(), &plugin, &other, WAIT).unwrap(),
        ClaimOutcome::Held {
            address: "0000:18:00.0".into(),
            by: hook.clone()
        }
    );
    assert_eq!(
        names(&dir),
        [".lock", "0000:18:00.0.json", "0000:2a:00.0.json"]
    );
    let listed = list_claims(&dir, root.path()).unwrap();
    assert_eq!(listed[1].holder, plugin, "written as claim_gpus writes it");
    // A release by path drops the kept directory's claim; the GPU is free for the hook.
    assert_eq!(
        release(&dir, root.path(), "ctr-a", SCOPE, Some(&plugin), WAIT).unwrap(),
        1
    );
    assert_eq!(
        claim_gpus(&dir, root.path(), &hook, &gpu, WAIT).unwrap(),
        ClaimOutcome::Claimed
    );
}

#[test]
fn the_kept_descriptor_locks_the_lock_file_every_claimer_opens() {
    let root = proc_root(&[(100, 5000)]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = claims_dir(&tmp);
    let me = holder("ctr-a", 100, 5000);
    let mut kept = ClaimsDir::new(&dir);
    let gpu = addrs(&["0000:2a:00.0"]);
    kept.claim(root.path(), &me, &gpu, WAIT).unwrap();
    // Another claimer holds the lock (opened by path, as the hook opens it): the kept one waits
    // and gives up, writing nothing.
    let held = Flock::lock(
        File::open(dir.join(".lock")).unwrap(),
        FlockArg::LockExclusive,
    )
    .unwrap();
    let other = addrs(&["0000:18:00.0"]);
    let err = kept
        .claim(root.path(), &me, &other, Duration::from_millis(100))
        .unwrap_err();
    assert!(matches!(err, ClaimError::Busy { .. }), "{err:?}");
    assert_eq!(names(&dir), [".lock", "0000:2a:00.0.json"]);
    drop(held);
    assert_eq!(
        kept.claim(root.path(), &me, &other, WAIT).unwrap(),
        ClaimOutcome::Claimed
    );
}

#[test]
fn a_claims_directory_replaced_under_the_kept_one_is_opened_again() {
    let root = proc_root(&[(100, 5000), (200, 6000)]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = claims_dir(&tmp);
    let (plugin, hook) = (holder("ctr-a", 100, 5000), holder("ctr-b", 200, 6000));
    let mut kept = ClaimsDir::new(&dir);
    kept.claim(root.path(), &plugin, &addrs(&["0000:2a:00.0"]), WAIT)
        .unwrap();
    // An operator moves the directory away; the hook makes a new one and claims a GPU there.
    std::fs::rename(&dir, tmp.path().join("old-claims")).unwrap();
    let gpu = addrs(&["0000:18:00.0"]);
    assert_eq!(
        claim_gpus(&dir, root.path(), &hook, &gpu, WAIT).unwrap(),
        ClaimOutcome::Claimed
    );
    // The kept claimer sees the hook's claim (it locks and reads the new directory, not the old).
    assert_eq!(
        kept.claim(root.path(), &plugin, &gpu, WAIT).unwrap(),
        ClaimOutcome::Held {
            address: "0000:18:00.0".into(),
            by: hook.clone()
        }
    );
    let free = addrs(&["0000:3a:00.0"]);
    kept.claim(root.path(), &plugin, &free, WAIT).unwrap();
    assert_eq!(
        names(&dir),
        [".lock", "0000:18:00.0.json", "0000:3a:00.0.json"]
    );
    assert_eq!(
        names(&tmp.path().join("old-claims")),
        [".lock", "0000:2a:00.0.json"],
        "nothing written to the directory moved away"
    );
    // Removed altogether: made again at the next claim.
    std::fs::remove_dir_all(&dir).unwrap();
    kept.claim(root.path(), &plugin, &free, WAIT).unwrap();
    assert_eq!(names(&dir), [".lock", "0000:3a:00.0.json"]);
}

#[test]
fn stale_temporaries_go_when_the_directory_is_opened() {
    let root = proc_root(&[(100, 5000)]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = claims_dir(&tmp);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(".0000:3b:00.0.json.tmp"), "{\"container\": \"torn").unwrap();
    std::fs::write(dir.join(".notes.json.tmp"), "x").unwrap();
    let mut kept = ClaimsDir::new(&dir);
    kept.claim(
        root.path(),
        &holder("ctr-a", 100, 5000),
        &addrs(&["0000:2a:00.0"]),
        WAIT,
    )
    .unwrap();
    assert_eq!(
        names(&dir),
        [".lock", ".notes.json.tmp", "0000:2a:00.0.json"]
    );
}
