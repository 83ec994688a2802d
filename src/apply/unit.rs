//! The cpuset where systemd keeps it: under the systemd cgroup driver, the container's scope
//! unit's `AllowedCPUs` property, set through systemd's D-Bus API.
//!
//! systemd writes a unit's `cpuset.cpus` from its properties whenever it re-applies them: at a
//! `daemon-reload`, a `systemctl set-property`, and a restart of a unit of the same slice. A
//! narrowing written only to the cgroup file is undone then, so under the systemd driver the
//! hook also sets `AllowedCPUs` on the container's unit at runtime (as runc does for `runc
//! update`): `SetUnitProperties(unit, true, [("AllowedCPUs", bitmask)])` on
//! `org.freedesktop.systemd1.Manager`. The bitmask is systemd's: byte `i` bit `j` is CPU
//! `8i + j`.
//!
//! The unit is the one the spec's `linux.cgroupsPath` names in the systemd drivers' form
//! `slice:prefix:name` (`prefix-name.scope`, as runc and crun name it), and only where the
//! container's cgroup (its pid's, read from `/proc/<pid>/cgroup` in the host's cgroup namespace)
//! is that unit's own cgroup or the runtime's child directly below it (crun's and podman's
//! `container`): [`named`]. A container whose cgroup sits anywhere else (below
//! `containerd.service`, a session scope, `user@<uid>.service` or another container's scope, as
//! a cgroupfs driver given the systemd form puts it) gets no call, and one logged line naming
//! the unit and the cgroup: the unit above it is not the container's, and setting it would
//! confine every other process of that unit. Only on the unified hierarchy; a path
//! (`cgroupfs`) names no unit, and such a container never waits on the bus.
//!
//! The call goes to the system bus of the host the hook reads (`<root>/run/dbus/
//! system_bus_socket`, `root` the hook config's; or `DBUS_SYSTEM_BUS_ADDRESS` from the hook's
//! registration: [`system_bus`]), with zbus: a kept crate of pure
//! Rust that builds static against musl (no libdbus), so the static hook stays static. It is
//! bounded by what the hook's registration leaves, and never over [`UNIT_TIMEOUT`]
//! ([`unit_wait`]), the call that puts the property back after a failed start as well: a bus
//! that is absent, refuses, or does not answer in time is a
//! logged fallback (the cgroup file is still written, as on any cgroupfs node), never a blocked
//! or refused start.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use cpuplan::{CgroupDir, CgroupVersion, CpuSet};

pub mod named;

use named::Choice;

/// How long the hook waits for systemd to take the property before it goes on without it.
pub const UNIT_TIMEOUT: Duration = Duration::from_secs(2);

/// What a wait on systemd leaves of the hook's registered time for the rest of its work.
pub const UNIT_RESERVE: Duration = Duration::from_millis(500);

/// Why systemd did not take the property.
#[derive(Debug, thiserror::Error)]
pub enum UnitError {
    /// The bus or systemd refused the call, or it could not be made.
    #[error("systemd did not set AllowedCPUs on {unit}: {source}")]
    Call {
        /// The unit.
        unit: String,
        /// zbus's error.
        #[source]
        source: zbus::Error,
    },
    /// No answer within the bound.
    #[error("systemd did not answer within {} ms setting AllowedCPUs on {unit}", timeout.as_millis())]
    Timeout {
        /// The unit.
        unit: String,
        /// The bound.
        timeout: Duration,
    },
}

/// The container's systemd unit: its name and its cgroup directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    /// The unit's name (`cri-containerd-<id>.scope`).
    pub name: String,
    /// Its cgroup directory (an ancestor of the pid's, or the pid's own).
    pub dir: PathBuf,
}

/// What the hook does with systemd for a container whose cgroup is `found` ([`named::choose`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnitOf {
    /// No unit: v1, or the spec names none (a path, no `cgroupsPath`).
    NotSystemd,
    /// The container's own unit.
    Own(Unit),
    /// The spec names `unit`, but the container's cgroup is not that unit's: no call.
    NotOwn {
        /// The unit the spec names.
        unit: String,
        /// Why, naming the cgroups.
        why: String,
    },
}

/// The container's own systemd unit, found as [`named::choose`] chooses it: the one its spec's
/// `cgroups_path` names, when its cgroup `found` (on the unified hierarchy) is that unit's.
pub fn unit_of(found: &CgroupDir, cgroups_path: Option<&str>) -> UnitOf {
    if found.version != CgroupVersion::V2 {
        return UnitOf::NotSystemd;
    }
    let Ok(rel) = found.dir.strip_prefix(&found.mount) else {
        return UnitOf::NotSystemd;
    };
    match named::choose(rel, cgroups_path) {
        Choice::NotSystemd => UnitOf::NotSystemd,
        Choice::Unit { name, cgroup } => UnitOf::Own(Unit {
            name,
            dir: found.mount.join(cgroup),
        }),
        Choice::Refused { unit, why } => UnitOf::NotOwn { unit, why },
    }
}

/// How long to wait for systemd when the hook's registration leaves `left`: that, less
/// [`UNIT_RESERVE`] for the rest of the hook's work, and never over [`UNIT_TIMEOUT`].
pub fn unit_wait(left: Duration) -> Duration {
    left.saturating_sub(UNIT_RESERVE).min(UNIT_TIMEOUT)
}

/// The D-Bus address of the system bus of the host under `root`: `DBUS_SYSTEM_BUS_ADDRESS`
/// where the hook's registration sets it, else `<root>/run/dbus/system_bus_socket`.
pub fn system_bus(root: &Path) -> String {
    match std::env::var("DBUS_SYSTEM_BUS_ADDRESS") {
        Ok(a) if !a.is_empty() => a,
        _ => format!(
            "unix:path={}",
            root.join("run/dbus/system_bus_socket").display()
        ),
    }
}

/// `cpus` as systemd's `AllowedCPUs` bitmask: byte `i` bit `j` is CPU `8i + j`.
pub fn allowed_cpus_mask(cpus: &CpuSet) -> Vec<u8> {
    let mut mask = vec![0u8; cpus.last().map_or(0, |l| l / 8 + 1)];
    for c in cpus {
        mask[c / 8] |= 1 << (c % 8);
    }
    mask
}

/// Sets `cpus` as `unit`'s `AllowedCPUs` at runtime through systemd on the bus at `bus` (a
/// D-Bus address: [`system_bus`]), waiting at most `timeout`; how long it took. An empty set
/// clears the property (the unit inherits its slice's CPUs).
pub fn set_allowed_cpus(
    bus: &str,
    unit: &str,
    cpus: &CpuSet,
    timeout: Duration,
) -> Result<Duration, UnitError> {
    let t0 = Instant::now();
    let mask = allowed_cpus_mask(cpus);
    let name = unit.to_string();
    let bus = bus.to_string();
    let (tx, rx) = mpsc::channel();
    // The call runs on a thread of its own, so that a bus which never answers costs the start
    // `timeout` and no more; such a thread is left behind (the hook is a one-shot process).
    let spawned = std::thread::Builder::new()
        .name("cpuplan-dbus".into())
        .spawn(move || {
            let _ = tx.send(zbus::block_on(call(bus, &name, mask)));
        });
    if let Err(e) = spawned {
        return Err(UnitError::Call {
            unit: unit.into(),
            source: zbus::Error::InputOutput(std::sync::Arc::new(e)),
        });
    }
    match rx.recv_timeout(timeout) {
        Ok(Ok(())) => Ok(t0.elapsed()),
        Ok(Err(source)) => Err(UnitError::Call {
            unit: unit.into(),
            source,
        }),
        Err(_) => Err(UnitError::Timeout {
            unit: unit.into(),
            timeout,
        }),
    }
}

/// `SetUnitProperties(unit, runtime = true, [("AllowedCPUs", mask)])`.
async fn call(bus: String, unit: &str, mask: Vec<u8>) -> zbus::Result<()> {
    let conn = zbus::connection::Builder::address(bus.as_str())
        .build()
        .await?;
    let manager = zbus::Proxy::new(
        &conn,
        "org.freedesktop.systemd1",
        "/org/freedesktop/systemd1",
        "org.freedesktop.systemd1.Manager",
    )
    .await?;
    let props = vec![("AllowedCPUs", zbus::Variant::from(mask))];
    manager
        .call_method("SetUnitProperties", &(unit, true, props))
        .await?;
    Ok(())
}

/// The unit's own `cpuset.cpus` as it is now (what to put back), or empty when unreadable.
pub fn unit_cpus_now(unit: &Unit) -> String {
    let path: &Path = &unit.dir.join("cpuset.cpus");
    cpuplan::read_file(path, 64 << 10)
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2(rel: &str) -> CgroupDir {
        CgroupDir {
            version: CgroupVersion::V2,
            controllers: vec![],
            mount: PathBuf::from("/sys/fs/cgroup"),
            dir: Path::new("/sys/fs/cgroup").join(rel),
        }
    }

    #[test]
    fn the_unit_is_the_runtimes_scope_and_never_one_above_it() {
        let u = |rel: &str, cg: &str| unit_of(&v2(rel), Some(cg));
        assert_eq!(
            u("system.slice/cpuplan-x.scope", "system.slice:cpuplan:x"),
            UnitOf::Own(Unit {
                name: "cpuplan-x.scope".into(),
                dir: "/sys/fs/cgroup/system.slice/cpuplan-x.scope".into()
            })
        );
        // crun and podman: the processes sit in a child of the scope; the unit's dir is the
        // scope's (what its cpuset.cpus held is read there).
        assert_eq!(
            u(
                "machine.slice/libpod-ab.scope/container",
                "machine.slice:libpod:ab"
            ),
            UnitOf::Own(Unit {
                name: "libpod-ab.scope".into(),
                dir: "/sys/fs/cgroup/machine.slice/libpod-ab.scope".into()
            })
        );
        // A cgroupfs driver given the systemd form: below containerd.service, never it.
        let cg = "kubepods-burstable-pod1.slice:cri-containerd:c1";
        match u(&format!("system.slice/containerd.service/{cg}"), cg) {
            UnitOf::NotOwn { unit, why } => {
                assert_eq!(unit, "cri-containerd-c1.scope");
                assert!(
                    why.contains(&format!("/system.slice/containerd.service/{cg}")),
                    "{why}"
                );
            }
            other => panic!("{other:?}"),
        }
        // cgroupfs: a path, or no cgroupsPath: no unit, nothing said.
        assert_eq!(u("cpuplan/x", "/cpuplan/x"), UnitOf::NotSystemd);
        assert_eq!(
            unit_of(&v2("system.slice/x.scope"), None),
            UnitOf::NotSystemd
        );
        // v1: systemd's AllowedCPUs is the unified hierarchy's.
        let v1 = CgroupDir {
            version: CgroupVersion::V1,
            ..v2("system.slice/y-x.scope")
        };
        assert_eq!(unit_of(&v1, Some("system.slice:y:x")), UnitOf::NotSystemd);
    }

    #[test]
    fn the_wait_is_what_the_registration_leaves() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        assert_eq!(unit_wait(s(30)), UNIT_TIMEOUT);
        assert_eq!(unit_wait(ms(2500)), UNIT_TIMEOUT);
        assert_eq!(unit_wait(ms(1700)), ms(1200));
        assert_eq!(unit_wait(ms(400)), Duration::ZERO);
    }

    #[test]
    fn the_bus_is_the_hosts_under_root() {
        // The only test that reads the variable; none sets it.
        if std::env::var_os("DBUS_SYSTEM_BUS_ADDRESS").is_none() {
            assert_eq!(
                system_bus(Path::new("/")),
                "unix:path=/run/dbus/system_bus_socket"
            );
            assert_eq!(
                system_bus(Path::new("/fake")),
                "unix:path=/fake/run/dbus/system_bus_socket"
            );
        }
    }

    #[test]
    fn the_mask_is_systemds() {
        let set = |s: &str| s.parse::<CpuSet>().unwrap();
        assert_eq!(allowed_cpus_mask(&set("1")), [0b10]);
        assert_eq!(allowed_cpus_mask(&set("0-1")), [0b11]);
        assert_eq!(allowed_cpus_mask(&set("0,9,17")), [1, 2, 2]);
        assert_eq!(allowed_cpus_mask(&set("8-15")), [0, 0xff]);
        assert!(allowed_cpus_mask(&CpuSet::new()).is_empty());
    }

    #[test]
    fn no_bus_is_an_error_in_bounded_time() {
        let dir = tempfile::tempdir().unwrap();
        let one = "1".parse().unwrap();
        // Nothing listens: the call fails at once, and says which unit.
        let addr = format!("unix:path={}", dir.path().join("none").display());
        let e = set_allowed_cpus(&addr, "x.scope", &one, UNIT_TIMEOUT).unwrap_err();
        assert!(matches!(e, UnitError::Call { .. }), "{e}");
        assert!(e.to_string().contains("x.scope"), "{e}");
        // A bus that takes the connection and never answers: the bound, not a hang.
        let path = dir.path().join("mute");
        let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let addr = format!("unix:path={}", path.display());
        let bound = Duration::from_millis(300);
        let t0 = Instant::now();
        let e = set_allowed_cpus(&addr, "y.scope", &one, bound).unwrap_err();
        assert!(matches!(e, UnitError::Timeout { .. }), "{e}");
        assert!(t0.elapsed() < bound + Duration::from_millis(500));
        assert!(
            e.to_string().contains("y.scope") && e.to_string().contains("300 ms"),
            "{e}"
        );
    }
}
