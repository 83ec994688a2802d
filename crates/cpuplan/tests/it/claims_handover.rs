//! A claim belongs to its container and scope: claiming again for them takes it over from a
//! live holder (a second instance of the NRI plugin after a rollout, a container started again),
//! and releasing keeps what another live holder took over.

use crate::claimsfx;

use claimsfx::{addrs, claims_dir, exits, proc_root, scoped, WAIT};
use cpuplan::{claim_gpus, list_claims, release, ClaimOutcome, Holder};

/// The NRI plugin's scope.
const NRI: &str = "nri:10-cpuplan";

/// The holders of every listed claim, and whether each is live.
fn held(dir: &std::path::Path, root: &std::path::Path) -> Vec<(String, Holder, bool)> {
    list_claims(dir, root)
        .unwrap()
        .into_iter()
        .map(|c| (c.address, c.holder, c.live))
        .collect()
}

#[test]
fn a_new_plugin_instance_takes_over_its_containers_claims_from_the_live_old_one() {
    // The old plugin (pid 100) and the new one (pid 200) both run, as in a rollout.
    let root = proc_root(&[(100, 5000), (200, 6000), (300, 7000)]);
    let r = root.path();
    let tmp = tempfile::tempdir().unwrap();
    let dir = claims_dir(&tmp);
    let gpus = addrs(&["0000:18:00.0", "0000:2a:00.0"]);
    let old = scoped("web", NRI, 100, 5000);
    let new = scoped("web", NRI, 200, 6000);
    assert_eq!(
        claim_gpus(&dir, r, &old, &gpus, WAIT).unwrap(),
        ClaimOutcome::Claimed
    );
    // The new one claims again for the same container at its Synchronize: it is that
    // container's claim, so it is taken over while the old holder still runs.
    assert_eq!(
        claim_gpus(&dir, r, &new, &gpus, WAIT).unwrap(),
        ClaimOutcome::Claimed
    );
    let listed = held(&dir, r);
    assert_eq!(listed.len(), 2);
    assert!(
        listed.iter().all(|(_, h, live)| *h == new && *live),
        "{listed:?}"
    );

    // Another container of the same plugin, or the same id in another scope, does not take it.
    for other in [
        scoped("db", NRI, 200, 6000),
        scoped("web", "/run/containerd/bundle/web", 300, 7000),
        scoped("web", "nri:20-other", 300, 7000),
    ] {
        assert_eq!(
            claim_gpus(&dir, r, &other, &gpus[..1], WAIT).unwrap(),
            ClaimOutcome::Held {
                address: gpus[0].clone(),
                by: new.clone()
            },
            "{other:?}"
        );
    }

    // The old instance exits: the claims stay live, under the new one.
    exits(r, 100);
    assert!(held(&dir, r).iter().all(|(_, h, live)| *h == new && *live));
}

#[test]
fn the_old_instance_s_release_keeps_what_a_live_new_one_took_over() {
    let root = proc_root(&[(100, 5000), (200, 6000)]);
    let r = root.path();
    let tmp = tempfile::tempdir().unwrap();
    let dir = claims_dir(&tmp);
    let gpus = addrs(&["0000:18:00.0", "0000:2a:00.0"]);
    let old = scoped("web", NRI, 100, 5000);
    let new = scoped("web", NRI, 200, 6000);
    claim_gpus(&dir, r, &old, &gpus, WAIT).unwrap();
    claim_gpus(&dir, r, &new, &gpus, WAIT).unwrap();
    // The old instance releases the container (a StopContainer it still got, a Synchronize
    // of its own): the live new holder's claims stay, it releases them itself.
    assert_eq!(release(&dir, r, "web", NRI, Some(&old), WAIT).unwrap(), 0);
    assert_eq!(held(&dir, r).len(), 2);
    assert_eq!(release(&dir, r, "web", NRI, Some(&new), WAIT).unwrap(), 2);
    assert!(held(&dir, r).is_empty());

    // Had the new one died after taking them over, the old one's release drops them: a
    // holder that no longer runs keeps nothing.
    claim_gpus(&dir, r, &old, &gpus, WAIT).unwrap();
    claim_gpus(&dir, r, &new, &gpus, WAIT).unwrap();
    exits(r, 200);
    assert_eq!(release(&dir, r, "web", NRI, Some(&old), WAIT).unwrap(), 2);
    assert!(held(&dir, r).is_empty());
}

#[test]
fn a_poststop_releases_its_dead_init_s_claims_but_not_a_live_one_s() {
    // The hook's claims last while the container's init runs; at poststop it has exited.
    let bundle = "/run/containerd/io.containerd.runtime.v2.task/k8s.io/web";
    let root = proc_root(&[(100, 5000)]);
    let r = root.path();
    let tmp = tempfile::tempdir().unwrap();
    let dir = claims_dir(&tmp);
    let gpus = addrs(&["0000:2a:00.0"]);
    let first = scoped("web", bundle, 100, 5000);
    claim_gpus(&dir, r, &first, &gpus, WAIT).unwrap();
    // Started again (a new init, pid 101) before the first run's poststop came: the claim is
    // the container's, taken over, and that late poststop keeps it.
    claimsfx::set_start(r, 101, 8000);
    let again = scoped("web", bundle, 101, 8000);
    assert_eq!(
        claim_gpus(&dir, r, &again, &gpus, WAIT).unwrap(),
        ClaimOutcome::Claimed
    );
    exits(r, 100);
    assert_eq!(release(&dir, r, "web", bundle, None, WAIT).unwrap(), 0);
    assert_eq!(held(&dir, r)[0].1, again);
    // Its own poststop, its init gone, releases it.
    exits(r, 101);
    assert_eq!(release(&dir, r, "web", bundle, None, WAIT).unwrap(), 1);
    assert!(held(&dir, r).is_empty());
}

#[test]
fn a_failed_take_over_of_several_leaves_each_claim_the_container_s() {
    // All or nothing still holds: a GPU another container holds makes the claim take none,
    // and the container's own claims stay as they were (under the old holder).
    let root = proc_root(&[(100, 5000), (200, 6000), (300, 7000)]);
    let r = root.path();
    let tmp = tempfile::tempdir().unwrap();
    let dir = claims_dir(&tmp);
    let old = scoped("web", NRI, 100, 5000);
    let new = scoped("web", NRI, 200, 6000);
    let other = scoped("db", NRI, 300, 7000);
    claim_gpus(&dir, r, &old, &addrs(&["0000:18:00.0"]), WAIT).unwrap();
    claim_gpus(&dir, r, &other, &addrs(&["0000:2a:00.0"]), WAIT).unwrap();
    let got = claim_gpus(
        &dir,
        r,
        &new,
        &addrs(&["0000:18:00.0", "0000:2a:00.0"]),
        WAIT,
    )
    .unwrap();
    assert_eq!(
        got,
        ClaimOutcome::Held {
            address: "0000:2a:00.0".into(),
            by: other.clone()
        }
    );
    let listed = held(&dir, r);
    assert_eq!(listed[0].1, old, "untouched: {listed:?}");
    assert_eq!(listed[1].1, other);
}
