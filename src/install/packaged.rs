//! The files the Debian package `cpuplan` installed, as dpkg lists them
//! (`<root>/var/lib/dpkg/info/cpuplan.list`, what `dpkg -L cpuplan` prints): `uninstall` keeps
//! them and says to remove the package with the package manager instead, and `install` does
//! not replace them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The Debian package's name.
pub const PACKAGE: &str = "cpuplan";

/// What to do instead, said beside a packaged file install or uninstall leaves alone.
pub const HINT: &str = "installed by the Debian package cpuplan: remove it with the package manager (apt remove cpuplan, or dpkg -r cpuplan), not cpuplan uninstall";

/// The paths dpkg lists for the package on the node whose root is `root`, each under `root`
/// (empty where the package is not installed there).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Packaged(BTreeSet<PathBuf>);

/// No file of the package (a node without it).
pub const NOT_PACKAGED: Packaged = Packaged(BTreeSet::new());

impl Packaged {
    /// The package's files under `root`, read from dpkg's database there.
    pub fn read(root: &Path) -> Packaged {
        let info = root.join("var/lib/dpkg/info");
        let mut files = BTreeSet::new();
        for list in [format!("{PACKAGE}.list"), format!("{PACKAGE}:amd64.list")] {
            if let Ok(text) = std::fs::read_to_string(info.join(list)) {
                files.extend(
                    text.lines()
                        .filter(|l| l.starts_with('/') && *l != "/.")
                        .map(|l| root.join(l.trim_start_matches('/'))),
                );
            }
        }
        Packaged(files)
    }

    /// Whether dpkg lists `path` as the package's.
    pub fn owns(&self, path: &Path) -> bool {
        self.0.contains(path)
    }

    /// Whether the package is installed (dpkg lists any file of it).
    pub fn any(&self) -> bool {
        !self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_read_under_the_root() {
        let t = tempfile::tempdir().unwrap();
        assert!(!Packaged::read(t.path()).any());
        let info = t.path().join("var/lib/dpkg/info");
        std::fs::create_dir_all(&info).unwrap();
        std::fs::write(
            info.join("cpuplan.list"),
            "/.\n/usr\n/usr/share/containers/oci/hooks.d/cpuplan.json\n",
        )
        .unwrap();
        let p = Packaged::read(t.path());
        assert!(p.any());
        assert!(p.owns(
            &t.path()
                .join("usr/share/containers/oci/hooks.d/cpuplan.json")
        ));
        assert!(!p.owns(Path::new("/usr/share/containers/oci/hooks.d/cpuplan.json")));
        assert!(!p.owns(&t.path().join("usr/share/containers/oci/hooks.d/other.json")));
    }
}
