//! Removing what a runtime left in the cgroup hierarchies once its containers are gone.

use std::path::Path;

/// Removes, bottom-up, every directory below `dir` (to `depth` levels) whose name is in
/// `names`, each with its whole subtree. A cgroup that still holds a process stays.
pub fn remove_named<S: AsRef<str>>(dir: &Path, names: &[S], depth: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if !e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            continue;
        }
        let p = e.path();
        if names.iter().any(|n| e.file_name() == n.as_ref()) {
            remove_tree(&p);
        } else if depth > 0 {
            remove_named(&p, names, depth - 1);
        }
    }
}

/// Removes every cgroup directory named `name` within four levels of `/sys/fs/cgroup`.
pub fn remove_cgroups(name: &str) {
    remove_named(Path::new("/sys/fs/cgroup"), &[name], 3);
}

fn remove_tree(p: &Path) {
    if let Ok(entries) = std::fs::read_dir(p) {
        for e in entries.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                remove_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(p);
}
