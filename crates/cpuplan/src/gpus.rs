//! The host's GPUs from sysfs: the PCI functions like a given one, with their NUMA node and local CPUs.
//!
//! A device whose `vendor` or `class` file is absent never matches. The device at
//! `like` must have both: a `like` that is not under `sys/bus/pci/devices`, or has
//! no `vendor` (as on the POWER9 dump, whose PCI directories carry only `class`
//! and `local_cpus`), is an [`Error::Io`] of kind `NotFound` naming the path;
//! [`is_not_found`] tells it apart from a malformed file.

use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::cpu_node::cpu_nodes;
pub use crate::cpu_node::CpuNode;
use crate::cpuset::{CpuSet, MAX_CPU};
use crate::error::{Error, Result};
use crate::fsutil::{read, read_cpu_list_optional, read_optional, under};
pub use crate::pci::{pci_key, PciKey};

/// One of the host's GPUs as sysfs lists it: its PCI address, NUMA node and local CPUs (`None` where sysfs doesn't say).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct HostGpu {
    /// PCI address, e.g. `0000:2a:00.0`.
    pub address: String,
    /// NUMA node; `None` for `-1` or no file.
    pub node: Option<u32>,
    /// Local CPUs; `None` where sysfs doesn't say.
    pub local: Option<CpuSet>,
    /// Where a GPU whose node has no CPUs (or whose `local_cpulist` is empty) is placed: the
    /// nearest node with CPUs, or why none. `None` where sysfs gives its locality.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_node: Option<CpuNode>,
}

impl HostGpu {
    /// The GPU as sysfs lists it, its CPU node not yet known.
    pub fn new(address: impl Into<String>, node: Option<u32>, local: Option<CpuSet>) -> Self {
        HostGpu {
            address: address.into(),
            node,
            local,
            cpu_node: None,
        }
    }

    /// The node the GPU is ranked on: the one it is placed on where its own has no CPUs,
    /// else its own.
    pub fn placement_node(&self) -> Option<u32> {
        match &self.cpu_node {
            Some(CpuNode::Nearest { node, .. }) => Some(*node),
            _ => self.node,
        }
    }

    /// The CPUs the GPU picks its cores from: its placement node's where its own has none,
    /// else its local CPUs; `None` where nothing says (see [`HostGpu::unplaced_why`]).
    pub fn placement_cpus(&self) -> Option<&CpuSet> {
        match &self.cpu_node {
            Some(CpuNode::Nearest { cpus, .. }) => Some(cpus),
            Some(CpuNode::Unplaced { .. }) => None,
            None => self.local.as_ref(),
        }
    }

    /// Why a GPU whose node has no CPUs could not be placed, where it could not.
    pub fn unplaced_why(&self) -> Option<&str> {
        match &self.cpu_node {
            Some(CpuNode::Unplaced { why }) => Some(why),
            _ => None,
        }
    }

    /// One line for the log where the GPU's own node has no CPUs: the node it was placed on
    /// and how (a tie settled), or why it stays unplaced; `None` where sysfs gives its locality.
    pub fn placement_line(&self) -> Option<String> {
        let from = self
            .node
            .map_or_else(|| "no NUMA node".to_string(), |n| format!("node {n}"));
        match self.cpu_node.as_ref()? {
            CpuNode::Nearest { node, .. } if self.node == Some(*node) => Some(format!(
                "gpu {}: sysfs gives it no local CPUs: placed on its {from}'s CPUs",
                self.address
            )),
            CpuNode::Nearest { node, note, .. } => Some(format!(
                "gpu {}: its {from} has no CPUs: placed on node {node}, the nearest with CPUs by the distance table{}",
                self.address,
                note.as_ref().map(|n| format!(" ({n})")).unwrap_or_default()
            )),
            CpuNode::Unplaced { why } => Some(format!(
                "gpu {}: not placed: {why}",
                self.address
            )),
        }
    }

    /// How a tie between nodes was settled, where the GPU was placed on one of several.
    pub fn placement_note(&self) -> Option<&str> {
        match &self.cpu_node {
            Some(CpuNode::Nearest { note, .. }) => note.as_deref(),
            _ => None,
        }
    }
}

/// Where every PCI function has an entry, under a root.
pub const PCI_DEVICES_DIR: &str = "sys/bus/pci/devices";

/// `<root>/sys/bus/pci/devices`, where every PCI function has an entry.
pub fn pci_devices_dir(root: &Path) -> PathBuf {
    under(root, PCI_DEVICES_DIR)
}

/// The host root whose `sys/bus/pci/devices` is `devices`, where it is that directory.
pub(crate) fn root_of_pci_devices(devices: &Path) -> Option<&Path> {
    devices
        .ends_with(PCI_DEVICES_DIR)
        .then(|| devices.ancestors().nth(4))
        .flatten()
}

/// Whether `e` is a file or PCI function that is not there (as opposed to one that is unreadable or malformed).
pub(crate) fn is_not_found(e: &Error) -> bool {
    e.is_not_found()
}

fn trimmed(text: &str) -> &str {
    text.trim_end_matches('\0').trim()
}

/// A `vendor` or `class` file's hex number (`0x10de`, `0x030200`).
pub fn parse_hex_id(path: &Path, text: &str) -> Result<u32> {
    let body = trimmed(text);
    body.strip_prefix("0x")
        .filter(|h| !h.is_empty() && h.len() <= 8 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .and_then(|h| u32::from_str_radix(h, 16).ok())
        .ok_or_else(|| Error::malformed(path, "expected a hex id such as 0x10de", text))
}

/// A `numa_node` file: `None` for `-1`.
pub fn parse_numa_node(path: &Path, text: &str) -> Result<Option<u32>> {
    let body = trimmed(text);
    if body == "-1" {
        return Ok(None);
    }
    if body.is_empty() || body.len() > 9 || !body.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Error::malformed(
            path,
            "expected a NUMA node number or -1",
            text,
        ));
    }
    body.parse()
        .map(Some)
        .map_err(|_| Error::malformed(path, "expected a NUMA node number or -1", text))
}

/// A hex CPU mask as `local_cpus` and `cpumap` write it: comma-separated 32-bit words, most significant first.
pub fn parse_cpu_mask(path: &Path, text: &str) -> Result<CpuSet> {
    let bad = |what: &str| Error::malformed(path, what, text);
    let body = trimmed(text);
    if body.is_empty() {
        return Err(bad("empty cpu mask"));
    }
    let mut set = CpuSet::new();
    for (i, word) in body.rsplit(',').enumerate() {
        if word.is_empty() || word.len() > 8 || !word.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad("expected comma-separated 32-bit hex words"));
        }
        let mut bits = u32::from_str_radix(word, 16)
            .map_err(|_| bad("expected comma-separated 32-bit hex words"))?;
        while bits != 0 {
            let cpu = i * 32 + bits.trailing_zeros() as usize;
            if cpu > MAX_CPU {
                return Err(bad(&format!("cpu {cpu} is past the highest id {MAX_CPU}")));
            }
            set.insert(cpu);
            bits &= bits - 1;
        }
    }
    Ok(set)
}

/// Whether the PCI function in `dir` has `vendor` and a class (without its programming-interface byte) of `class`; false when either file is absent.
///
/// The class is read first and the vendor only for a matching class, so the bridges, NICs and
/// drives that make up most of a host's functions cost one file read each, not two.
pub(crate) fn is_like(dir: &Path, vendor: u32, class: u32) -> Result<bool> {
    let class_path = dir.join("class");
    let Some(text) = read_optional(&class_path)? else {
        return Ok(false);
    };
    if parse_hex_id(&class_path, &text)? >> 8 != class {
        return Ok(false);
    }
    let vendor_path = dir.join("vendor");
    let Some(text) = read_optional(&vendor_path)? else {
        return Ok(false);
    };
    Ok(parse_hex_id(&vendor_path, &text)? == vendor)
}

/// The `class` of the PCI function in `dir` (`0x030200`), `None` without the file.
pub(crate) fn pci_class(dir: &Path) -> Result<Option<u32>> {
    hex_file(&dir.join("class"))
}

/// The `vendor` of the PCI function in `dir` (`0x10de`), `None` without the file.
pub(crate) fn pci_vendor(dir: &Path) -> Result<Option<u32>> {
    hex_file(&dir.join("vendor"))
}

fn hex_file(path: &Path) -> Result<Option<u32>> {
    match read_optional(path)? {
        Some(text) => Ok(Some(parse_hex_id(path, &text)?)),
        None => Ok(None),
    }
}

/// The NUMA node and local CPUs of the PCI function in `dir`.
pub(crate) fn locality(dir: &Path) -> Result<(Option<u32>, Option<CpuSet>)> {
    let node_path = dir.join("numa_node");
    let node = match read_optional(&node_path)? {
        Some(text) => parse_numa_node(&node_path, &text)?,
        None => None,
    };
    let local = match read_cpu_list_optional(&dir.join("local_cpulist"))? {
        Some(set) => Some(set),
        None => {
            let mask_path = dir.join("local_cpus");
            match read_optional(&mask_path)? {
                Some(text) => Some(parse_cpu_mask(&mask_path, &text)?),
                None => None,
            }
        }
    };
    Ok((node, local))
}

/// The host's GPUs in PCI address order: the functions under `<root>/sys/bus/pci/devices` with the vendor and class of the device at `like`.
///
/// Classes are compared without their programming-interface byte (`0x030200` ~ `0x030201`).
pub fn host_gpus(root: &Path, like: &str) -> Result<Vec<HostGpu>> {
    host_gpus_in(&pci_devices_dir(root), like)
}

/// [`host_gpus`] over a PCI devices directory itself (`/sys/bus/pci/devices` on a real host), as the in-process API's `pci_root` names it.
pub fn host_gpus_in(devices: &Path, like: &str) -> Result<Vec<HostGpu>> {
    let like_dir = devices.join(like);
    if pci_key(like).is_none() || !like_dir.is_dir() {
        return Err(Error::Io {
            path: like_dir,
            source: io::Error::new(
                io::ErrorKind::NotFound,
                format!("no PCI function {like:?} in sysfs"),
            ),
        });
    }
    let vendor_path = like_dir.join("vendor");
    let want_vendor = parse_hex_id(&vendor_path, &read(&vendor_path)?)?;
    let class_path = like_dir.join("class");
    let want_class = parse_hex_id(&class_path, &read(&class_path)?)? >> 8;

    scan(devices, |dir| is_like(dir, want_vendor, want_class))
}

/// The base class of the PCI function whose sysfs directory is `dir` (`0x03` display, `0x12`
/// processing accelerator, `0x02` network…), or `None` where it has no `class` file.
pub fn pci_base_class(dir: &Path) -> Result<Option<u8>> {
    let path = dir.join("class");
    match read_optional(&path)? {
        Some(text) => Ok(Some((parse_hex_id(&path, &text)? >> 16) as u8)),
        None => Ok(None),
    }
}

/// The functions under `devices` for which `wanted` holds, in PCI address order, with their locality.
pub(crate) fn scan(devices: &Path, wanted: impl Fn(&Path) -> Result<bool>) -> Result<Vec<HostGpu>> {
    let entries = pci_functions(devices).map_err(|source| Error::Io {
        path: devices.to_path_buf(),
        source,
    })?;
    let mut found = Vec::new();
    for (address, dir) in entries {
        if !wanted(&dir)? {
            continue;
        }
        let (node, local) = locality(&dir)?;
        found.push(HostGpu::new(address, node, local));
    }
    place(root_of_pci_devices(devices), &mut found);
    Ok(found)
}

/// Sets the CPU node of each of `gpus` whose own node has no CPUs, reading the node table
/// under `root` only where one needs it.
pub(crate) fn place(root: Option<&Path>, gpus: &mut [HostGpu]) {
    let asked: Vec<(Option<u32>, Option<&CpuSet>)> =
        gpus.iter().map(|g| (g.node, g.local.as_ref())).collect();
    let found = cpu_nodes(root, &asked);
    for (g, c) in gpus.iter_mut().zip(found) {
        g.cpu_node = c;
    }
}

/// The PCI functions listed in `devices` (`sys/bus/pci/devices`): each entry named by a PCI
/// address, with its directory, in address order (other names are skipped). The one listing
/// of that directory, for the GPU scan and the host inventory alike.
pub(crate) fn pci_functions(devices: &Path) -> io::Result<Vec<(String, PathBuf)>> {
    let mut found: Vec<(PciKey, String, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(devices)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(address) = name.to_str() else {
            continue;
        };
        let Some(key) = pci_key(address) else {
            continue;
        };
        found.push((key, address.to_string(), entry.path()));
    }
    found.sort_by_key(|(key, _, _)| *key);
    Ok(found.into_iter().map(|(_, a, d)| (a, d)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpuset::parse_cpu_list;

    fn device(root: &Path, address: &str, files: &[(&str, &str)]) {
        let dir = pci_devices_dir(root).join(address);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
    }

    fn gpu(root: &Path, address: &str, class: &str, node: &str, local: &str) {
        device(
            root,
            address,
            &[
                ("vendor", "0x10de\n"),
                ("class", class),
                ("numa_node", node),
                ("local_cpulist", local),
            ],
        );
    }

    #[test]
    fn the_root_of_a_pci_devices_directory() {
        assert_eq!(
            root_of_pci_devices(Path::new("/sys/bus/pci/devices")),
            Some(Path::new("/"))
        );
        assert_eq!(
            root_of_pci_devices(Path::new("/t/host/sys/bus/pci/devices")),
            Some(Path::new("/t/host"))
        );
        assert_eq!(root_of_pci_devices(Path::new("/t/pci")), None);
    }

    #[test]
    fn pci_keys_are_numeric() {
        assert_eq!(pci_key("0000:2a:00.0"), Some((0, 0x2a, 0, 0)));
        assert_eq!(pci_key("10000:01:1f.7"), Some((0x10000, 1, 0x1f, 7)));
        assert!(pci_key("0000:9a:00.0") < pci_key("10000:00:00.0"));
        for bad in [
            "",
            "0000:2a:00",
            "0000:2a:00.0:1",
            "x:00:00.0",
            "0000:100:00.0",
        ] {
            assert_eq!(pci_key(bad), None, "{bad}");
        }
    }

    #[test]
    fn hex_ids_and_nodes() {
        let p = Path::new("/x/vendor");
        assert_eq!(parse_hex_id(p, "0x10de\n").unwrap(), 0x10de);
        assert_eq!(parse_hex_id(p, "0x030200\n\0").unwrap(), 0x030200);
        let msg = parse_hex_id(p, "10de\n").unwrap_err().to_string();
        assert!(msg.contains("/x/vendor") && msg.contains("10de"), "{msg}");
        let n = Path::new("/x/numa_node");
        assert_eq!(parse_numa_node(n, "-1\n").unwrap(), None);
        assert_eq!(parse_numa_node(n, "3\n").unwrap(), Some(3));
        let msg = parse_numa_node(n, "-2\n").unwrap_err().to_string();
        assert!(msg.contains("/x/numa_node") && msg.contains("-2"), "{msg}");
    }

    #[test]
    fn cpu_masks_read_most_significant_word_first() {
        let p = Path::new("/x/local_cpus");
        assert_eq!(
            parse_cpu_mask(p, "0000,00000000,00000000,00000000,00000000,0000ffff\n").unwrap(),
            parse_cpu_list("0-15").unwrap()
        );
        assert_eq!(
            parse_cpu_mask(p, "0000,00000000,000000ff,ff000000,00000000,00000000\n").unwrap(),
            parse_cpu_list("88-103").unwrap()
        );
        assert_eq!(
            parse_cpu_mask(p, "80000000,00000001").unwrap(),
            parse_cpu_list("0,63").unwrap()
        );
        for bad in ["", "xyz", "1,,2", "123456789", "0x1"] {
            let msg = parse_cpu_mask(p, bad).unwrap_err().to_string();
            assert!(msg.contains("/x/local_cpus"), "{msg}");
        }
        let past = format!("1{}", ",00000000".repeat(256));
        let msg = parse_cpu_mask(p, &past).unwrap_err().to_string();
        assert!(msg.contains("cpu 8192"), "{msg}");
    }

    #[test]
    fn lists_matching_functions_in_numeric_address_order() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        gpu(r, "10000:01:00.0", "0x030200\n", "1\n", "4-7\n");
        gpu(r, "0000:9a:00.0", "0x030201\n", "-1\n", "0-7\n");
        gpu(r, "0000:2a:00.0", "0x030200\n", "0\n", "0-3\n");
        // Same vendor, another class; another vendor, same class; no vendor; no class.
        device(
            r,
            "0000:05:00.0",
            &[("vendor", "0x10de\n"), ("class", "0x068000\n")],
        );
        device(
            r,
            "0000:06:00.0",
            &[("vendor", "0x1002\n"), ("class", "0x030200\n")],
        );
        device(r, "0000:07:00.0", &[("class", "0x030200\n")]);
        device(r, "0000:08:00.0", &[("vendor", "0x10de\n")]);
        // Not a PCI address: skipped.
        std::fs::write(pci_devices_dir(r).join("README"), "x").unwrap();
        let gpus = host_gpus(r, "0000:9a:00.0").unwrap();
        let addrs: Vec<&str> = gpus.iter().map(|g| g.address.as_str()).collect();
        assert_eq!(addrs, ["0000:2a:00.0", "0000:9a:00.0", "10000:01:00.0"]);
        assert_eq!(gpus[0].node, Some(0));
        assert_eq!(gpus[1].node, None);
        assert_eq!(gpus[2].local, Some(parse_cpu_list("4-7").unwrap()));
    }

    #[test]
    fn locality_falls_back_to_the_mask_then_none() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        device(
            r,
            "0000:01:00.0",
            &[
                ("vendor", "0x10de\n"),
                ("class", "0x030200\n"),
                ("local_cpus", "000000f0\n"),
            ],
        );
        device(
            r,
            "0000:02:00.0",
            &[("vendor", "0x10de\n"), ("class", "0x030200\n")],
        );
        let gpus = host_gpus(r, "0000:01:00.0").unwrap();
        assert_eq!(gpus[0].local, Some(parse_cpu_list("4-7").unwrap()));
        assert_eq!(gpus[0].node, None);
        assert_eq!(gpus[1].local, None);
    }

    #[cfg(unix)]
    #[test]
    fn follows_symlinked_entries() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        let real = r.join("sys/devices/pci0000:2a/0000:2a:00.0");
        std::fs::create_dir_all(&real).unwrap();
        std::fs::write(real.join("vendor"), "0x10de\n").unwrap();
        std::fs::write(real.join("class"), "0x030200\n").unwrap();
        std::fs::write(real.join("numa_node"), "1\n").unwrap();
        std::fs::create_dir_all(pci_devices_dir(r)).unwrap();
        std::os::unix::fs::symlink(
            "../../../devices/pci0000:2a/0000:2a:00.0",
            pci_devices_dir(r).join("0000:2a:00.0"),
        )
        .unwrap();
        let gpus = host_gpus(r, "0000:2a:00.0").unwrap();
        assert_eq!(gpus.len(), 1);
        assert_eq!(gpus[0].node, Some(1));
    }

    #[test]
    fn a_missing_like_is_a_not_found_error_naming_it() {
        let d = tempfile::tempdir().unwrap();
        let e = host_gpus(d.path(), "0000:2a:00.0").unwrap_err();
        assert!(is_not_found(&e));
        assert!(e.to_string().contains("0000:2a:00.0"), "{e}");
        let e = host_gpus(d.path(), "../../etc").unwrap_err();
        assert!(
            is_not_found(&e) && e.to_string().contains("../../etc"),
            "{e}"
        );
    }

    #[test]
    fn a_like_without_vendor_names_the_vendor_file() {
        let d = tempfile::tempdir().unwrap();
        device(d.path(), "0004:05:00.0", &[("class", "0x030000\n")]);
        let e = host_gpus(d.path(), "0004:05:00.0").unwrap_err();
        assert!(is_not_found(&e));
        assert!(e.to_string().contains("0004:05:00.0/vendor"), "{e}");
    }

    #[test]
    fn a_vendor_is_read_only_for_a_matching_class() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        gpu(r, "0000:01:00.0", "0x030200\n", "0\n", "0-3\n");
        // A bridge whose vendor file would not parse: its class already rules it out.
        device(
            r,
            "0000:00:00.0",
            &[("vendor", "bogus\n"), ("class", "0x060400\n")],
        );
        assert_eq!(host_gpus(r, "0000:01:00.0").unwrap().len(), 1);
        // A display-class function's vendor is read, and a bad one is an error quoting it.
        device(
            r,
            "0000:02:00.0",
            &[("vendor", "bogus\n"), ("class", "0x030200\n")],
        );
        let msg = host_gpus(r, "0000:01:00.0").unwrap_err().to_string();
        assert!(
            msg.contains("0000:02:00.0/vendor") && msg.contains("bogus"),
            "{msg}"
        );
    }

    #[test]
    fn malformed_files_are_errors_quoting_them() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        gpu(r, "0000:01:00.0", "0x030200\n", "zero\n", "0-3\n");
        let e = host_gpus(r, "0000:01:00.0").unwrap_err();
        assert!(!is_not_found(&e));
        let msg = e.to_string();
        assert!(
            msg.contains("0000:01:00.0/numa_node") && msg.contains("zero"),
            "{msg}"
        );
    }

    #[test]
    fn power9_local_cpus_masks_decode() {
        let r = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/topologies/hwloc-power9-ac922-6xv100");
        let decode = |addr: &str| {
            let p = pci_devices_dir(&r).join(addr).join("local_cpus");
            parse_cpu_mask(&p, &std::fs::read_to_string(&p).unwrap()).unwrap()
        };
        for addr in ["0004:05:00.0", "0004:06:00.0", "0006:00:00.0"] {
            assert_eq!(decode(addr), parse_cpu_list("0-15").unwrap(), "{addr}");
        }
        for addr in ["0007:00:00.0", "0035:04:00.0", "0035:05:00.0"] {
            assert_eq!(decode(addr), parse_cpu_list("88-103").unwrap(), "{addr}");
        }
    }
}
