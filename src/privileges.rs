//! Dropping every capability the hook does not need before it reads anything a container controls.
//!
//! Kept, and why:
//! - `CAP_DAC_OVERRIDE`: write `cpuset.cpus` of the container's cgroup and create the plan
//!   directory in a rootfs whose files may belong to another (mapped) user.
//! - `CAP_DAC_READ_SEARCH`: read `/proc/<pid>/{status,cgroup,stat}` and sysfs files whatever their modes.
//! - `CAP_SYS_PTRACE`: open `/proc/<pid>/root` and `/proc/<pid>/ns/mnt` of the container's init,
//!   which runc makes non-dumpable (the kernel then demands ptrace access).
//! - `CAP_FOWNER`: replace or remove plan files in an image's sticky directory whose owner differs
//!   (the kernel's sticky-bit rule asks for it where neither the file nor the directory is root's).
//!
//! Everything else (`CAP_SYS_ADMIN`, `CAP_NET_*`, `CAP_SETUID`, …) is dropped from the effective,
//! permitted, inheritable and ambient sets, and `no_new_privs` is set, so nothing the hook could
//! exec regains them (with `no_new_privs` an exec grants no file capabilities and no setuid, so
//! the bounding set needs no separate drop).

use caps::{CapSet, Capability, CapsHashSet};

/// The capabilities the hook keeps.
pub const KEEP: [Capability; 4] = [
    Capability::CAP_DAC_OVERRIDE,
    Capability::CAP_DAC_READ_SEARCH,
    Capability::CAP_SYS_PTRACE,
    Capability::CAP_FOWNER,
];

/// Drops every capability but [`KEEP`]; returns what it could not do (a warning, never fatal).
///
/// The effective set first, then the permitted (the effective must stay within it), then the
/// inheritable; each keeps only what it held of [`KEEP`].
pub fn drop_capabilities() -> Result<(), String> {
    let keep: CapsHashSet = KEEP.into_iter().collect();
    let mut problems = Vec::new();
    // A kernel without ambient capabilities (before 4.3) has none to clear.
    let _ = caps::clear(None, CapSet::Ambient);
    for set in [CapSet::Effective, CapSet::Permitted, CapSet::Inheritable] {
        let kept = match caps::read(None, set) {
            Ok(held) => &held & &keep,
            Err(e) => {
                problems.push(format!("{set:?}: {e}"));
                continue;
            }
        };
        if let Err(e) = caps::set(None, set, &kept) {
            problems.push(format!("{set:?}: {e}"));
        }
    }
    if let Err(e) = nix::sys::prctl::set_no_new_privs() {
        problems.push(format!("no_new_privs: {e}"));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

/// The effective capabilities of this process now.
pub fn effective() -> CapsHashSet {
    caps::read(None, CapSet::Effective).unwrap_or_default()
}
