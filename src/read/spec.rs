//! What a container's runtime spec asks for, whoever hands it over: a bundle's `config.json`
//! (the hook), the config on stdin (`precreate`) or the runtime's container message (NRI).

use std::collections::BTreeMap;
use std::path::PathBuf;

use cpuplan::CpuSet;

/// The annotation prefix cpuplan reads (and, for `cpuplan.plan`, writes).
pub const ANNOTATION_PREFIX: &str = "cpuplan.";

/// The annotation that sets `step_thread_core` for one container.
pub const SETTING_ANNOTATION: &str = "cpuplan.step-thread-core";

/// The annotation that sets `pool_split` for one container (`off`: one process drives every GPU).
pub const POOL_SPLIT_ANNOTATION: &str = "cpuplan.pool-split";

/// The annotation that sets `rank_placement` for one container (`off`: no process is placed).
pub const RANK_PLACEMENT_ANNOTATION: &str = "cpuplan.rank-placement";

/// The annotation cpuplan writes with the plan (podman's `precreate`, the NRI plugin).
pub const PLAN_ANNOTATION: &str = "cpuplan.plan";

/// Every `cpuplan.*` annotation cpuplan knows, with what it is: the one table. Any other key
/// with [`ANNOTATION_PREFIX`] is ignored, and said once per container ([`unknown_annotations`]).
pub const ANNOTATIONS: [(&str, &str); 4] = [
    (SETTING_ANNOTATION, "the container's step_thread_core"),
    (POOL_SPLIT_ANNOTATION, "the container's pool_split"),
    (RANK_PLACEMENT_ANNOTATION, "the container's rank_placement"),
    (PLAN_ANNOTATION, "the plan, written by cpuplan"),
];

/// The most unknown annotations a note names (the rest are counted): the keys are the
/// tenant's, and the note is one log line.
const MAX_NAMED: usize = 4;
/// The most characters of each unknown annotation a note names.
const MAX_KEY: usize = 80;

/// The note for the `cpuplan.*` annotations of `keys` that are not in [`ANNOTATIONS`] (a
/// misspelt `cpuplan.step-thread-cores`): one line naming them (escaped, at most
/// [`MAX_NAMED`], each cut at [`MAX_KEY`] characters) and the known ones; `None` where every
/// one is known. The plan is not changed by them.
pub fn unknown_annotations<'a>(keys: impl IntoIterator<Item = &'a String>) -> Option<String> {
    let mut unknown: Vec<&str> = keys
        .into_iter()
        .map(String::as_str)
        .filter(|k| k.starts_with(ANNOTATION_PREFIX))
        .filter(|k| !ANNOTATIONS.iter().any(|(known, _)| known == k))
        .collect();
    unknown.sort_unstable();
    unknown.dedup();
    let (first, rest) = unknown.split_at(unknown.len().min(MAX_NAMED));
    if first.is_empty() {
        return None;
    }
    let named: Vec<String> = first
        .iter()
        .map(|k| {
            let cut: String = k.chars().take(MAX_KEY).collect();
            let more = if cut.len() < k.len() { "..." } else { "" };
            format!("{}{more}", crate::logging::escape(&cut))
        })
        .collect();
    let more = match rest.len() {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    let known: Vec<&str> = ANNOTATIONS.iter().map(|(k, _)| *k).collect();
    Some(format!(
        "annotation {}{more} is not one cpuplan knows, ignored (it knows {})",
        named.join(", "),
        known.join(", ")
    ))
}

/// Environment variables the planner reads from the container, besides the plan's own.
pub const READ_ENV: [&str; 2] = ["NVIDIA_VISIBLE_DEVICES", cpuplan::planenv::STEP_THREAD_CORE];

/// Whether the container's `key` matters to cpuplan: a variable it reads or one the plan sets
/// (which it must never override).
pub fn env_of_interest(key: &str) -> bool {
    READ_ENV.contains(&key) || cpuplan::planenv::is_plan_var(key)
}

/// A device the spec gives the container (`linux.devices`, type `c` or `u`).
pub use cpuplan::gpu::CharDevice;

/// A mount the spec gives the container (`mounts`), as far as the planner looks at it: whether
/// it covers a device node in `/dev` (see [`crate::read::nodes`]), and whether it is a bind of
/// the host's `/dev/null` (the volume-mounts strategy, see [`crate::read::gpus`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecMount {
    /// Where the container sees it, as the spec says (the runtime resolves it in the rootfs).
    pub destination: String,
    /// [`SpecMount::destination`] made absolute and normal as a runtime reads it before following
    /// links: relative to `/`, `.` and empty components dropped, `..` going up (never above `/`).
    pub clean: String,
    /// Its type (`tmpfs`, `bind`…; empty where the spec gives none).
    pub kind: String,
    /// Whether its options copy the image's content at the destination into it (`tmpcopyup`).
    pub copies_up: bool,
    /// Its source as the spec says (a host path for a bind; empty where the spec gives none).
    pub source: String,
    /// Whether its options make it a bind mount (`bind` or `rbind`).
    pub binds: bool,
}

impl SpecMount {
    /// The mount at `destination` of type `kind` with `options` (no source).
    pub fn new<O: AsRef<str>>(destination: &str, kind: &str, options: &[O]) -> SpecMount {
        let has = |want: &[&str]| options.iter().any(|o| want.contains(&o.as_ref()));
        SpecMount {
            destination: destination.to_string(),
            clean: clean_destination(destination),
            kind: kind.to_string(),
            copies_up: has(&["tmpcopyup"]),
            source: String::new(),
            binds: has(&["bind", "rbind"]),
        }
    }

    /// This mount with source `source`.
    pub fn with_source(mut self, source: &str) -> SpecMount {
        self.source = source.to_string();
        self
    }

    /// Whether it binds the host's `/dev/null` (type `bind`, or no type with a `bind`/`rbind`
    /// option as CRI-O writes it): what only the device plugin or a hostPath volume gives.
    pub fn binds_dev_null(&self) -> bool {
        let bind = self.kind == "bind" || (self.kind.is_empty() && self.binds);
        bind && clean_destination(&self.source) == "/dev/null" && self.source.starts_with('/')
    }
}

/// `path` made absolute and normal as a runtime reads a mount destination before following
/// links: relative to `/`, `.` and empty components dropped, `..` going up, never above `/`.
pub fn clean_destination(path: &str) -> String {
    // Most destinations are clean already (`/dev/shm`): those are copied as they are.
    let clean = path == "/"
        || (path.starts_with('/')
            && !path.ends_with('/')
            && path[1..].split('/').all(|c| !matches!(c, "" | "." | "..")));
    if clean {
        return path.to_string();
    }
    format!("/{}", cpuplan::lexical_components(path).join("/"))
}

/// The parts of a runtime spec the planner uses; everything else is never kept.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerSpec {
    /// Where it was read, for messages (`/b/config.json`, `<stdin>`, `NRI container …`).
    pub source: String,
    /// `root.path` made absolute against the bundle (`None` where the runtime gives no rootfs).
    pub rootfs: Option<PathBuf>,
    /// `linux.resources.cpu.quota / period`, in CPUs.
    pub quota: Option<f64>,
    /// `linux.resources.cpu.cpus`.
    pub cpus: Option<CpuSet>,
    /// `linux.devices` of type `c` or `u`.
    pub devices: Vec<CharDevice>,
    /// `process.env` entries [`env_of_interest`] keeps, as `KEY -> VALUE` (the last one wins).
    pub env: BTreeMap<String, String>,
    /// The `cpuplan.*` annotations.
    pub annotations: BTreeMap<String, String>,
    /// `linux.cgroupsPath`.
    pub cgroups_path: Option<String>,
    /// `mounts`, in the spec's order (where the runtime gives them: not through NRI).
    pub mounts: Vec<SpecMount>,
    /// `hooks.createRuntime` and `hooks.prestart` (where the runtime gives them: not through
    /// NRI): the hook's own registration is among them, with the timeout it runs under.
    pub hooks: Vec<SpecHook>,
}

/// A `createRuntime` or `prestart` hook of the spec: its program and the seconds the runtime
/// gives it (`timeout`, where set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecHook {
    /// `path`: the program, as the runtime runs it.
    pub path: PathBuf,
    /// `timeout`, in seconds.
    pub timeout: Option<i64>,
}

/// The period the kernel and runc take where a spec gives none, or 0 (CRI's unset), in µs.
pub const DEFAULT_PERIOD_US: u64 = 100_000;

/// A value of a runtime spec the planner cannot use, naming where it was read and the field.
#[derive(Debug, thiserror::Error)]
#[error("{from}: {field}: {message}")]
pub struct SpecError {
    /// Where the spec was read ([`ContainerSpec::source`]).
    pub from: String,
    /// The field, in JSON path form.
    pub field: &'static str,
    /// What is wrong, quoting the value.
    pub message: String,
}

/// The container's CPU quota in CPUs from `linux.resources.cpu`'s `quota` and `period`: the one
/// rule every reader applies, as runc applies them. A quota that is absent, `0` (what CRI and
/// NRI send for "unset", and what runc leaves unwritten) or `-1` is no limit; a period that is
/// absent or `0` is the kernel's default, 100000 µs. Any other negative quota is no value a
/// runtime applies (the v1 kernel refuses it): an error, as `(field, message)`.
pub fn cpu_quota(
    quota: Option<i64>,
    period: Option<u64>,
) -> Result<Option<f64>, (&'static str, String)> {
    match quota {
        None | Some(0) | Some(-1) => Ok(None),
        Some(q) if q < 0 => Err((
            "linux.resources.cpu.quota",
            format!("{q} is neither positive, 0 (unset) nor -1 (no limit)"),
        )),
        Some(q) => {
            let p = period.filter(|p| *p > 0).unwrap_or(DEFAULT_PERIOD_US);
            Ok(Some(q as f64 / p as f64))
        }
    }
}

impl ContainerSpec {
    /// A spec read from `source` (named in messages) that asks for nothing yet.
    pub fn new(source: impl Into<String>) -> ContainerSpec {
        ContainerSpec {
            source: source.into(),
            ..ContainerSpec::default()
        }
    }

    /// This spec with the CPU limits of `linux.resources.cpu` (`quota`, `period`, `cpus`), each
    /// checked by the one rule every reader goes through ([`cpu_quota`]; a `cpus` list in sysfs
    /// form, empty for none); a value the planner cannot use is an error naming the field.
    pub fn with_cpu(
        mut self,
        quota: Option<i64>,
        period: Option<u64>,
        cpus: Option<&str>,
    ) -> Result<ContainerSpec, SpecError> {
        let err = |field, message| SpecError {
            from: self.source.clone(),
            field,
            message,
        };
        self.quota = cpu_quota(quota, period).map_err(|(f, m)| err(f, m))?;
        self.cpus = match cpus.map(str::trim) {
            None | Some("") => None,
            Some(text) => Some(
                cpuplan::parse_cpu_list(text)
                    .map_err(|e| err("linux.resources.cpu.cpus", e.to_string()))?,
            ),
        };
        Ok(self)
    }

    /// Whether the container sets `key` in its environment (only keys of interest are known).
    pub fn sets_env(&self, key: &str) -> bool {
        self.env.contains_key(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_quota_rule_zero_is_unset_and_a_period_of_zero_the_default() {
        for (quota, period, want) in [
            (None, None, Ok(None)),
            (Some(0), Some(100_000), Ok(None)),
            (Some(0), Some(0), Ok(None)),
            (Some(-1), None, Ok(None)),
            (Some(150_000), Some(100_000), Ok(Some(1.5))),
            (Some(150_000), None, Ok(Some(1.5))),
            (Some(150_000), Some(0), Ok(Some(1.5))),
            (Some(50_000), Some(200_000), Ok(Some(0.25))),
        ] {
            assert_eq!(
                cpu_quota(quota, period).map_err(|_| ()),
                want,
                "{quota:?}/{period:?}"
            );
        }
        let (field, message) = cpu_quota(Some(-7), Some(100_000)).unwrap_err();
        assert_eq!(field, "linux.resources.cpu.quota");
        assert!(message.starts_with("-7 is neither positive"), "{message}");
        let e = ContainerSpec::new("NRI container c1")
            .with_cpu(Some(-2), None, None)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "NRI container c1: linux.resources.cpu.quota: -2 is neither positive, 0 (unset) nor -1 (no limit)"
        );
        let e = ContainerSpec::new("<stdin>")
            .with_cpu(None, None, Some("3-1"))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("<stdin>: linux.resources.cpu.cpus: ") && e.contains("\"3-1\""),
            "{e}"
        );
        let s = ContainerSpec::new("x")
            .with_cpu(Some(200_000), Some(100_000), Some(" 0-3 "))
            .unwrap();
        assert_eq!(
            (s.quota, s.cpus.unwrap().to_string()),
            (Some(2.0), "0-3".into())
        );
    }

    #[test]
    fn an_unknown_cpuplan_annotation_is_one_note_naming_it_and_the_known_ones() {
        let keys = |ks: &[&str]| ks.iter().map(|k| k.to_string()).collect::<Vec<String>>();
        let known = keys(&[
            SETTING_ANNOTATION,
            POOL_SPLIT_ANNOTATION,
            RANK_PLACEMENT_ANNOTATION,
            PLAN_ANNOTATION,
            "other.x",
        ]);
        assert_eq!(unknown_annotations(&known), None);
        let note =
            unknown_annotations(&keys(&["cpuplan.step-thread-cores", SETTING_ANNOTATION])).unwrap();
        assert_eq!(
            note,
            "annotation cpuplan.step-thread-cores is not one cpuplan knows, ignored (it knows \
             cpuplan.step-thread-core, cpuplan.pool-split, cpuplan.rank-placement, cpuplan.plan)"
        );
        // The tenant's keys: escaped, cut, at most four named.
        let long = format!("cpuplan.b{}", "x".repeat(200));
        let many = keys(&[
            "cpuplan.a\x1b]0;t\x07",
            &long,
            "cpuplan.c",
            "cpuplan.d",
            "cpuplan.e",
            "cpuplan.f",
        ]);
        let note = unknown_annotations(&many).unwrap();
        assert!(!note.chars().any(char::is_control), "{note}");
        assert!(note.contains("cpuplan.a\\u{1b}]0;t\\u{7}"), "{note}");
        assert!(
            note.contains(&format!("cpuplan.b{}...,", "x".repeat(71))),
            "{note}"
        );
        assert!(note.contains(" and 2 more is not one"), "{note}");
        assert!(note.len() < 400, "{note}");
    }

    #[test]
    fn destinations_are_cleaned_as_a_runtime_reads_them() {
        for (given, clean) in [
            ("/dev", "/dev"),
            ("dev", "/dev"),
            ("//dev/", "/dev"),
            ("/dev/./nvidia1", "/dev/nvidia1"),
            ("/dev/../dev/nvidia1", "/dev/nvidia1"),
            ("/../../dev", "/dev"),
            ("/", "/"),
            ("", "/"),
        ] {
            assert_eq!(clean_destination(given), clean, "{given:?}");
        }
        // The copy of a clean destination is what the lexical walk gives, for every string of
        // up to 7 characters of `/`, `.` and `a`.
        let mut texts = vec![String::new()];
        let mut last = texts.clone();
        for _ in 0..7 {
            last = last
                .iter()
                .flat_map(|t| ["/", ".", "a"].map(|c| format!("{t}{c}")))
                .collect();
            texts.extend(last.iter().cloned());
        }
        assert_eq!(texts.len(), (0..=7).map(|n| 3usize.pow(n)).sum::<usize>());
        for t in &texts {
            let walked = format!("/{}", cpuplan::lexical_components(t).join("/"));
            assert_eq!(clean_destination(t), walked, "{t:?}");
        }
        let m = SpecMount::new("/dev/", "tmpfs", &["nosuid", "tmpcopyup"]);
        assert_eq!((m.clean.as_str(), m.copies_up), ("/dev", true));
    }
}
