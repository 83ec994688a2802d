//! A lock on what the tests share with the host's default configuration: podman's default
//! hooks directories and `/etc/cpuplan/hook.json`.
//!
//! `tests/packaging/deb.rs` installs the Debian package, which puts `cpuplan.json` into
//! `/usr/share/containers/oci/hooks.d` (read by every podman without a `hooks_dir` of its own)
//! and `/etc/cpuplan/hook.json` (read by every hook run without `--config`). It holds the lock
//! exclusively from `dpkg -i` to `dpkg --purge`; every private podman ([`super::podman`]) holds
//! it shared while it exists, so no podman test of any test binary, in this or another `cargo
//! test` on the machine, runs while the package is installed by the test. An `flock` on one
//! file: released when the holder exits, however it ends.
#![allow(dead_code)]

use std::fs::{File, OpenOptions};

use nix::fcntl::{Flock, FlockArg};

/// The lock file (fixed, so that every test process on the machine finds it): in the host's
/// directory for lock files (a tmpfs emptied at boot), so that the suite leaves nothing in
/// `/tmp`.
pub const LOCK_FILE: &str = "/run/lock/cpuplan-tests-host.lock";

/// A held lock; dropped, it is released.
pub struct HostLock(Flock<File>);

fn lock(arg: FlockArg) -> HostLock {
    let _ = std::fs::create_dir_all("/run/lock");
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK_FILE)
        .unwrap_or_else(|e| panic!("cannot open the test lock {LOCK_FILE}: {e}"));
    HostLock(
        Flock::lock(f, arg)
            .unwrap_or_else(|(_, e)| panic!("cannot lock the test lock {LOCK_FILE}: {e}")),
    )
}

/// The lock shared with other users of the host's podman (waits while a package test holds it).
pub fn shared() -> HostLock {
    lock(FlockArg::LockShared)
}

/// The lock alone (waits until no podman test holds it).
pub fn exclusive() -> HostLock {
    lock(FlockArg::LockExclusive)
}
