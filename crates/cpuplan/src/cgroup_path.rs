//! What a spec's `linux.cgroupsPath` names: its path form cleaned as runc cleans it, and its
//! systemd form `slice:prefix:name` as runc's systemd driver expands it (slices nest:
//! `a-b.slice` is `a.slice/a-b.slice`; no slice is `system.slice`; `-.slice` is the root).

/// The cgroup path (absolute) the runtime gives a container whose spec names `spec`: the path
/// form cleaned, the systemd form expanded; `None` for a value that names nothing.
pub fn expand_cgroups_path(spec: &str) -> Option<String> {
    if !spec.starts_with('/') {
        if let Some(first) = systemd_paths(spec).into_iter().next() {
            return Some(format!("/{first}"));
        }
    }
    clean(spec).map(|p| format!("/{p}"))
}

/// Every cgroup path (relative to a hierarchy's root) `spec` may name: the path form cleaned
/// (runc's cgroupfs driver takes even a systemd-form value literally), and for the systemd form
/// the units systemd makes of it.
pub fn cgroups_path_names(spec: &str) -> Vec<String> {
    let mut names: Vec<String> = clean(spec).into_iter().collect();
    if !spec.starts_with('/') {
        names.extend(systemd_paths(spec));
    }
    names
}

/// `path` cleaned as runc cleans a cgroupfs path: `.` dropped, `..` taken back (never above
/// the root), made relative; `None` if nothing is left.
fn clean(path: &str) -> Option<String> {
    let parts = lexical_components(path);
    (!parts.is_empty()).then(|| parts.join("/"))
}

/// The components of `path` read lexically from `/`, as runc and Go's `filepath.Clean` read a
/// path before following any link: empty and `.` components dropped, `..` taking the previous
/// one back (never above the root).
pub fn lexical_components(path: &str) -> Vec<&str> {
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    parts
}

/// The paths systemd gives `slice:prefix:name`, none if it is not that form.
fn systemd_paths(spec: &str) -> Vec<String> {
    let parts: Vec<&str> = spec.split(':').collect();
    let [slice, prefix, name] = parts[..] else {
        return Vec::new();
    };
    let slice = if slice.is_empty() {
        "system.slice"
    } else {
        slice
    };
    let Some(slice_dir) = expand_slice(slice) else {
        return Vec::new();
    };
    if name.is_empty() || name.contains('/') || prefix.contains('/') {
        return Vec::new();
    }
    let units = if name.ends_with(".slice") {
        vec![name.to_string()]
    } else if prefix.is_empty() {
        vec![format!("{name}.scope"), format!("-{name}.scope")]
    } else {
        vec![format!("{prefix}-{name}.scope")]
    };
    units
        .into_iter()
        .map(|u| {
            if slice_dir.is_empty() {
                u
            } else {
                format!("{slice_dir}/{u}")
            }
        })
        .collect()
}

/// A systemd slice's cgroup path, as systemd nests slices (runc's `ExpandSlice`): `a-b.slice` →
/// `a.slice/a-b.slice`, `-.slice` → the root (empty); `None` for a name that is not a slice's.
pub fn expand_slice(slice: &str) -> Option<String> {
    let base = slice.strip_suffix(".slice")?;
    if base.is_empty() || base.contains('/') {
        return None;
    }
    if base == "-" {
        return Some(String::new());
    }
    let mut path: Vec<String> = Vec::new();
    let mut prefix = String::new();
    for comp in base.split('-') {
        if comp.is_empty() {
            return None;
        }
        prefix.push_str(comp);
        path.push(format!("{prefix}.slice"));
        prefix.push('-');
    }
    Some(path.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_expand_as_systemd_nests_them() {
        assert_eq!(
            expand_slice("system.slice").as_deref(),
            Some("system.slice")
        );
        assert_eq!(
            expand_slice("kubepods-besteffort-pod1.slice").as_deref(),
            Some("kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice")
        );
        assert_eq!(expand_slice("-.slice").as_deref(), Some(""));
        for bad in [
            "a--b.slice",
            "-a.slice",
            "a-.slice",
            ".slice",
            "a.scope",
            "a/b.slice",
        ] {
            assert_eq!(expand_slice(bad), None, "{bad}");
        }
    }

    #[test]
    fn what_a_cgroups_path_names() {
        assert_eq!(cgroups_path_names("/a/b"), ["a/b"]);
        assert_eq!(cgroups_path_names("/a/./x/../b/"), ["a/b"]);
        assert_eq!(cgroups_path_names("/../../a"), ["a"]);
        assert!(cgroups_path_names("/").is_empty());
        assert_eq!(
            cgroups_path_names("a-b.slice:cri:c1"),
            ["a-b.slice:cri:c1", "a.slice/a-b.slice/cri-c1.scope"]
        );
        assert_eq!(
            cgroups_path_names(":runc:c1")[1..],
            ["system.slice/runc-c1.scope"]
        );
        assert_eq!(
            cgroups_path_names("-.slice::c1")[1..],
            ["c1.scope", "-c1.scope"]
        );
        assert_eq!(
            cgroups_path_names("a.slice:x:b.slice")[1..],
            ["a.slice/b.slice"]
        );
        // Not systemd form: two or four parts, a bad slice.
        assert_eq!(cgroups_path_names("a:b"), ["a:b"]);
        assert_eq!(cgroups_path_names("a:b:c:d").len(), 1);
        assert_eq!(cgroups_path_names("bad:cri:c1").len(), 1);
    }

    #[test]
    fn the_path_the_runtime_gives() {
        for (spec, want) in [
            ("/kubepods/burstable/pod1/c1", Some("/kubepods/burstable/pod1/c1")),
            (
                "kubepods-burstable-pod1.slice:cri-containerd:c1",
                Some("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-c1.scope"),
            ),
            ("system.slice:docker:abc", Some("/system.slice/docker-abc.scope")),
            (":libpod:abc", Some("/system.slice/libpod-abc.scope")),
            ("-.slice:p:n", Some("/p-n.scope")),
            ("/", None),
            ("", None),
        ] {
            assert_eq!(expand_cgroups_path(spec).as_deref(), want, "{spec}");
        }
    }
}
