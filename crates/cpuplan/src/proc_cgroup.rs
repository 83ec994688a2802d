//! Parsing `/proc/<pid>/cgroup` (STUB: to be written).

/// One line of `/proc/<pid>/cgroup`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupLine {
    /// Hierarchy id (0 for cgroup v2).
    pub id: u32,
    /// The controllers (v1; `name=systemd` kept as written); empty for v2.
    pub controllers: Vec<String>,
    /// The cgroup path (may hold colons).
    pub path: String,
}

/// Every line; an error string names the bad line.
pub fn parse_proc_cgroup(text: &str) -> Result<Vec<CgroupLine>, String> {
    let _ = text;
    todo!("H1")
}
