//! Parsing `/proc/<pid>/cgroup`: `ID:CONTROLLERS:PATH` a line, `0::PATH` for cgroup v2.

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

impl CgroupLine {
    /// Whether this is the unified (v2) hierarchy: id 0 and no controllers.
    pub fn is_v2(&self) -> bool {
        self.id == 0 && self.controllers.is_empty()
    }
}

#[cfg(any(test, feature = "fuzzing"))]
/// Every line; an error string names the bad line.
pub fn parse_proc_cgroup(text: &str) -> Result<Vec<CgroupLine>, String> {
    let mut lines = Vec::new();
    for (n, line) in text.lines().enumerate() {
        match parse_proc_cgroup_line(line) {
            Ok(Some(l)) => lines.push(l),
            Ok(None) => {}
            Err(what) => return Err(format!("line {}: {what}: {line:?}", n + 1)),
        }
    }
    Ok(lines)
}

/// One line: `None` for a blank one, else the hierarchy or what is wrong with the line.
pub fn parse_proc_cgroup_line(line: &str) -> Result<Option<CgroupLine>, &'static str> {
    let line = line.trim_end_matches(['\n', '\r', '\0']);
    if line.trim().is_empty() {
        return Ok(None);
    }
    let mut parts = line.splitn(3, ':');
    let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err("expected ID:CONTROLLERS:PATH");
    };
    let id = id
        .parse::<u32>()
        .map_err(|_| "hierarchy id is not a number")?;
    if !path.starts_with('/') {
        return Err("cgroup path does not start with /");
    }
    let controllers: Vec<String> = controllers
        .split(',')
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .collect();
    if id != 0 && controllers.is_empty() {
        return Err("a v1 hierarchy (id not 0) names no controller");
    }
    Ok(Some(CgroupLine {
        id,
        controllers,
        path: path.to_string(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_hybrid_host() {
        let text =
            "9:name=systemd:/\n4:memory:/process_api/4f94\n1:cpu,cpuacct:/kubepods/pod1/c1\n0::/\n";
        let l = parse_proc_cgroup(text).unwrap();
        assert_eq!(l.len(), 4);
        assert_eq!(
            l[0],
            CgroupLine {
                id: 9,
                controllers: vec!["name=systemd".into()],
                path: "/".into()
            }
        );
        assert_eq!(l[2].controllers, ["cpu", "cpuacct"]);
        assert_eq!(l[2].path, "/kubepods/pod1/c1");
        assert!(l[3].is_v2() && !l[2].is_v2());
        assert_eq!(l[3].path, "/");
    }

    #[test]
    fn a_path_may_hold_colons() {
        let l = parse_proc_cgroup_line("0::/system.slice/a:b:c.scope")
            .unwrap()
            .unwrap();
        assert_eq!(l.path, "/system.slice/a:b:c.scope");
        assert!(l.is_v2());
        let l = parse_proc_cgroup_line("3:cpuset:/x:y").unwrap().unwrap();
        assert_eq!(l.path, "/x:y");
        assert_eq!(l.controllers, ["cpuset"]);
    }

    #[test]
    fn blank_lines_are_skipped() {
        assert_eq!(parse_proc_cgroup("\n0::/a\n\n").unwrap().len(), 1);
        assert!(parse_proc_cgroup("").unwrap().is_empty());
    }

    #[test]
    fn bad_lines_are_named_and_quoted() {
        let cases = [
            ("junk", "ID:CONTROLLERS:PATH"),
            ("0:/", "ID:CONTROLLERS:PATH"),
            ("x:cpu:/", "not a number"),
            ("-1:cpu:/", "not a number"),
            ("0::relative", "start with /"),
            ("0::", "start with /"),
            ("4::/a", "names no controller"),
        ];
        for (line, what) in cases {
            let e = parse_proc_cgroup(&format!("0::/\n{line}\n")).unwrap_err();
            assert!(e.contains("line 2"), "{e}");
            assert!(e.contains(what), "{e}");
            assert!(e.contains(&format!("{line:?}")), "{e}");
        }
    }
}
