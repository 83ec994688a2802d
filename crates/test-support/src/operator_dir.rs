//! The one place tests make a directory that the hook takes as the operator's: a `claims_dir`
//! (and the host-plan records beside it) must be, with every directory above it, root's and
//! writable by root alone, which no directory under `/tmp` (1777) is. [`tempdir`] makes a fresh
//! directory below [`BASE`], root's and 0755 under `/run`, whatever the checkout's path (a 0700
//! home directory, CI's clean clone) and wherever `TMPDIR` points.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;

/// The directory the tests' operator directories are made in: kept between runs (empty once
/// every test's `TempDir` is dropped), made 0755 by the first test that needs it.
pub const BASE: &str = "/run/cpuplan-tests";

/// A fresh directory below [`BASE`] (root's, 0700, removed on drop), for a test's claims
/// directory and whatever it keeps beside it: the hook accepts `<it>/claims` as `claims_dir`.
/// Tests that run the hook as another user open it up themselves, as they do under `/tmp`.
pub fn tempdir() -> tempfile::TempDir {
    let base = Path::new(BASE);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(base)
        .unwrap_or_else(|e| panic!("{BASE}: {e} (the tests that run the hook run as root)"));
    let m = std::fs::symlink_metadata(base).unwrap();
    assert!(
        m.is_dir() && m.uid() == nix::unistd::geteuid().as_raw(),
        "{BASE} is not a directory of this user's: remove it"
    );
    if m.mode() & 0o022 != 0 {
        std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    tempfile::Builder::new()
        .prefix("cpuplan-")
        .tempdir_in(base)
        .unwrap_or_else(|e| panic!("a tempdir in {BASE}: {e}"))
}

/// Claims `gpus` in `claims` for this test's own process (live for the test's life) as a
/// container `container` of scope `scope`, the way the hook and the plugin take claims.
#[cfg(feature = "hook")]
pub fn claim_as_this_process(claims: &Path, container: &str, scope: &str, gpus: &[&str]) {
    let root = Path::new("/");
    let holder = cpuplan::Holder::of_pid(root, container, scope, std::process::id())
        .unwrap()
        .expect("this process runs");
    let gpus: Vec<String> = gpus.iter().map(|g| g.to_string()).collect();
    let wait = std::time::Duration::from_secs(1);
    cpuplan::claim_gpus(claims, root, &holder, &gpus, wait).unwrap();
}
