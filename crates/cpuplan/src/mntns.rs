//! The caller's mount namespace, as `/proc/self/ns/mnt` names it (`mnt:[4026531840]`).
//!
//! A process's mount namespace changes only by `setns` or `unshare`, which nothing here calls,
//! so the host's (root `/`) is read once per process: a container start asks for it twice (the
//! inventory's stamp and the rootfs's safe open), and on this kind of VM a procfs `readlink`
//! costs as much as a dozen plain syscalls. Under any other root (a fixture tree) the link is
//! read at every call.

use std::ffi::OsString;
use std::path::Path;
use std::sync::OnceLock;

use crate::fsutil::Process;

/// The target of `<root>/proc/self/ns/mnt` (`None` where it cannot be read).
pub fn own_mnt_ns(root: &Path) -> Option<OsString> {
    let read = || {
        std::fs::read_link(Process::Current.proc_dir(root).join("ns/mnt"))
            .ok()
            .map(|p| p.into_os_string())
    };
    if root != Path::new("/") {
        return read();
    }
    static NS: OnceLock<Option<OsString>> = OnceLock::new();
    NS.get_or_init(read).clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_link_is_read_once_and_a_fixture_link_every_time() {
        let host = own_mnt_ns(Path::new("/")).expect("/proc/self/ns/mnt");
        assert!(host.to_string_lossy().starts_with("mnt:["), "{host:?}");
        assert_eq!(own_mnt_ns(Path::new("/")), Some(host));
        let t = tempfile::tempdir().unwrap();
        let ns = t.path().join("proc/self/ns");
        std::fs::create_dir_all(&ns).unwrap();
        std::os::unix::fs::symlink("mnt:[1]", ns.join("mnt")).unwrap();
        assert_eq!(own_mnt_ns(t.path()), Some("mnt:[1]".into()));
        std::fs::remove_file(ns.join("mnt")).unwrap();
        std::os::unix::fs::symlink("mnt:[2]", ns.join("mnt")).unwrap();
        assert_eq!(own_mnt_ns(t.path()), Some("mnt:[2]".into()));
        std::fs::remove_file(ns.join("mnt")).unwrap();
        assert_eq!(own_mnt_ns(t.path()), None);
    }
}
