//! The plugin's host directory of plans: one directory per container holding its `plan.env` and
//! `plan.json` (bind-mounted read-only into it), and beside it a record of the GPUs it claimed.
//!
//! `<nri_dir>/<container id>/plan.{env,json}` and `<nri_dir>/<container id>.claims.json`. The
//! files are written whole (temporary names, then renames), the record first: a directory here
//! is the plugin's only while its record is beside it, and nothing else is ever removed (an
//! operator's `<nri_dir>/notes/` stays). Every path is built from a [`ContainerId`].

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::ids::ContainerId;
use crate::apply::below::{
    open_dir_below, open_dir_in, open_rootfs, remove_stale_temps_of, write_files_at, RootfsError,
};
use crate::edit::{SpecEdit, PLAN_ENV, PLAN_JSON};

/// How a container's claims record is named after its id: `<id>.claims.json`.
const RECORD_SUFFIX: &str = ".claims.json";

/// What the plugin remembers of a container it planned: the GPUs it claimed for it, and what
/// an UpdateContainer plans again from (kubelet's CPU limits, as the runtime gave them before
/// cpuplan narrowed them, and the files' generation). A record written before these members
/// were added reads as no limits known and generation 1.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The GPUs claimed for the container.
    pub claims: Vec<String>,
    /// Why the claim was not taken because another container holds a GPU (the plan then pins
    /// nothing, and an update keeps it so: claims never change on an update).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
    /// kubelet's cpuset (`linux.resources.cpu.cpus` as the runtime gave it), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<String>,
    /// kubelet's CPU quota (µs per period), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<i64>,
    /// kubelet's CPU period (µs), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<u64>,
    /// The generation of the plan files written (0 in a record older than generations: 1).
    #[serde(default)]
    pub generation: u64,
}

/// The plan directories under one host directory.
#[derive(Debug)]
pub struct PlanDirs {
    root: PathBuf,
    /// `root`, opened by the last write (walked from `/` again once it is no longer linked).
    opened: Mutex<Option<OwnedFd>>,
}

/// Whether the directory `fd` is still linked (not removed since it was opened).
fn still_linked(fd: &OwnedFd) -> bool {
    nix::sys::stat::fstat(fd.as_raw_fd()).is_ok_and(|st| st.st_nlink > 0)
}

impl PlanDirs {
    /// The plan directories under `root` (created as needed).
    pub fn new(root: &Path) -> PlanDirs {
        PlanDirs {
            root: root.to_path_buf(),
            opened: Mutex::new(None),
        }
    }

    /// Container `id`'s plan directory on the host.
    pub fn dir(&self, id: &ContainerId) -> PathBuf {
        self.root.join(id.as_str())
    }

    fn record_path(&self, id: &ContainerId) -> PathBuf {
        self.root.join(format!("{id}{RECORD_SUFFIX}"))
    }

    /// Writes container `id`'s claims record and then `edit`'s files into its directory: the
    /// plans' directory is walked from `/` (no component a symlink) and kept open while it
    /// stays linked, and each file is written whole.
    pub fn write(
        &self,
        id: &ContainerId,
        edit: &SpecEdit,
        record: &Record,
    ) -> Result<PathBuf, RootfsError> {
        let dir = self.dir(id);
        let files: Vec<(&str, &[u8])> = edit
            .files
            .iter()
            .map(|f| (f.name, f.bytes.as_slice()))
            .collect();
        let record_name = format!("{id}{RECORD_SUFFIX}");
        let record_bytes = serde_json::to_vec(record).unwrap_or_default();
        self.with_plans(|plans| {
            write_files_at(plans, &self.root, &[(&record_name, &record_bytes)])?;
            write_files_at(
                &open_dir_below(plans, &self.root, Path::new(id.as_str()))?,
                &dir,
                &files,
            )
        })?;
        Ok(dir)
    }

    /// Removes the temporary files of writes cut short (a plugin killed mid-write): records'
    /// here, plan files' in the directories of the containers `ids`.
    pub fn sweep(&self, ids: &[ContainerId]) {
        let _ = self.with_plans(|plans| {
            remove_stale_temps_of(plans, &self.root, |n| {
                n.strip_suffix(RECORD_SUFFIX)
                    .is_some_and(|id| ContainerId::parse(id).is_ok())
            });
            for id in ids.iter().filter(|id| self.dir(id).is_dir()) {
                if let Ok(dir) = open_dir_below(plans, &self.root, Path::new(id.as_str())) {
                    remove_stale_temps_of(&dir, &self.dir(id), |n| {
                        [PLAN_ENV, PLAN_JSON].contains(&n)
                    });
                }
            }
            Ok(())
        });
    }

    /// Runs `f` on the plans' directory, walked from `/` (no component a symlink, made as
    /// needed) and kept open while it stays linked.
    fn with_plans<T>(
        &self,
        f: impl FnOnce(&OwnedFd) -> Result<T, RootfsError>,
    ) -> Result<T, RootfsError> {
        let mut opened = self.opened.lock().unwrap_or_else(|e| e.into_inner());
        let plans = match opened.take().filter(still_linked) {
            Some(fd) => fd,
            None => open_dir_in(
                &open_rootfs(Path::new("/"), None, Path::new("/"))?,
                &self.root,
            )?,
        };
        f(opened.insert(plans))
    }

    /// The claims record of container `id`, if the plugin planned it.
    pub fn record(&self, id: &ContainerId) -> Option<Record> {
        let bytes = cpuplan::read_file(&self.record_path(id), 1 << 20).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Removes container `id`'s directory and then its record, if the record is the plugin's
    /// (a directory without one is not the plugin's and stays); whether anything went.
    pub fn remove(&self, id: &ContainerId) -> bool {
        if self.record(id).is_none() {
            return false;
        }
        let dir = self.dir(id);
        if dir.is_dir() && !dir.is_symlink() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        std::fs::remove_file(self.record_path(id)).is_ok()
    }

    /// The ids of the containers whose record is here.
    pub fn ids(&self) -> Vec<ContainerId> {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return Vec::new();
        };
        let mut ids: Vec<ContainerId> = entries
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                ContainerId::parse(name.strip_suffix(RECORD_SUFFIX)?).ok()
            })
            .collect();
        ids.sort();
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> ContainerId {
        ContainerId::parse(s).unwrap()
    }

    #[test]
    fn write_list_and_remove() {
        let t = tempfile::tempdir().unwrap();
        let dirs = PlanDirs::new(&t.path().join("nri"));
        let edit = crate::edit::tests_support::edit();
        let record = Record {
            claims: vec!["0000:18:00.0".into()],
            cpus: Some("0-3".into()),
            generation: 1,
            ..Record::default()
        };
        let dir = dirs.write(&id("c1"), &edit, &record).unwrap();
        assert!(dir.join("plan.env").is_file() && dir.join("plan.json").is_file());
        assert_eq!(dirs.record(&id("c1")), Some(record));
        assert_eq!(dirs.ids(), [id("c1")]);
        assert!(dirs.remove(&id("c1")));
        assert!(!dirs.remove(&id("c1")));
        assert!(dirs.ids().is_empty());
    }

    #[test]
    fn a_plan_directory_removed_under_the_plugin_is_made_again() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("nri");
        let dirs = PlanDirs::new(&root);
        let edit = crate::edit::tests_support::edit();
        dirs.write(&id("c1"), &edit, &Record::default()).unwrap();
        std::fs::remove_dir_all(&root).unwrap();
        let dir = dirs.write(&id("c2"), &edit, &Record::default()).unwrap();
        assert!(
            dir.join("plan.env").is_file(),
            "written where it is looked for"
        );
        assert_eq!(dirs.ids(), [id("c2")]);
    }

    #[test]
    fn a_sweep_removes_only_temporaries_of_dead_writers() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("nri");
        let dirs = PlanDirs::new(&root);
        let edit = crate::edit::tests_support::edit();
        dirs.write(&id("c1"), &edit, &Record::default()).unwrap();
        let dead = u32::MAX - 1;
        let me = std::process::id();
        let stale = [
            root.join(format!(".c1.claims.json.{dead}.5.tmp")),
            root.join(format!("c1/.plan.env.{dead}.7.tmp")),
        ];
        let kept = [
            root.join(format!(".c1.claims.json.{me}.5.tmp")),
            root.join(format!(".notes.{dead}.5.tmp")),
            root.join(format!("c1/.other.{dead}.7.tmp")),
            root.join("c1/plan.env"),
            root.join("c1.claims.json"),
        ];
        for f in stale.iter().chain(&kept[..3]) {
            std::fs::write(f, "x").unwrap();
        }
        std::fs::write(root.join("c2.claims.json"), "{\"claims\":[]}").unwrap();
        dirs.sweep(&dirs.ids());
        for f in &stale {
            assert!(!f.exists(), "{} removed", f.display());
        }
        for f in &kept {
            assert!(f.exists(), "{} kept", f.display());
        }
        assert!(
            !root.join("c2").exists(),
            "a record alone makes no directory"
        );
    }

    #[test]
    fn only_directories_with_the_plugin_s_record_are_listed_or_removed() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("nri");
        let dirs = PlanDirs::new(&root);
        let edit = crate::edit::tests_support::edit();
        dirs.write(&id("c1"), &edit, &Record::default()).unwrap();
        // an operator's directory and file, a claims directory, a record-less plan directory
        for d in ["operator-notes", "claims", "c2"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
            std::fs::write(root.join(d).join("keep"), "x").unwrap();
        }
        std::fs::write(root.join("README"), "x").unwrap();
        // a "record" that is a directory is not one
        std::fs::create_dir_all(root.join("c3.claims.json")).unwrap();
        assert_eq!(dirs.ids(), [id("c1")]);
        for other in ["operator-notes", "claims", "c2", "c3", "README"] {
            assert!(!dirs.remove(&id(other)), "{other}");
        }
        for kept in [
            "operator-notes/keep",
            "claims/keep",
            "c2/keep",
            "README",
            "c3.claims.json",
        ] {
            assert!(root.join(kept).exists(), "{kept}");
        }
        assert!(dirs.remove(&id("c1")));
        assert!(!root.join("c1").exists() && !root.join("c1.claims.json").exists());
    }
}
