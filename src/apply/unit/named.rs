//! Which systemd unit the hook may set `AllowedCPUs` on: the one the spec's `linux.cgroupsPath`
//! names, and only where the cgroup found for the container is that unit's own. Pure: paths in,
//! a choice out.
//!
//! The unit is named as runc's and crun's systemd drivers name it from `slice:prefix:name`:
//! - the scope `prefix-name.scope` (runc's `getUnitName`, crun's `get_systemd_scope_and_slice`;
//!   an empty prefix gives `-name.scope` in both), placed by systemd in the cgroup of its slice:
//!   `slice` expanded as systemd nests slices (`a-b.slice` → `a.slice/a-b.slice`, `-.slice` the
//!   root, empty `system.slice`), then the scope;
//! - runc only: where `name` ends in `.slice`, the slice `name` itself, whose cgroup systemd
//!   derives from its own name; taken only where that is also where runc puts it (the expanded
//!   `slice`, then `name`).
//!
//! The cgroup found for the container (its init's, read from `/proc/<pid>/cgroup` in the host's
//! cgroup namespace) must be that unit's cgroup, or one child directly below it (crun's and
//! podman's `container`, or what crun's `run.oci.systemd.subgroup` names). Nothing is derived
//! from a walk up the found path: a container whose cgroup sits below another unit (a
//! cgroupfs driver given the systemd form, which puts it below the runtime's own cgroup: below
//! `containerd.service`, a session scope, `user@<uid>.service`, another container's scope) gets
//! no call at all, for that unit is not the container's and other processes run in it.

use std::path::{Path, PathBuf};

/// What the hook does with systemd for a container, given where its cgroup was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// The spec names no systemd unit (no `cgroupsPath`, a path): nothing to call.
    NotSystemd,
    /// The container's cgroup is the unit's (or its runtime's child of it): set it there.
    Unit {
        /// The unit's name (`cri-containerd-<id>.scope`).
        name: String,
        /// Its cgroup, relative to the unified hierarchy's root.
        cgroup: PathBuf,
    },
    /// The spec names `unit`, but the container's cgroup is not that unit's: no call.
    Refused {
        /// The unit the spec names (or, where it names none systemd would make, the spec's
        /// `cgroupsPath`).
        unit: String,
        /// Why, naming the cgroups, in words.
        why: String,
    },
}

/// The unit to set for a container whose spec says `cgroups_path` and whose cgroup was found at
/// `found` (relative to the unified hierarchy's root): [`Choice`].
pub fn choose(found: &Path, cgroups_path: Option<&str>) -> Choice {
    let Some(cg) = cgroups_path.filter(|c| systemd_form(c)) else {
        return Choice::NotSystemd;
    };
    let units = match named_units(cg) {
        Ok(units) => units,
        Err(why) => {
            return Choice::Refused {
                unit: cg.to_string(),
                why: format!(
                    "the cgroupsPath {cg:?} names no unit systemd would make ({why}); the container's cgroup is /{}",
                    found.display()
                ),
            }
        }
    };
    let parent = found.parent();
    for (name, cgroup) in &units {
        if found == cgroup || parent == Some(cgroup.as_path()) {
            return Choice::Unit {
                name: name.clone(),
                cgroup: cgroup.clone(),
            };
        }
    }
    let (unit, cgroup) = &units[0];
    Choice::Refused {
        unit: unit.clone(),
        why: format!(
            "the container's cgroup /{} is not that unit's cgroup /{} (nor a child of it), so the unit is not the container's",
            found.display(),
            cgroup.display()
        ),
    }
}

/// Whether `cgroups_path` has the systemd drivers' form `slice:prefix:name`.
pub fn systemd_form(cgroups_path: &str) -> bool {
    !cgroups_path.starts_with('/') && cgroups_path.split(':').count() == 3
}

/// The units `slice:prefix:name` names, with their cgroups (relative): the scope first, then
/// runc's slice; or why it names none.
fn named_units(cgroups_path: &str) -> Result<Vec<(String, PathBuf)>, String> {
    let parts: Vec<&str> = cgroups_path.split(':').collect();
    let [slice, prefix, name] = parts[..] else {
        return Err("not slice:prefix:name".into());
    };
    let slice = if slice.is_empty() {
        "system.slice"
    } else {
        slice
    };
    let slice_dir =
        expand_slice(slice).ok_or_else(|| format!("{slice:?} is not a slice's name"))?;
    let scope = format!("{prefix}-{name}.scope");
    if scope.contains('/') {
        return Err(format!("{scope:?} holds a '/'"));
    }
    let mut units = vec![(scope.clone(), slice_dir.join(&scope))];
    if name.ends_with(".slice") {
        let runs_in = slice_dir.join(name);
        if expand_slice(name).is_some_and(|own| own == runs_in) {
            units.insert(0, (name.to_string(), runs_in));
        }
    }
    Ok(units)
}

/// A systemd slice's cgroup (the planner's [`cpuplan::expand_slice`]) as a path.
fn expand_slice(slice: &str) -> Option<PathBuf> {
    cpuplan::expand_slice(slice).map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(found: &str, cg: &str) -> Option<(String, String)> {
        match choose(Path::new(found), Some(cg)) {
            Choice::Unit { name, cgroup } => Some((name, cgroup.display().to_string())),
            _ => None,
        }
    }

    fn refused(found: &str, cg: &str) -> (String, String) {
        match choose(Path::new(found), Some(cg)) {
            Choice::Refused { unit, why } => (unit, why),
            c => panic!("{found} with {cg}: {c:?}"),
        }
    }

    #[test]
    fn the_runtimes_own_units_are_chosen() {
        let own = |n: &str, c: &str| Some((n.to_string(), c.to_string()));
        // runc's scope, the processes in it.
        assert_eq!(
            unit("system.slice/cpuplan-x.scope", "system.slice:cpuplan:x"),
            own("cpuplan-x.scope", "system.slice/cpuplan-x.scope")
        );
        // crun's and podman's child of the scope, whatever the subgroup's name.
        for child in ["container", "payload"] {
            assert_eq!(
                unit(
                    &format!("machine.slice/libpod-ab.scope/{child}"),
                    "machine.slice:libpod:ab"
                ),
                own("libpod-ab.scope", "machine.slice/libpod-ab.scope")
            );
        }
        // kubelet's pod slice, nested as systemd nests it.
        let pod = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice";
        assert_eq!(
            unit(
                &format!("{pod}/cri-containerd-c1.scope"),
                "kubepods-burstable-pod1.slice:cri-containerd:c1"
            ),
            own(
                "cri-containerd-c1.scope",
                &format!("{pod}/cri-containerd-c1.scope")
            )
        );
        // An empty slice is system.slice, an empty prefix runc's and crun's "-name.scope",
        // "-.slice" the root.
        assert_eq!(
            unit("system.slice/-c1.scope", "::c1"),
            own("-c1.scope", "system.slice/-c1.scope")
        );
        assert_eq!(
            unit("p-c1.scope", "-.slice:p:c1"),
            own("p-c1.scope", "p-c1.scope")
        );
        // runc's slice unit, where systemd would put it too; crun's scope of the same name.
        assert_eq!(
            unit(
                "machine.slice/machine-c1.slice",
                "machine.slice:p:machine-c1.slice"
            ),
            own("machine-c1.slice", "machine.slice/machine-c1.slice")
        );
        assert_eq!(
            unit(
                "machine.slice/p-machine-c1.slice.scope/container",
                "machine.slice:p:machine-c1.slice"
            ),
            own(
                "p-machine-c1.slice.scope",
                "machine.slice/p-machine-c1.slice.scope"
            )
        );
    }

    #[test]
    fn a_cgroup_below_another_unit_gets_no_call() {
        let cg = "kubepods-burstable-pod1.slice:cri-containerd:c1";
        let want = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-c1.scope";
        for found in [
            // A cgroupfs driver given the systemd form: the literal, below the runtime's cgroup.
            format!("system.slice/containerd.service/{cg}"),
            format!("system.slice/containerd.service/shim/{cg}"),
            format!("user.slice/user-1000.slice/session-3.scope/{cg}"),
            format!("user.slice/user-1000.slice/user@1000.service/app.slice/{cg}"),
            format!("system.slice/docker-0a1b.scope/{cg}"),
            // The named scope's path, but below another unit (a nested engine, a user
            // manager's own copy of the tree).
            format!("system.slice/docker-0a1b.scope/{want}"),
            format!("user.slice/user-1000.slice/user@1000.service/{want}"),
            // Two levels below the scope, or a sibling of it.
            format!("{want}/container/deeper"),
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/other.scope"
                .to_string(),
            // The slice itself, or the root.
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice".to_string(),
            String::new(),
        ] {
            let (unit, why) = refused(&found, cg);
            assert_eq!(unit, "cri-containerd-c1.scope", "{found}");
            assert!(
                why.contains(&format!("/{found} ")) && why.contains(&format!("/{want} ")),
                "{found}: {why}"
            );
        }
        // rootless podman's scope under the user's manager: not the system bus's unit.
        let (unit, _) = refused(
            "user.slice/user-1000.slice/user@1000.service/user.slice/libpod-ab.scope/container",
            "user.slice:libpod:ab",
        );
        assert_eq!(unit, "libpod-ab.scope");
        // A slice runc would not nest where systemd does: only crun's scope is named.
        assert_eq!(
            refused(
                "system.slice/machine-c1.slice",
                "system.slice:p:machine-c1.slice"
            )
            .0,
            "p-machine-c1.slice.scope"
        );
    }

    #[test]
    fn a_path_names_no_unit_and_a_bad_slice_no_unit_at_all() {
        for cg in ["/cpuplan/x", "/a.slice:b:c", "a/b", "a:b", "a:b:c:d", ""] {
            assert_eq!(
                choose(Path::new("system.slice/x.scope"), Some(cg)),
                Choice::NotSystemd,
                "{cg}"
            );
        }
        assert_eq!(
            choose(Path::new("system.slice/x.scope"), None),
            Choice::NotSystemd
        );
        for cg in ["a:b:c", "a--b.slice:p:c", "a.slice:p/q:c", "a.slice:p:c/d"] {
            let (unit, why) = refused("system.slice/containerd.service/x", cg);
            assert_eq!(unit, cg);
            assert!(
                why.contains("names no unit") && why.contains("/system.slice/containerd.service/x"),
                "{why}"
            );
        }
    }
}
