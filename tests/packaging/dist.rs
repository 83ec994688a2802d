//! The release tarball: `scripts/dist.sh --debug` builds it; unpacked, it holds exactly the
//! static binaries, the shim's C libraries and header, `hooks/`, `docs/install.md` and a
//! `SHA256SUMS` that every file matches; the `.sha256` beside it matches the tarball.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::statics::{target_dir, workspace_root};
use cpuplan_hook::elf;
use sha2::{Digest, Sha256};

fn sha256(path: &Path) -> String {
    let digest = Sha256::digest(std::fs::read(path).unwrap());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Every file under `dir`, relative, with its mode.
fn files(dir: &Path) -> BTreeMap<String, u32> {
    fn walk(d: &Path, base: &Path, acc: &mut BTreeMap<String, u32>) {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            let p = e.path();
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                walk(&p, base, acc);
            } else {
                let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o7777;
                acc.insert(p.strip_prefix(base).unwrap().display().to_string(), mode);
            }
        }
    }
    let mut acc = BTreeMap::new();
    walk(dir, dir, &mut acc);
    acc
}

#[test]
fn the_tarball_holds_static_binaries_the_c_abi_hooks_and_matching_sums() {
    common::runc::require(
        "release tarball",
        &[("tar", "tar"), ("gzip", "gzip"), ("readelf", "binutils")],
    );
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("dist");
    let built = Command::new("bash")
        .arg(workspace_root().join("scripts/dist.sh"))
        .arg("--debug")
        .arg(&out)
        .current_dir(workspace_root())
        .env("CARGO_TARGET_DIR", target_dir())
        .output()
        .expect("run scripts/dist.sh");
    assert!(
        built.status.success(),
        "scripts/dist.sh failed: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let tarball = PathBuf::from(String::from_utf8_lossy(&built.stdout).trim());
    let name = format!("cpuplan-{}-x86_64-linux", env!("CARGO_PKG_VERSION"));
    assert_eq!(tarball, out.join(format!("{name}.tar.gz")));
    assert_eq!(
        std::fs::read_to_string(out.join(format!("{name}.tar.gz.sha256"))).unwrap(),
        format!("{}  {name}.tar.gz\n", sha256(&tarball)),
        "the tarball's own checksum"
    );

    let unpacked = tmp.path().join("unpacked");
    std::fs::create_dir(&unpacked).unwrap();
    let st = Command::new("tar")
        .arg("-C")
        .arg(&unpacked)
        .arg("-xzf")
        .arg(&tarball)
        .status()
        .unwrap();
    assert!(st.success(), "tar -xzf");
    let root = unpacked.join(&name);
    let got = files(&root);
    let mut want: BTreeMap<String, u32> = [
        ("bin/cpuplan-hook", 0o755),
        ("bin/cpuplan-nri", 0o755),
        ("bin/cpuplan", 0o755),
        ("bin/cpuplan-exec", 0o755),
        ("lib/libcpuplan_shim.so", 0o644),
        ("lib/libcpuplan_shim.a", 0o644),
        ("include/cpuplan.h", 0o644),
        ("docs/install.md", 0o644),
        ("SHA256SUMS", 0o644),
    ]
    .into_iter()
    .map(|(p, m)| (p.to_string(), m))
    .collect();
    let hooks = workspace_root().join("hooks");
    for (p, _) in files(&hooks) {
        want.insert(format!("hooks/{p}"), 0o644);
    }
    assert_eq!(got, want, "the tarball's files and modes");

    // SHA256SUMS names every other file once, with its sum.
    let sums = std::fs::read_to_string(root.join("SHA256SUMS")).unwrap();
    let listed: BTreeMap<&str, &str> = sums
        .lines()
        .map(|l| {
            let (sum, path) = l.split_once("  ").unwrap_or_else(|| panic!("line {l:?}"));
            (path, sum)
        })
        .collect();
    assert_eq!(listed.len(), sums.lines().count(), "no file twice");
    let others: Vec<&String> = want.keys().filter(|p| *p != "SHA256SUMS").collect();
    assert_eq!(
        listed.keys().copied().collect::<Vec<_>>(),
        others.iter().map(|s| s.as_str()).collect::<Vec<_>>()
    );
    for (path, sum) in &listed {
        assert_eq!(*sum, sha256(&root.join(path)), "{path}");
    }

    // The binaries are static; the libraries are the shim's C ABI.
    for bin in [
        "bin/cpuplan-hook",
        "bin/cpuplan-nri",
        "bin/cpuplan",
        "bin/cpuplan-exec",
    ] {
        assert_eq!(
            elf::interpreter(&root.join(bin)).unwrap(),
            None,
            "{bin} asks for a dynamic loader"
        );
    }
    let so = root.join("lib/libcpuplan_shim.so");
    let kinds: Vec<u32> = elf::program_headers(&so)
        .unwrap()
        .iter()
        .map(|h| h.kind)
        .collect();
    assert!(kinds.contains(&elf::PT_DYNAMIC), "{kinds:?}");
    let so_bytes = std::fs::read(&so).unwrap();
    let a_bytes = std::fs::read(root.join("lib/libcpuplan_shim.a")).unwrap();
    assert!(a_bytes.starts_with(b"!<arch>\n"), "an ar archive");
    for symbol in ["cpuplan_load", "cpuplan_pin_worker", "cpuplan_last_error"] {
        let needle = symbol.as_bytes();
        for (what, bytes) in [("so", &so_bytes), ("a", &a_bytes)] {
            assert!(
                bytes.windows(needle.len()).any(|w| w == needle),
                "lib.{what} lacks {symbol}"
            );
        }
    }
    for (inside, repo) in [
        ("include/cpuplan.h", "include/cpuplan.h"),
        ("docs/install.md", "docs/install.md"),
        ("hooks/oci/cpuplan.json", "hooks/oci/cpuplan.json"),
        ("hooks/hook.json", "hooks/hook.json"),
    ] {
        assert_eq!(
            std::fs::read(root.join(inside)).unwrap(),
            std::fs::read(workspace_root().join(repo)).unwrap(),
            "{inside}"
        );
    }
}
