//! What a container's runtime spec asks for, whoever hands it over: a bundle's `config.json`
//! (the hook), the config on stdin (`precreate`) or the runtime's container message (NRI).

use std::collections::BTreeMap;
use std::path::PathBuf;

use cpuplan::CpuSet;

/// The annotation prefix cpuplan reads (and, for `cpuplan.plan`, writes).
pub const ANNOTATION_PREFIX: &str = "cpuplan.";

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
/// it covers a device node in `/dev` (see [`crate::read::nodes`]).
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
}

impl SpecMount {
    /// The mount at `destination` of type `kind` with `options`.
    pub fn new(destination: &str, kind: &str, options: &[String]) -> SpecMount {
        SpecMount {
            destination: destination.to_string(),
            clean: clean_destination(destination),
            kind: kind.to_string(),
            copies_up: options.iter().any(|o| o == "tmpcopyup"),
        }
    }
}

/// `path` made absolute and normal as a runtime reads a mount destination before following
/// links: relative to `/`, `.` and empty components dropped, `..` going up, never above `/`.
pub fn clean_destination(path: &str) -> String {
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
}

impl ContainerSpec {
    /// Whether the container sets `key` in its environment (only keys of interest are known).
    pub fn sets_env(&self, key: &str) -> bool {
        self.env.contains_key(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let m = SpecMount::new("/dev/", "tmpfs", &["nosuid".into(), "tmpcopyup".into()]);
        assert_eq!((m.clean.as_str(), m.copies_up), ("/dev", true));
    }
}
