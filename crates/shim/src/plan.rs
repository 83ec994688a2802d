//! [`Plan`]: the plan the hook wrote into the container, from `plan.json` or the `CPUPLAN_*` variables.

use std::path::{Path, PathBuf};

use cpuplan::planenv::{PlanEnv, PlanEnvError, PLAN_PATH};
use cpuplan::{CpuSet, PlanFile, PLAN_VERSION};

use crate::error::{Result, ShimError};

/// Where the hook writes the plan inside the container.
pub const DEFAULT_PLAN: &str = "/run/cpuplan/plan.json";

/// The variable naming another plan file than [`DEFAULT_PLAN`].
pub const PLAN_VAR: &str = PLAN_PATH;

/// The env file's name, next to the plan.
pub const ENV_FILE: &str = "plan.env";

/// The most bytes of a plan file read (a plan is a few KiB).
pub(crate) const MAX_PLAN: usize = 1 << 20;

/// A deployment's plan as this container's processes read it, and where it was read from.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The plan, in the planner's JSON form.
    pub file: PlanFile,
    /// Where it came from (a path, or "the environment"), for messages.
    pub source: String,
}

impl Plan {
    /// The plan file to read: `$CPUPLAN_PLAN` when set and not empty, else [`DEFAULT_PLAN`].
    pub fn default_path() -> PathBuf {
        match std::env::var_os(PLAN_VAR) {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ => PathBuf::from(DEFAULT_PLAN),
        }
    }

    /// Reads the plan file named by `$CPUPLAN_PLAN`, else [`DEFAULT_PLAN`].
    pub fn load() -> Result<Plan> {
        Self::load_from(&Self::default_path())
    }

    /// Reads the plan file at `path`; [`ShimError::NoPlan`] when it does not exist. The file
    /// is read without ever blocking and at most [`MAX_PLAN`] bytes of it: a FIFO, a device
    /// or a directory there is an error at once.
    pub fn load_from(path: &Path) -> Result<Plan> {
        match cpuplan::read_file(path, MAX_PLAN) {
            Ok(bytes) => Self::parse_json(&String::from_utf8_lossy(&bytes), path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ShimError::NoPlan(format!(
                "{} does not exist",
                path.display()
            ))),
            Err(source) => Err(ShimError::Io {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// The plan in `text`, the JSON the hook wrote at `path` (extra keys are ignored).
    pub fn parse_json(text: &str, path: &Path) -> Result<Plan> {
        let file: PlanFile = serde_json::from_str(text).map_err(|source| ShimError::Json {
            path: path.to_path_buf(),
            source,
        })?;
        if file.version != PLAN_VERSION {
            return Err(ShimError::Version {
                path: path.to_path_buf(),
                found: file.version,
                expected: PLAN_VERSION,
            });
        }
        Ok(Plan {
            file,
            source: path.display().to_string(),
        })
    }

    /// The plan in this process's `CPUPLAN_*` variables (those `plan.env` sets).
    pub fn from_env() -> Result<Plan> {
        Self::from_vars(|k| std::env::var(k).ok(), "the environment")
    }

    /// The plan in the variables of an env file read from `path` (a later assignment wins).
    pub fn from_env_vars(vars: &[(String, String)], path: &Path) -> Result<Plan> {
        let get = |k: &str| {
            vars.iter()
                .rev()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
        };
        Self::from_vars(get, &path.display().to_string())
    }

    /// The plan in the plan variables that `get` returns ([`PlanEnv::from_vars`]); `source` names where they came from.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>, source: &str) -> Result<Plan> {
        let env = PlanEnv::from_vars(get).map_err(|e| match e {
            PlanEnvError::NoPlan => ShimError::NoPlan(format!("{e} in {source}")),
            PlanEnvError::Var { name, value, what } => ShimError::Var {
                source_name: source.to_string(),
                name: name.to_string(),
                value,
                what,
            },
            PlanEnvError::Line(l) => ShimError::EnvLine {
                path: source.into(),
                line: l.line,
                what: l.what,
                content: l.content,
            },
        })?;
        Ok(Plan {
            file: env.to_file(source),
            source: source.to_string(),
        })
    }

    /// The plan file if there is one, else the `CPUPLAN_*` variables; [`ShimError::NoPlan`] when neither is present.
    ///
    /// A plan file that exists but does not parse is an error, not a reason to fall back.
    pub fn find() -> Result<Plan> {
        match Self::load() {
            Err(ShimError::NoPlan(file)) => match Self::from_env() {
                Err(ShimError::NoPlan(vars)) => {
                    Err(ShimError::NoPlan(format!("{file}, and {vars}")))
                }
                other => other,
            },
            other => other,
        }
    }

    /// The CPUs the container may run on: the process mask while this plan is installed.
    pub fn mask(&self) -> &CpuSet {
        &self.file.mask
    }

    /// How many of the mask's CPUs the quota lets run.
    pub fn usable(&self) -> usize {
        self.file.usable
    }

    /// The CPUs the quota lets run, less the pinned ones: what pools are sized from.
    pub fn left(&self) -> usize {
        self.file.left
    }

    /// How many workers the plan lists (pinned or not).
    pub fn workers(&self) -> usize {
        self.file.workers.len()
    }

    /// The intra-op threads of `process`: its share of the CPUs left where each worker runs in
    /// a process of its own, what its `OMP_NUM_THREADS` holds.
    pub fn threads_for(&self, process: cpuplan::Role) -> usize {
        self.file.threads_for(process)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_fifo_at_the_plan_path_is_an_error_at_once_never_a_wait() {
        let t = tempfile::tempdir().unwrap();
        let fifo = t.path().join("plan.json");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let start = std::time::Instant::now();
        let e = Plan::load_from(&fifo).unwrap_err();
        assert!(start.elapsed() < std::time::Duration::from_secs(2));
        assert!(matches!(e, ShimError::Io { .. }), "{e:?}");
        assert!(e.to_string().contains("FIFO"), "{e}");
        assert!(e.to_string().contains("plan.json"), "{e}");
        // A directory too; a missing file stays NoPlan.
        assert!(matches!(
            Plan::load_from(t.path()),
            Err(ShimError::Io { .. })
        ));
        let missing = Plan::load_from(&t.path().join("none.json")).unwrap_err();
        assert!(matches!(missing, ShimError::NoPlan(_)), "{missing:?}");
    }

    fn from(pairs: &[(&str, &str)]) -> Result<Plan> {
        let m = vars(pairs);
        Plan::from_vars(|k| m.get(k).cloned(), "plan.env")
    }

    #[test]
    fn builds_a_plan_from_the_variables() {
        let p = from(&[
            ("CPUPLAN_SETTING", "auto"),
            ("CPUPLAN_MASK", "0-55,112-167"),
            ("CPUPLAN_USABLE", "16"),
            ("CPUPLAN_WORKERS", "1,113;-"),
            ("CPUPLAN_DEVICES", "0000:2a:00.0;-"),
            ("CPUPLAN_RESULT", "54,166"),
            ("CPUPLAN_WHY", "auto: by rank"),
        ])
        .unwrap();
        assert_eq!(p.file.setting, "auto");
        assert_eq!(p.workers(), 2);
        let w0 = p.file.workers[0].as_ref().unwrap();
        assert_eq!(w0.cpus.to_string(), "1,113");
        assert_eq!(w0.device.as_deref(), Some("0000:2a:00.0"));
        assert!(p.file.workers[1].is_none());
        assert_eq!(p.file.result.as_ref().unwrap().cpus.to_string(), "54,166");
        // Recomputed as the planner does: 16 usable less 4 pinned.
        assert_eq!(p.file.pinned.to_string(), "1,54,113,166");
        assert_eq!(p.left(), 12);
        assert_eq!(p.file.pools.encode_workers, 4);
        assert_eq!(p.file.why, "auto: by rank");
    }

    #[test]
    fn given_derived_values_are_kept() {
        let p = from(&[
            ("CPUPLAN_MASK", "0-3"),
            ("CPUPLAN_USABLE", "4"),
            ("CPUPLAN_LEFT", "7"),
            ("CPUPLAN_PNG_THREADS", "2"),
        ])
        .unwrap();
        assert_eq!(p.left(), 7);
        assert_eq!(p.file.pools.png_threads, 2);
        assert_eq!(p.workers(), 0);
        assert!(p.file.result.is_none());
    }

    #[test]
    fn bad_variables_name_the_variable_and_value() {
        for (pairs, name, value) in [
            (
                vec![("CPUPLAN_MASK", "0-x"), ("CPUPLAN_USABLE", "2")],
                "CPUPLAN_MASK",
                "0-x",
            ),
            (
                vec![("CPUPLAN_MASK", "0-1"), ("CPUPLAN_USABLE", "two")],
                "CPUPLAN_USABLE",
                "two",
            ),
            (vec![("CPUPLAN_MASK", "0-1")], "CPUPLAN_USABLE", ""),
            (
                vec![
                    ("CPUPLAN_MASK", "0-1"),
                    ("CPUPLAN_USABLE", "2"),
                    ("CPUPLAN_WORKERS", "1;9-2"),
                ],
                "CPUPLAN_WORKERS",
                "1;9-2",
            ),
            (
                vec![
                    ("CPUPLAN_MASK", "0-1"),
                    ("CPUPLAN_USABLE", "2"),
                    ("CPUPLAN_WORKERS", "0;1"),
                    ("CPUPLAN_DEVICES", "a"),
                ],
                "CPUPLAN_DEVICES",
                "a",
            ),
        ] {
            let e = from(&pairs).unwrap_err();
            let msg = e.to_string();
            assert!(
                msg.starts_with(&format!("plan.env: {name}={value:?}")),
                "{msg}"
            );
        }
    }

    #[test]
    fn no_mask_is_no_plan() {
        let e = from(&[("CPUPLAN_USABLE", "2")]).unwrap_err();
        assert!(matches!(e, ShimError::NoPlan(_)), "{e}");
    }

    #[test]
    fn json_plans_check_their_version_and_name_the_file() {
        let path = Path::new("/run/cpuplan/plan.json");
        let e = Plan::parse_json("{\"version\": 1", path).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("/run/cpuplan/plan.json: not a cpuplan plan"),
            "{e}"
        );
        let mut v = serde_json::to_value(sample_file()).unwrap();
        v["version"] = 9.into();
        let e = Plan::parse_json(&v.to_string(), path).unwrap_err();
        assert!(e.to_string().contains("plan version 9"), "{e}");
        v["version"] = 1.into();
        v["hook"] = "extra keys are ignored".into();
        let p = Plan::parse_json(&v.to_string(), path).unwrap();
        assert_eq!(p.file, sample_file());
        assert_eq!(p.source, "/run/cpuplan/plan.json");
    }

    fn sample_file() -> PlanFile {
        from(&[
            ("CPUPLAN_MASK", "0-1"),
            ("CPUPLAN_USABLE", "2"),
            ("CPUPLAN_WORKERS", "1"),
        ])
        .unwrap()
        .file
    }
}
