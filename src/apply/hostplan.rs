//! The record that a container's plan files sit in its rootfs's own filesystem, for poststop.
//!
//! Where the plan directory is on a tmpfs (runc's and podman's `/run`) or another mount, the
//! files go with the container's mounts. Where it is the rootfs's own filesystem (a host
//! directory given as rootfs, or an image without a tmpfs on `/run`), they outlive the
//! container, and poststop reads the bundle again to remove them
//! ([`crate::apply::below::remove_plan_files_of`]). createRuntime leaves this record only in the
//! second case, so poststop pays for the bundle's `config.json` and the rootfs walk only where
//! there is something to remove: one failed `unlink` otherwise.
//!
//! The record is an empty file `.hostplan.<hash>` in `hostplans/` beside the claims directory
//! (`/run/cpuplan/hostplans` by default: the operator's, on the host; not in the claims
//! directory, which holds the lock and at most one file per GPU), named by an FNV-1a hash of the
//! container's scope (its bundle) and id, never by the id itself (the tenant's): a hash shared
//! by two containers costs the other one a look at its bundle, nothing more, as the removal
//! checks that `plan.json` names the container.

use std::io::ErrorKind;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// The records' directory: `hostplans` beside the claims directory `claims_dir`.
pub fn records_dir(claims_dir: &Path) -> PathBuf {
    claims_dir.parent().unwrap_or(claims_dir).join("hostplans")
}

/// The record's path for container `id` of `scope`, claims directory `claims_dir`.
fn record(claims_dir: &Path, scope: &str, id: &str) -> PathBuf {
    let mut key = Vec::with_capacity(scope.len() + id.len() + 1);
    key.extend_from_slice(scope.as_bytes());
    key.push(0);
    key.extend_from_slice(id.as_bytes());
    records_dir(claims_dir).join(format!(
        ".hostplan.{:016x}",
        cpuplan::inventory::stamp::fnv1a64(&key)
    ))
}

/// Records that container `id` of `scope` has plan files in its rootfs's own filesystem.
pub fn mark(claims_dir: &Path, scope: &str, id: &str) -> std::io::Result<()> {
    let path = record(claims_dir, scope, id);
    let create = || {
        use nix::libc::{O_CREAT, O_NOFOLLOW, O_NONBLOCK, O_WRONLY};
        let f = cpuplan::open(&path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK, 0o600)?;
        cpuplan::require_own_file(&f)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
    };
    match create() {
        Err(e) if e.kind() == ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(records_dir(claims_dir))?;
            create()
        }
        other => other,
    }
}

/// Takes container `id`'s record away: whether it had one (an error other than its absence
/// counts as having one, so the files are looked for).
pub fn take(claims_dir: &Path, scope: &str, id: &str) -> bool {
    match std::fs::remove_file(record(claims_dir, scope, id)) {
        Ok(()) => true,
        Err(e) => e.kind() != ErrorKind::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_taken_once_and_names_neither_the_id_nor_another_container() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("claims");
        assert!(!take(&dir, "/b", "c1"), "none yet, and no directory");
        mark(&dir, "/b", "c1").unwrap();
        assert!(
            !dir.exists(),
            "nothing in (or made as) the claims directory"
        );
        let names: Vec<String> = std::fs::read_dir(t.path().join("hostplans"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names.len(), 1);
        assert!(
            names[0].starts_with(".hostplan.") && !names[0].contains("c1"),
            "{names:?}"
        );
        assert!(!take(&dir, "/b", "c2"), "another id");
        assert!(!take(&dir, "/other", "c1"), "another scope");
        assert!(take(&dir, "/b", "c1"));
        assert!(!take(&dir, "/b", "c1"), "taken once");
        // A link planted in its place is never followed.
        let target = t.path().join("elsewhere");
        std::os::unix::fs::symlink(&target, record(&dir, "/b", "c1")).unwrap();
        assert!(mark(&dir, "/b", "c1").is_err());
        assert!(!target.exists());
        // Nor a hard link or another user's file.
        std::fs::remove_file(record(&dir, "/b", "c1")).unwrap();
        std::fs::write(&target, "keep").unwrap();
        std::fs::hard_link(&target, record(&dir, "/b", "c1")).unwrap();
        let e = mark(&dir, "/b", "c1").unwrap_err().to_string();
        assert!(e.contains("a hard link"), "{e}");
        std::fs::remove_file(record(&dir, "/b", "c1")).unwrap();
        std::fs::write(record(&dir, "/b", "c1"), "").unwrap();
        std::os::unix::fs::chown(record(&dir, "/b", "c1"), Some(4242), None).unwrap();
        let e = mark(&dir, "/b", "c1").unwrap_err().to_string();
        assert!(e.contains("owned by uid 4242"), "{e}");
    }
}
