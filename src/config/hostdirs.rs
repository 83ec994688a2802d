//! The host directories whose files the hook believes: `claims_dir` (one holder per GPU) and the
//! host-plan records directory beside it (`hostplans/`: which container planned into which
//! rootfs directory, and whose plan files a later start removes). Another local user who can
//! create a file there can plant a claim naming a process of theirs (every container is then
//! told its GPU is held) or a record that makes the hook remove another container's plan files.
//!
//! So each of the two, and every directory above them, must be the operator's: owned by root
//! (or by the user the process runs as, which is root for the hook a runtime runs) and writable
//! by its owner alone. A sticky, world-writable directory such as `/tmp`, `/var/tmp` or
//! `/dev/shm` fails: anyone may make a directory in it that the hook would then walk into. The
//! check looks at each directory with `lstat`, from `/` down, and follows no symbolic link (one
//! on the way is refused: name the directory it points to). A directory that does not exist yet
//! ends the walk: the hook makes it (0755 for claims, 0700 for records) below a parent checked
//! here, which nobody but its owner can add to.
//!
//! This is the one I/O check of a config's values, made where the file is loaded
//! ([`super::HookConfig::load`]) and where the NRI plugin takes the runtime's configuration; the
//! parse itself stays pure.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The host-plan records' directory's name, beside the claims directory.
pub(crate) const RECORDS_DIR: &str = "hostplans";

/// The host-plan records' directory: [`RECORDS_DIR`] beside the claims directory `claims_dir`.
pub(crate) fn records_dir(claims_dir: &Path) -> PathBuf {
    claims_dir.parent().unwrap_or(claims_dir).join(RECORDS_DIR)
}

/// Why `claims_dir` cannot be used, in words that name the directory at fault with its owner and
/// mode; `None` where it and the records' directory beside it are the operator's alone.
pub(super) fn untrusted(claims_dir: &Path) -> Option<String> {
    let euid = nix::unistd::geteuid().as_raw();
    let fault = walk(claims_dir, euid).or_else(|| {
        let records = records_dir(claims_dir);
        match std::fs::symlink_metadata(&records) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            got => judge(&records, got, euid),
        }
    })?;
    Some(format!(
        "{} is refused: {fault}: the claims directory, {RECORDS_DIR}/ beside it and every \
         directory above them must be root's and writable by root alone",
        cpuplan::quoted(&claims_dir.display().to_string())
    ))
}

/// The first directory from `/` down to `dir` (absolute) that is not the operator's, in words;
/// `None` where each is, or where the walk reaches one that does not exist yet.
fn walk(dir: &Path, euid: u32) -> Option<String> {
    if !dir.is_absolute() {
        return Some(format!("{} is not an absolute path", dir.display()));
    }
    let mut on_the_way: Vec<&Path> = dir.ancestors().collect();
    on_the_way.reverse();
    for at in on_the_way {
        match std::fs::symlink_metadata(at) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            got => {
                if let Some(fault) = judge(at, got, euid) {
                    return Some(fault);
                }
            }
        }
    }
    None
}

/// What is wrong with the directory `at` as `lstat` found it (`got`), if anything.
fn judge(at: &Path, got: std::io::Result<std::fs::Metadata>, euid: u32) -> Option<String> {
    let shown = at.display();
    let m = match got {
        Ok(m) => m,
        Err(e) => return Some(format!("cannot check {shown}: {e}")),
    };
    let (uid, mode) = (m.uid(), m.mode() & 0o7777);
    let what = format!("{shown} (owner uid {uid}, mode {mode:04o})");
    if m.file_type().is_symlink() {
        return Some(format!(
            "{shown} is a symbolic link: name the directory it points to"
        ));
    }
    if !m.is_dir() {
        return Some(format!("{what} is not a directory"));
    }
    if uid != 0 && uid != euid {
        return Some(format!("{what} is not root's"));
    }
    match (mode & 0o020 != 0, mode & 0o002 != 0) {
        (true, true) => Some(format!("{what} is writable by its group and by others")),
        (true, false) => Some(format!("{what} is writable by its group")),
        (false, true) => Some(format!("{what} is writable by others")),
        (false, false) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path, m: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    }

    #[test]
    fn a_world_writable_or_group_writable_ancestor_is_named_with_its_owner_and_mode() {
        // /tmp itself (1777): sticky does not make it the operator's.
        let e = untrusted(Path::new("/tmp/cpuplan/claims")).unwrap();
        assert!(
            e.contains("/tmp (owner uid 0, mode 1777) is writable by its group and by others"),
            "{e}"
        );
        assert!(e.starts_with("\"/tmp/cpuplan/claims\" is refused: "), "{e}");
        // Below a directory of the operator's own: each level judged, the first at fault named.
        let t = tempfile::tempdir_in("/run").unwrap();
        mode(t.path(), 0o755);
        let claims = t.path().join("a/claims");
        assert_eq!(untrusted(&claims), None, "nothing below it exists yet");
        std::fs::create_dir_all(&claims).unwrap();
        mode(&t.path().join("a"), 0o755);
        mode(&claims, 0o755);
        assert_eq!(untrusted(&claims), None);
        mode(&t.path().join("a"), 0o775);
        let e = untrusted(&claims).unwrap();
        let a = t.path().join("a");
        assert!(
            e.contains(&format!(
                "{} (owner uid 0, mode 0775) is writable by its group",
                a.display()
            )),
            "{e}"
        );
        mode(&t.path().join("a"), 0o755);
        mode(&claims, 0o777);
        assert!(
            untrusted(&claims)
                .unwrap()
                .contains("mode 0777) is writable by its group and by others"),
            "the claims directory itself"
        );
        mode(&claims, 0o755);
        // The records' directory beside it: another user's is refused.
        let records = t.path().join("a").join(RECORDS_DIR);
        std::fs::create_dir(&records).unwrap();
        mode(&records, 0o700);
        assert_eq!(untrusted(&claims), None);
        std::os::unix::fs::chown(&records, Some(65534), None).unwrap();
        let e = untrusted(&claims).unwrap();
        assert!(
            e.contains(&format!(
                "{} (owner uid 65534, mode 0700) is not root's",
                records.display()
            )),
            "{e}"
        );
    }

    #[test]
    fn a_symbolic_link_on_the_way_is_refused_not_followed() {
        let t = tempfile::tempdir_in("/run").unwrap();
        mode(t.path(), 0o755);
        let real = t.path().join("real");
        std::fs::create_dir(&real).unwrap();
        mode(&real, 0o755);
        std::os::unix::fs::symlink(&real, t.path().join("link")).unwrap();
        let e = untrusted(&t.path().join("link/claims")).unwrap();
        assert!(
            e.contains(&format!(
                "{} is a symbolic link: name the directory it points to",
                t.path().join("link").display()
            )),
            "{e}"
        );
        // A link to /tmp is refused for being a link, whatever it points to; a file on the way
        // is not a directory.
        std::fs::write(t.path().join("file"), "").unwrap();
        let e = untrusted(&t.path().join("file/claims")).unwrap();
        assert!(e.contains("is not a directory"), "{e}");
    }
}
