//! Parsing `/proc/<pid>/mountinfo`: one mount a line, octal escapes decoded.
//!
//! A line reads `ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS`
//! (proc(5)). There may be any number of optional fields before the `-`; the super options
//! run to the end of the line and are kept whole, spaces included.

/// One line of mountinfo.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

impl MountInfo {
    /// The comma-separated super options, one by one (for cgroup v1: `rw`, `cpu`, `cpuacct`, `name=systemd`).
    pub fn super_option_list(&self) -> impl Iterator<Item = &str> {
        self.super_options
            .split(',')
            .map(str::trim)
            .filter(|o| !o.is_empty())
    }
}

#[cfg(any(test, feature = "fuzzing"))]
/// Every mount in a mountinfo text; an error string names the bad line.
pub fn parse_mountinfo(text: &str) -> Result<Vec<MountInfo>, String> {
    let mut mounts = Vec::new();
    for (n, line) in text.lines().enumerate() {
        match parse_mountinfo_line(line) {
            Ok(Some(m)) => mounts.push(m),
            Ok(None) => {}
            Err(what) => return Err(format!("line {}: {what}: {line:?}", n + 1)),
        }
    }
    Ok(mounts)
}

/// One mountinfo line: `None` for a blank one, else the mount or what is wrong with the line.
pub fn parse_mountinfo_line(line: &str) -> Result<Option<MountInfo>, &'static str> {
    let line = line.trim_end_matches(['\n', '\r', '\0']);
    if line.trim().is_empty() {
        return Ok(None);
    }
    let fields = tokens(line);
    if fields.len() < 6 {
        return Err("fewer than 6 fields before the separator");
    }
    let text = |i: usize| &line[fields[i].0..fields[i].1];
    if text(0).parse::<u64>().is_err() {
        return Err("mount id is not a number");
    }
    if text(1).parse::<u64>().is_err() {
        return Err("parent id is not a number");
    }
    if !is_major_minor(text(2)) {
        return Err("device is not MAJOR:MINOR");
    }
    let mount_point = decode_octal(text(4));
    if !mount_point.starts_with('/') {
        return Err("mount point is not an absolute path");
    }
    // The optional fields end at the first lone `-` after the options (field 6).
    let sep = (6..fields.len())
        .find(|&i| text(i) == "-")
        .ok_or("no ` - ` separator after the optional fields")?;
    if fields.len() < sep + 3 {
        return Err("no filesystem type and source after the separator");
    }
    let super_options = match fields.get(sep + 3) {
        Some(&(start, _)) => line[start..].trim_end().to_string(),
        None => String::new(),
    };
    Ok(Some(MountInfo {
        root: decode_octal(text(3)),
        mount_point,
        fs_type: decode_octal(text(sep + 1)),
        source: decode_octal(text(sep + 2)),
        super_options,
    }))
}

/// Every mount in the mount table `text` (`/proc/<pid>/mountinfo`) of the filesystem on device
/// `major:minor` (field 3), in the table's order: where one filesystem is seen (its whole root,
/// or a directory of it bound elsewhere). Lines that do not parse are skipped.
pub fn mounts_of_device(text: &str, major: u64, minor: u64) -> Vec<MountInfo> {
    let want = format!("{major}:{minor}");
    text.lines()
        .filter(|line| {
            let t = tokens(line);
            t.len() > 2 && line[t[2].0..t[2].1] == want
        })
        .filter_map(|line| parse_mountinfo_line(line).ok().flatten())
        .collect()
}

/// `\NNN` octal escapes (the kernel writes space, tab, newline and backslash so) turned back into bytes.
pub fn decode_octal(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && is_octal_escape(&b[i + 1..i + 4]) {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Three octal digits whose value fits a byte.
fn is_octal_escape(d: &[u8]) -> bool {
    d.len() == 3 && d.iter().all(|c| (b'0'..=b'7').contains(c)) && d[0] <= b'3'
}

/// `259:1`.
fn is_major_minor(s: &str) -> bool {
    match s.split_once(':') {
        Some((a, b)) => a.parse::<u32>().is_ok() && b.parse::<u32>().is_ok(),
        None => false,
    }
}

/// Byte ranges of the whitespace-separated fields of `line`.
fn tokens(line: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in line.char_indices() {
        if c.is_ascii_whitespace() {
            if let Some(s) = start.take() {
                out.push((s, i));
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        out.push((s, line.len()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn parses_a_hybrid_host() {
        let m = parse_mountinfo(HYBRID).unwrap();
        assert_eq!(m.len(), 4);
        assert_eq!(
            m[1],
            MountInfo {
                root: "/".into(),
                mount_point: "/sys/fs/cgroup/cpu".into(),
                fs_type: "cgroup".into(),
                source: "cgroup".into(),
                super_options: "rw,cpu".into(),
            }
        );
        assert_eq!(
            m[2].super_option_list().collect::<Vec<_>>(),
            ["rw", "name=systemd"]
        );
        assert_eq!(m[3].fs_type, "cgroup2");
    }

    #[test]
    fn any_number_of_optional_fields() {
        let none = "25 1 0:22 / /a rw - cgroup2 cgroup2 rw,nsdelegate";
        let one = "25 1 0:22 / /a rw shared:9 - cgroup2 cgroup2 rw,nsdelegate";
        let three =
            "25 1 0:22 /x /a rw,nosuid shared:9 master:2 propagate_from:3 - cgroup2 cg rw,nsdelegate";
        for l in [none, one, three] {
            let m = parse_mountinfo_line(l).unwrap().unwrap();
            assert_eq!(m.fs_type, "cgroup2", "{l}");
            assert_eq!(m.super_options, "rw,nsdelegate", "{l}");
        }
        assert_eq!(parse_mountinfo_line(three).unwrap().unwrap().root, "/x");
        assert_eq!(parse_mountinfo_line(three).unwrap().unwrap().source, "cg");
    }

    #[test]
    fn decodes_octal_escapes() {
        let l = r"36 25 0:30 /my\040root /sys/fs/cgroup/my\040cpu\011x rw - cgroup a\134b rw,cpu";
        let m = parse_mountinfo_line(l).unwrap().unwrap();
        assert_eq!(m.root, "/my root");
        assert_eq!(m.mount_point, "/sys/fs/cgroup/my cpu\tx");
        assert_eq!(m.source, r"a\b");
        assert_eq!(decode_octal(r"\012"), "\n");
        // Not an escape: kept as written.
        assert_eq!(decode_octal(r"a\9b\04"), r"a\9b\04");
        assert_eq!(decode_octal(r"\"), r"\");
        assert_eq!(decode_octal(r"\400"), r"\400");
    }

    #[test]
    fn super_options_keep_their_spaces() {
        let l = "50 25 0:40 / /mnt/f rw - fuse.sshfs host:/x rw,user_id=0,opt=a b  c";
        let m = parse_mountinfo_line(l).unwrap().unwrap();
        assert_eq!(m.super_options, "rw,user_id=0,opt=a b  c");
        assert_eq!(m.source, "host:/x");
        let bare = parse_mountinfo_line("50 25 0:40 / /m rw - tmpfs tmpfs")
            .unwrap()
            .unwrap();
        assert_eq!(bare.super_options, "");
    }

    #[test]
    fn a_dash_in_the_mount_point_is_not_the_separator() {
        let l = "50 25 0:40 / /- rw shared:1 - ext4 /dev/sda1 rw";
        let m = parse_mountinfo_line(l).unwrap().unwrap();
        assert_eq!(m.mount_point, "/-");
        assert_eq!(m.fs_type, "ext4");
    }

    #[test]
    fn blank_lines_are_skipped() {
        assert_eq!(parse_mountinfo("\n\n").unwrap(), vec![]);
        assert_eq!(parse_mountinfo(&format!("\n{HYBRID}\n")).unwrap().len(), 4);
    }

    #[test]
    fn bad_lines_are_named_and_quoted() {
        let cases = [
            ("garbage", "fewer than 6 fields"),
            ("x 1 0:1 / /a rw - t s o", "mount id"),
            ("1 y 0:1 / /a rw - t s o", "parent id"),
            ("1 1 01 / /a rw - t s o", "MAJOR:MINOR"),
            ("1 1 0:1 / a rw - t s o", "absolute"),
            ("1 1 0:1 / /a rw shared:1 t s o", "separator"),
            ("1 1 0:1 / /a rw -", "filesystem type"),
            ("1 1 0:1 / /a rw - t", "filesystem type"),
        ];
        for (line, what) in cases {
            let text = format!("{}{line}\n", HYBRID);
            let e = parse_mountinfo(&text).unwrap_err();
            assert!(e.contains("line 5"), "{e}");
            assert!(e.contains(what), "{e}");
            assert!(e.contains(&format!("{line:?}")), "{e}");
        }
    }

    #[test]
    fn the_mounts_of_one_device_are_found_by_its_number() {
        let table = "\
22 1 8:1 / / rw - ext4 /dev/sda1 rw
90 22 0:77 / /b/rootfs/dev rw,nosuid - tmpfs tmpfs rw,mode=755
91 22 8:1 /srv/host\\040dir /b/rootfs/dev2 rw - ext4 /dev/sda1 rw
junk
";
        let dev = mounts_of_device(table, 0, 77);
        assert_eq!(dev.len(), 1);
        assert_eq!(
            (dev[0].fs_type.as_str(), dev[0].root.as_str()),
            ("tmpfs", "/")
        );
        assert_eq!(dev[0].mount_point, "/b/rootfs/dev");
        let disk = mounts_of_device(table, 8, 1);
        assert_eq!(disk.len(), 2);
        assert_eq!(disk[1].root, "/srv/host dir");
        assert!(mounts_of_device(table, 0, 7).is_empty(), "0:7 is not 0:77");
    }
}
