//! MIG instances' capability nodes and the GPU each is on.
//!
//! A MIG instance reaches a container (through CDI, DRA, `pass-device-specs` or the toolkit)
//! as its parent's `/dev/nvidiaN` plus two capability nodes `/dev/nvidia-caps/nvidia-cap<M>`,
//! one for its GPU instance and one for its compute instance. Their major is dynamic: the
//! `nvidia-caps` line of `/proc/devices`. The driver lists each instance's minor in
//! `/proc/driver/nvidia/capabilities/gpu<N>/mig/gi<G>/access` and `.../gi<G>/ci<C>/access`
//! (`DeviceFileMinor: <M>`), N being the parent's device minor (`/dev/nvidiaN`, the `Device
//! Minor` of its `information` file), not its index; `.../capabilities/mig/config` and
//! `mig/monitor` are the node-wide capabilities, which name no GPU. Two containers given two
//! instances of one GPU are two servers on that GPU.

use std::io::ErrorKind;
use std::path::Path;

use crate::fsutil::read_file;
use crate::gpu::DeviceError;

/// The `/proc/devices` name of the capability nodes' char major.
pub const CAPS_DEVICE: &str = "nvidia-caps";

/// Where the driver lists its capabilities, under the topology root.
pub const CAPABILITIES_DIR: &str = "proc/driver/nvidia/capabilities";

/// The most directory entries looked at over the whole capability tree.
const MAX_ENTRIES: usize = 16384;

/// The most bytes of a small procfs file read.
const MAX_FILE: usize = 64 << 10;

/// What one capability minor is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Capability {
    /// A MIG instance of the GPU whose device minor is `gpu`: GPU instance `gi`, and compute
    /// instance `ci` for a compute instance's node.
    Instance {
        /// The parent GPU's device minor (N of `/dev/nvidiaN`).
        gpu: u32,
        /// Its GPU instance.
        gi: u32,
        /// Its compute instance, for a compute instance's node.
        ci: Option<u32>,
    },
    /// A node-wide capability (`mig/config`, `mig/monitor`): no GPU.
    NodeWide(String),
}

impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Capability::Instance { gpu, gi, ci: None } => write!(f, "gpu{gpu}/gi{gi}"),
            Capability::Instance {
                gpu,
                gi,
                ci: Some(ci),
            } => write!(f, "gpu{gpu}/gi{gi}/ci{ci}"),
            Capability::NodeWide(name) => write!(f, "mig/{name}"),
        }
    }
}

/// The char major `/proc/devices` (under `topology_root`) gives device `name`, if it lists it.
pub fn char_major(topology_root: &Path, name: &str) -> Result<Option<i64>, DeviceError> {
    let path = topology_root.join("proc/devices");
    match read_file(&path, MAX_FILE) {
        Ok(bytes) => Ok(parse_devices(&String::from_utf8_lossy(&bytes), name)),
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => Ok(None),
        Err(e) => Err(DeviceError::io(&path)(e)),
    }
}

/// The char major of `name` in `/proc/devices`' text (its `Character devices:` section).
pub fn parse_devices(text: &str, name: &str) -> Option<i64> {
    let mut chars = false;
    for line in text.lines() {
        let line = line.trim();
        if line.ends_with(':') {
            chars = line == "Character devices:";
            continue;
        }
        let mut words = line.split_whitespace();
        if let (true, Some(major), Some(n), None) =
            (chars, words.next(), words.next(), words.next())
        {
            if n == name {
                return major.parse().ok();
            }
        }
    }
    None
}

/// The capability minors the driver lists under `topology_root`, each with what it is; empty
/// without MIG.
pub fn capabilities(topology_root: &Path) -> Result<Vec<(u32, Capability)>, DeviceError> {
    let root = topology_root.join(CAPABILITIES_DIR);
    let mut out = Vec::new();
    let mut budget = MAX_ENTRIES;
    for (name, dir) in list(&root, &mut budget)? {
        if name == "mig" {
            for which in ["config", "monitor"] {
                if let Some(minor) = access_minor(&dir.join(which))? {
                    out.push((minor, Capability::NodeWide(which.into())));
                }
            }
            continue;
        }
        let Some(gpu) = numbered(&name, "gpu") else {
            continue;
        };
        for (gi_name, gi_dir) in list(&dir.join("mig"), &mut budget)? {
            let Some(gi) = numbered(&gi_name, "gi") else {
                continue;
            };
            if let Some(minor) = access_minor(&gi_dir.join("access"))? {
                out.push((minor, Capability::Instance { gpu, gi, ci: None }));
            }
            for (ci_name, ci_dir) in list(&gi_dir, &mut budget)? {
                let Some(ci) = numbered(&ci_name, "ci") else {
                    continue;
                };
                if let Some(minor) = access_minor(&ci_dir.join("access"))? {
                    let ci = Some(ci);
                    out.push((minor, Capability::Instance { gpu, gi, ci }));
                }
            }
        }
    }
    out.sort_by_key(|(minor, _)| *minor);
    Ok(out)
}

/// N of `<prefix>N`.
fn numbered(name: &str, prefix: &str) -> Option<u32> {
    let n = name.strip_prefix(prefix)?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .then(|| n.parse().ok())
        .flatten()
}

/// The entries of `dir` (none if it is absent), at most `budget` over the whole walk.
fn list(dir: &Path, budget: &mut usize) -> Result<Vec<(String, std::path::PathBuf)>, DeviceError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
            return Ok(Vec::new())
        }
        Err(e) => return Err(DeviceError::io(dir)(e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        if *budget == 0 {
            break;
        }
        *budget -= 1;
        let entry = entry.map_err(DeviceError::io(dir))?;
        out.push((
            entry.file_name().to_string_lossy().into_owned(),
            entry.path(),
        ));
    }
    out.sort();
    Ok(out)
}

/// The `DeviceFileMinor` of the `access` file at `path`, `None` if there is no such file.
fn access_minor(path: &Path) -> Result<Option<u32>, DeviceError> {
    let text = match read_file(path, MAX_FILE) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
            return Ok(None)
        }
        Err(e) => return Err(DeviceError::io(path)(e)),
    };
    parse_access(path, &text).map(Some)
}

/// The `DeviceFileMinor` of a capability's `access` text (`Key: value` lines); `path` names it in errors.
pub fn parse_access(path: &Path, text: &str) -> Result<u32, DeviceError> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim() == "DeviceFileMinor")
        .and_then(|(_, v)| {
            let v = v.trim();
            v.bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| v.parse().ok())
                .flatten()
        })
        .ok_or_else(|| {
            DeviceError::malformed(path, "a capability file with a DeviceFileMinor", text)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caps_major_is_a_character_device_line() {
        let text =
            "Character devices:\n  1 mem\n195 nvidia-frontend\n237 nvidia-caps\n511 nvidia-uvm\n\n\
                    Block devices:\n  8 sd\n237 nvidia-caps-fake\n";
        assert_eq!(parse_devices(text, CAPS_DEVICE), Some(237));
        assert_eq!(parse_devices(text, "nvidia-uvm"), Some(511));
        assert_eq!(parse_devices(text, "sd"), None, "a block device");
        assert_eq!(parse_devices("Character devices:\n", CAPS_DEVICE), None);
    }

    #[test]
    fn an_access_file_gives_its_minor_or_names_itself() {
        let p = Path::new("gpu0/mig/gi1/access");
        let ok = "DeviceFileMinor: 12\nDeviceFileMode: 292\nDeviceFileModify: 1\n";
        assert_eq!(parse_access(p, ok).unwrap(), 12);
        for bad in [
            "DeviceFileMode: 292\n",
            "DeviceFileMinor: -1\n",
            "DeviceFileMinor: x\n",
        ] {
            let e = parse_access(p, bad).unwrap_err().to_string();
            assert!(e.contains("gpu0/mig/gi1/access"), "{e}");
        }
        let c = Capability::Instance {
            gpu: 1,
            gi: 2,
            ci: Some(0),
        };
        assert_eq!(c.to_string(), "gpu1/gi2/ci0");
    }
}
