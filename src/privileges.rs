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
///
/// One `capget` and one `capset` for the three sets together (the `caps` crate's per-set calls
/// cost ten system calls and a hash set each at every container start).
pub fn drop_capabilities() -> Result<(), String> {
    let keep = KEEP.iter().fold(0u64, |a, c| a | (1u64 << c.index()));
    let mut problems = Vec::new();
    let _ = caps::clear(None, CapSet::Ambient);
    match capget() {
        Ok(mut data) => {
            for (i, d) in data.iter_mut().enumerate() {
                let k = (keep >> (32 * i)) as u32;
                d.effective &= k;
                d.permitted &= k;
                d.inheritable &= k;
            }
            if let Err(e) = capset(&data) {
                problems.push(format!("capset: {e}"));
            }
        }
        Err(e) => problems.push(format!("capget: {e}")),
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

/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const CAP_V3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// This thread's three capability sets (`capget(2)`, version 3).
fn capget() -> Result<[CapData; 2], nix::Error> {
    let mut header = CapHeader {
        version: CAP_V3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: the header and the two data words are the layout capget(2) documents for
    // version 3, and both pointers are valid for the call.
    let r = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_capget,
            &mut header as *mut CapHeader,
            data.as_mut_ptr(),
        )
    };
    nix::errno::Errno::result(r).map(|_| data)
}

/// Sets this thread's three capability sets to `data` (`capset(2)`, version 3).
fn capset(data: &[CapData; 2]) -> Result<(), nix::Error> {
    let mut header = CapHeader {
        version: CAP_V3,
        pid: 0,
    };
    // SAFETY: as in capget; capset only reads the data.
    let r = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_capset,
            &mut header as *mut CapHeader,
            data.as_ptr(),
        )
    };
    nix::errno::Errno::result(r).map(drop)
}

/// The effective capabilities of this process now.
pub fn effective() -> CapsHashSet {
    caps::read(None, CapSet::Effective).unwrap_or_default()
}
