//! The plugin's host directory of plans: one directory per container holding its `plan.env` and
//! `plan.json` (bind-mounted read-only into it), and beside it a record of the GPUs it claimed.
//!
//! `<nri_dir>/<container id>/plan.{env,json}` and `<nri_dir>/<container id>.claims.json`. The
//! files are written whole (temporary names, then renames); a container id that is not a safe
//! file name (`[A-Za-z0-9_.-]`, not starting with a dot) is refused.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::edit::SpecEdit;
use crate::hook::rootfs::{open_rootfs, write_plan_files_in, RootfsError};

/// What the plugin remembers of a container it planned: the GPUs it claimed for it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The GPUs claimed for the container.
    pub claims: Vec<String>,
}

/// The plan directories under one host directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanDirs {
    root: PathBuf,
}

/// Whether `id` can name a file: `[A-Za-z0-9_.-]+`, not starting with a dot, at most 128 bytes.
pub fn safe_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}

impl PlanDirs {
    /// The plan directories under `root` (created as needed).
    pub fn new(root: &Path) -> PlanDirs {
        PlanDirs {
            root: root.to_path_buf(),
        }
    }

    /// Container `id`'s plan directory on the host.
    pub fn dir(&self, id: &str) -> PathBuf {
        self.root.join(id)
    }

    fn record_path(&self, id: &str) -> PathBuf {
        self.root.join(format!("{id}.claims.json"))
    }

    /// Writes `edit`'s files into container `id`'s directory, and its claims record.
    pub fn write(
        &self,
        id: &str,
        edit: &SpecEdit,
        record: &Record,
    ) -> Result<PathBuf, RootfsError> {
        let dir = self.dir(id);
        let root = open_rootfs(Path::new("/"), None, Path::new("/"))?;
        let mut files: Vec<(&str, &[u8])> = edit
            .files
            .iter()
            .map(|f| (f.name, f.bytes.as_slice()))
            .collect();
        write_plan_files_in(&root, &dir, &files)?;
        let record_name = format!("{id}.claims.json");
        let record_bytes = serde_json::to_vec(record).unwrap_or_default();
        files.clear();
        files.push((&record_name, &record_bytes));
        write_plan_files_in(&root, &self.root, &files)?;
        Ok(dir)
    }

    /// The claims record of container `id`, if the plugin planned it.
    pub fn record(&self, id: &str) -> Option<Record> {
        let bytes = cpuplan::read_file(&self.record_path(id), 1 << 20).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Removes container `id`'s directory and record; whether there was anything.
    pub fn remove(&self, id: &str) -> bool {
        let dir = std::fs::remove_dir_all(self.dir(id)).is_ok();
        let record = std::fs::remove_file(self.record_path(id)).is_ok();
        dir || record
    }

    /// The ids of the containers that have a directory or a record here.
    pub fn ids(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return Vec::new();
        };
        let mut ids: Vec<String> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let id = name
                    .strip_suffix(".claims.json")
                    .unwrap_or(&name)
                    .to_string();
                safe_id(&id).then_some(id)
            })
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_file_names_or_refused() {
        for ok in ["c1", "0123abcdef", "a_b-c.d"] {
            assert!(safe_id(ok), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "a/b",
            "a b",
            "a\nb",
            &"x".repeat(129),
        ] {
            assert!(!safe_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn write_list_and_remove() {
        let t = tempfile::tempdir().unwrap();
        let dirs = PlanDirs::new(&t.path().join("nri"));
        let edit = crate::edit::tests_support::edit();
        let record = Record {
            claims: vec!["0000:18:00.0".into()],
        };
        let dir = dirs.write("c1", &edit, &record).unwrap();
        assert!(dir.join("plan.env").is_file() && dir.join("plan.json").is_file());
        assert_eq!(dirs.record("c1"), Some(record));
        assert_eq!(dirs.ids(), ["c1"]);
        assert!(dirs.remove("c1"));
        assert!(!dirs.remove("c1"));
        assert!(dirs.ids().is_empty());
    }
}
