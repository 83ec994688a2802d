//! Running something as another user (`setpriv --reuid=65534`): everything that process reads
//! or runs must be readable by that user, and the checkout need not be (a clone in root's home,
//! mode 0700, is a checkout too). [`Shared`] is a private temp dir every user may enter and
//! read, holding copies of what the other user needs from the checkout (a binary, a fixture
//! tree); [`reachable_by_others`] checks a path before it is handed over.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A temp dir (`cpuplan-shared-*`, mode 0755, removed on drop) for another user's process.
pub struct Shared {
    /// The directory.
    pub dir: tempfile::TempDir,
}

impl Default for Shared {
    fn default() -> Self {
        Self::new()
    }
}

impl Shared {
    /// A new one, every ancestor of it searchable by others (the system's temp dir).
    pub fn new() -> Shared {
        let dir = tempfile::Builder::new()
            .prefix("cpuplan-shared-")
            .tempdir()
            .expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        reachable_by_others(dir.path());
        Shared { dir }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A copy of `src` (a file or a tree, links kept as links: `cp -a`) at `name` in the
    /// directory, readable by all (`chmod -R a+rX`, which leaves links alone).
    pub fn copy(&self, src: &Path, name: &str) -> PathBuf {
        let to = self.path().join(name);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        let run = |cmd: &mut Command| {
            let out = cmd.output().expect("cp/chmod");
            assert!(
                out.status.success(),
                "{cmd:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        run(Command::new("cp").arg("-a").arg(src).arg(&to));
        run(Command::new("chmod").args(["-R", "a+rX"]).arg(&to));
        to
    }

    /// A copy of the executable `src` in `bin/`, mode 0755.
    pub fn binary(&self, src: &Path) -> PathBuf {
        let name = src.file_name().expect("a binary's file name");
        let to = self.copy(src, &format!("bin/{}", name.to_string_lossy()));
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
        to
    }
}

/// Fails unless `path` lies outside the checkout and every directory above it lets others in
/// (`o+x`): what a process of another uid is given must not depend on how the checkout's
/// owner set its mode.
pub fn reachable_by_others(path: &Path) {
    let root = crate::statics::workspace_root()
        .canonicalize()
        .expect("workspace root");
    let full = path
        .canonicalize()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        !full.starts_with(&root),
        "{} lies in the checkout {}, which other users may not be able to read: copy it into an \
         as_user::Shared first",
        full.display(),
        root.display()
    );
    for dir in full.ancestors().skip(1) {
        let mode = std::fs::metadata(dir).unwrap().permissions().mode();
        assert!(
            mode & 0o001 != 0,
            "{} (mode {:o}) keeps other users out of {}",
            dir.display(),
            mode & 0o7777,
            full.display()
        );
    }
}
