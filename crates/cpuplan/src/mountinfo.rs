//! Parsing `/proc/<pid>/mountinfo` (STUB: to be written).

/// One line of mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountInfo {
    /// Field 4: the path inside the filesystem that is mounted (for cgroups, the hierarchy's root).
    pub root: String,
    /// Field 5: where it is mounted, octal escapes decoded.
    pub mount_point: String,
    /// The filesystem type after the `-` separator (`cgroup`, `cgroup2`).
    pub fs_type: String,
    /// The mount source.
    pub source: String,
    /// The super options (for cgroup v1, the controllers).
    pub super_options: String,
}

/// Every mount in a mountinfo text; an error string names the bad line.
pub fn parse_mountinfo(text: &str) -> Result<Vec<MountInfo>, String> {
    let _ = text;
    todo!("H1")
}
