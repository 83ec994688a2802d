//! AMD's kfd topology (`/sys/class/kfd/kfd/topology/nodes/<n>/properties`): the PCI GPU a DRM
//! render minor is on, as ROCm maps an MI300 partition (`amdgpu_xcp_<n>`, a platform device
//! with no PCI parent in sysfs) back to its GPU.
//!
//! Each GPU node's `properties` holds `name value` lines in decimal, among them
//! `drm_render_minor` (0 on CPU nodes), `location_id` (`bus << 8 | devfn`; kernels with
//! partitions also carry the partition id in bits 31:28, or ORed into the low bits on early
//! ones) and `domain` (absent on older kernels: 0). As ROCm's device plugin does, only the bus
//! (bits 15:8) and the slot (bits 7:3) are taken, function 0 assumed; the address must then be
//! a PCI function sysfs has. A topology that cannot be read (the kernel answers `EPERM` to a
//! reader whose device cgroup does not allow the GPU) places nothing, and says why.

use std::io::ErrorKind;
use std::path::Path;

use crate::fsutil::read_file;
use crate::gpus::pci_devices_dir;
use crate::quote::quoted;

/// Where the kfd topology's nodes are, under the topology root.
pub const TOPOLOGY_DIR: &str = "sys/class/kfd/kfd/topology/nodes";

/// The most nodes looked at (a host has a CPU node per socket and a node per GPU partition).
const MAX_NODES: usize = 1024;

/// The most bytes of a `properties` file read (the kernel writes about 1.5 KiB).
const MAX_PROPERTIES: usize = 64 << 10;

/// One GPU node of the kfd topology: its render minor and the PCI function it is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KfdNode {
    /// The node's directory name (`3`).
    pub node: String,
    /// `drm_render_minor`: N of `/dev/dri/renderDN`.
    pub render_minor: u64,
    /// The PCI address `location_id` and `domain` give, `0000:1b:00.0`.
    pub address: String,
}

/// The PCI address of a kfd node from its `domain` and `location_id`, as ROCm reads them:
/// `domain:bus:slot.0`, the function and the partition bits ignored.
pub fn pci_address(domain: u64, location_id: u64) -> String {
    let bus = (location_id >> 8) & 0xff;
    let slot = (location_id >> 3) & 0x1f;
    format!("{domain:04x}:{bus:02x}:{slot:02x}.0")
}

/// `drm_render_minor`, `location_id` and `domain` of a `properties` file's text, where given.
pub fn parse_properties(text: &str) -> (Option<u64>, Option<u64>, Option<u64>) {
    let (mut render, mut location, mut domain) = (None, None, None);
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some(key), Some(value), None) = (words.next(), words.next(), words.next()) else {
            continue;
        };
        let Ok(value) = value.parse::<u64>() else {
            continue;
        };
        match key {
            "drm_render_minor" => render = Some(value),
            "location_id" => location = Some(value),
            "domain" => domain = Some(value),
            _ => {}
        }
    }
    (render, location, domain)
}

/// The GPU nodes of the kfd topology under `topology_root` (none without kfd), or why it
/// cannot be read.
pub fn kfd_nodes(topology_root: &Path) -> Result<Vec<KfdNode>, String> {
    let dir = topology_root.join(TOPOLOGY_DIR);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
            return Ok(Vec::new())
        }
        Err(e) => return Err(format!("cannot read {}: {e}", dir.display())),
    };
    let mut nodes = Vec::new();
    for entry in entries.take(MAX_NODES) {
        let entry = entry.map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        let path = entry.path().join("properties");
        let text = match read_file(&path, MAX_PROPERTIES) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        let (render, location, domain) = parse_properties(&text);
        let (Some(render), Some(location)) = (render, location) else {
            continue;
        };
        if render == 0 {
            continue; // a CPU node
        }
        nodes.push(KfdNode {
            node: entry.file_name().to_string_lossy().into_owned(),
            render_minor: render,
            address: pci_address(domain.unwrap_or(0), location),
        });
    }
    nodes.sort_by(|a, b| a.node.cmp(&b.node));
    Ok(nodes)
}

/// The kfd topology's GPU nodes, read at most once.
#[derive(Debug, Clone, Default)]
pub(crate) struct Topology {
    nodes: Option<Result<Vec<KfdNode>, String>>,
}

impl Topology {
    /// The PCI GPU that render minor `minor` is on, confirmed in sysfs; `Err(why)` where the
    /// topology cannot place it.
    pub(crate) fn gpu_of_render_minor(
        &mut self,
        root: &Path,
        minor: i64,
    ) -> Result<String, String> {
        let nodes = self.nodes.get_or_insert_with(|| kfd_nodes(root));
        let nodes = nodes.as_ref().map_err(Clone::clone)?;
        let Some(node) = nodes
            .iter()
            .find(|n| i64::try_from(n.render_minor) == Ok(minor))
        else {
            return Err(format!(
                "no node of the kfd topology ({}) has drm_render_minor {minor}",
                root.join(TOPOLOGY_DIR).display()
            ));
        };
        if !pci_devices_dir(root).join(&node.address).exists() {
            return Err(format!(
                "kfd node {} places it at PCI {}, which {} does not have",
                quoted(&node.node),
                node.address,
                pci_devices_dir(root).display()
            ));
        }
        Ok(node.address.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_id_as_rocm_reads_it_with_either_kernel_s_partition_bits() {
        // Bus 0x1b, slot 0, function 0: 0x1b00 = 6912.
        assert_eq!(pci_address(0, 6912), "0000:1b:00.0");
        // Partition 3 in bits 31:28 (newer kernels), or ORed into the low bits (early ones).
        assert_eq!(pci_address(0, 6912 | (3 << 28)), "0000:1b:00.0");
        assert_eq!(pci_address(0, 6912 | 3), "0000:1b:00.0");
        // Slot 2 (devfn 0x10), domain 1.
        assert_eq!(pci_address(1, 0x9d10), "0001:9d:02.0");
    }

    #[test]
    fn properties_are_name_value_lines() {
        let text = "cpu_cores_count 0\nsimd_count 304\nvendor_id 4098\ndevice_id 29856\n\
                    location_id 6912\ndomain 0\ndrm_render_minor 130\nhive_id 0\nbogus line here\n";
        assert_eq!(parse_properties(text), (Some(130), Some(6912), Some(0)));
        assert_eq!(parse_properties("cpu_cores_count 96\n"), (None, None, None));
    }
}
