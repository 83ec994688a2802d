//! Edit: the runtime-neutral changes a [`Decision`] asks of a container's spec.
//!
//! A [`SpecEdit`] holds the environment to add (never a variable the container sets), the
//! cpuset, the files to place in the container's plan directory and the annotations. Each
//! front end turns it into what its runtime takes: the OCI hook applies it to the live
//! container, `precreate` writes it into the config, `explain` prints it, and the NRI plugin
//! maps it to a container adjustment.

pub mod plandoc;

use std::path::PathBuf;

use cpuplan::planenv::PlanEnv;
use cpuplan::CpuSet;

use crate::config::HookConfig;
use crate::decide::Decision;
use crate::read::Inputs;
pub use plandoc::PlanDoc;

/// The annotation that carries the plan's JSON.
pub const PLAN_ANNOTATION: &str = crate::read::spec::PLAN_ANNOTATION;
/// The plan's JSON file in the plan directory.
pub const PLAN_JSON: &str = "plan.json";
/// The plan's env file in the plan directory.
pub const PLAN_ENV: &str = "plan.env";
/// Where the NRI plugin mounts a container's plan directory (the hook's is the config's `dir`):
/// in the `/dev` tmpfs the runtime makes, never where the image's own files are.
pub const NRI_PLAN_DIR: &str = "/dev/cpuplan";

/// A file to place in the container's plan directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacedFile {
    /// Its name in the plan directory.
    pub name: &'static str,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// The changes a decision asks of a container.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecEdit {
    /// Variables to add to the container's environment, in `plan.env` order (none it sets).
    pub env: Vec<(String, String)>,
    /// The CPUs to narrow `linux.resources.cpu.cpus` to, if any.
    pub cpus: Option<CpuSet>,
    /// The plan directory inside the container.
    pub dir: PathBuf,
    /// `plan.json` and `plan.env`.
    pub files: Vec<PlacedFile>,
    /// Annotations to set.
    pub annotations: Vec<(String, String)>,
    /// The `plan.json` document the files hold.
    pub doc: PlanDoc,
}

impl SpecEdit {
    /// The edit for `decision` on `inputs`, placing files in `config.dir` (their first
    /// generation).
    pub fn new(inputs: &Inputs, decision: &Decision, config: &HookConfig) -> SpecEdit {
        SpecEdit::at_generation(inputs, decision, config, 1)
    }

    /// [`SpecEdit::new`] with files of generation `generation` (a rewrite after an update).
    pub fn at_generation(
        inputs: &Inputs,
        decision: &Decision,
        config: &HookConfig,
        generation: u64,
    ) -> SpecEdit {
        let mut doc = PlanDoc::new(inputs, decision);
        doc.generation = generation;
        let env_file = PlanEnv::new(&doc.plan).at_generation(generation);
        let env = env_file
            .vars()
            .into_iter()
            .filter(|(k, _)| !inputs.spec.sets_env(k))
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        let annotation = serde_json::to_string(&doc.plan).unwrap_or_default();
        SpecEdit {
            env,
            cpus: decision.cpuset.clone(),
            dir: config.dir.clone(),
            files: vec![
                PlacedFile {
                    name: PLAN_JSON,
                    bytes: doc.to_bytes(),
                },
                PlacedFile {
                    name: PLAN_ENV,
                    bytes: env_file.encode().into_bytes(),
                },
            ],
            annotations: vec![(PLAN_ANNOTATION.to_string(), annotation)],
            doc,
        }
    }
}

impl SpecEdit {
    /// Records `workers` (each worker's placement CPUs, [`PlanDoc::worker_placement`]) in the
    /// document and in the `plan.json` it is written as.
    pub fn with_worker_placement(mut self, workers: Option<Vec<Option<CpuSet>>>) -> SpecEdit {
        self.doc.worker_placement = workers;
        let bytes = self.doc.to_bytes();
        for f in self.files.iter_mut().filter(|f| f.name == PLAN_JSON) {
            f.bytes = bytes.clone();
        }
        self
    }
}

#[cfg(test)]
pub mod tests_support {
    //! An edit made in memory, for the front ends' unit tests.

    use super::SpecEdit;
    use crate::config::HookConfig;
    use crate::decide::decide;
    use crate::read::testkit::inputs;

    /// The edit of an `auto` container on GPU 18 of the test host.
    pub fn edit() -> SpecEdit {
        let i = inputs(cpuplan::Setting::Auto, &["18"], "0-15", 4);
        let config = HookConfig::default();
        SpecEdit::new(&i, &decide(&i, &config), &config)
    }
}
