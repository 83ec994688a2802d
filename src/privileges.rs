//! Dropping every capability the hook does not need before it reads anything a container controls.
//!
//! Kept, and why:
//! - `CAP_DAC_OVERRIDE`: write `cpuset.cpus` of the container's cgroup and create the plan
//!   directory in a rootfs whose files may belong to another (mapped) user.
//! - `CAP_DAC_READ_SEARCH`: read `/proc/<pid>/{status,cgroup,stat}` and sysfs files whatever their modes.
//! - `CAP_SYS_PTRACE`: open `/proc/<pid>/root` and `/proc/<pid>/ns/mnt` of the container's init,
//!   which runc makes non-dumpable (the kernel then demands ptrace access).
//! - `CAP_FOWNER`: `fchmod` the plan files and directory to 0644/0755 where the rootfs's owner differs.
//!
//! Everything else (`CAP_SYS_ADMIN`, `CAP_NET_*`, `CAP_SETUID`, …) is dropped from the effective,
//! permitted, inheritable and ambient sets, and `no_new_privs` is set, so nothing the hook could
//! exec regains them (with `no_new_privs` an exec grants no file capabilities and no setuid, so
//! the bounding set needs no separate drop: that would cost one `prctl` per capability at every
//! container start).

use caps::{CapSet, Capability, CapsHashSet};

/// The capabilities the hook keeps.
pub const KEEP: [Capability; 4] = [
    Capability::CAP_DAC_OVERRIDE,
    Capability::CAP_DAC_READ_SEARCH,
    Capability::CAP_SYS_PTRACE,
    Capability::CAP_FOWNER,
];

/// Drops every capability but [`KEEP`]; returns what it could not do (a warning, never fatal).
pub fn drop_capabilities() -> Result<(), String> {
    let keep: CapsHashSet = KEEP.into_iter().collect();
    let mut problems = Vec::new();
    let _ = caps::clear(None, CapSet::Ambient);
    for set in [CapSet::Inheritable, CapSet::Effective, CapSet::Permitted] {
        match caps::read(None, set) {
            Ok(have) => {
                let want: CapsHashSet = have.intersection(&keep).copied().collect();
                if let Err(e) = caps::set(None, set, &want) {
                    problems.push(format!("{set:?}: {e}"));
                }
            }
            Err(e) => problems.push(format!("{set:?}: {e}")),
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
