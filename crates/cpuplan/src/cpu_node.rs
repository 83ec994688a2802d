//! The host's NUMA nodes (online CPUs, each node's CPUs, the distance table), and a GPU's CPU
//! node: where a GPU whose NUMA node has no CPUs is placed.
//!
//! On Grace Hopper and Grace Blackwell hosts (and POWER9 with NVLink V100s) a GPU's memory is
//! a NUMA node of its own, with memory and no CPUs, and the GPU's PCI function may name that
//! node with an empty `local_cpulist`. Such a GPU belongs to the nearest node that has online
//! CPUs by the kernel's distance table (`/sys/devices/system/node/nodeN/distance`: one column
//! per node of `node/online`, in that order); among nodes at the same distance the lowest node
//! number wins, and the choice says so. A GPU is then ranked among the GPUs that land on the
//! same node, and picks its cores from that node's CPUs, so the seed's rule works unchanged.
//!
//! The node table is read only when a GPU needs it ([`cpu_nodes`]), never fails the read (a
//! missing or malformed file becomes the why of an unplaced GPU), and the choice itself
//! ([`choose`]) is pure.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cpuset::{parse_cpu_list, CpuSet};
use crate::error::{Error, Result};
use crate::fsutil::{read_cpu_list_optional, read_optional, under};

/// The host's online CPUs: `<root>/sys/devices/system/cpu/online`, else the `cpuN` directories there (empty if neither exists).
pub fn online_cpus(root: &Path) -> Result<CpuSet> {
    let cpu_dir = under(root, "/sys/devices/system/cpu");
    if let Some(set) = read_cpu_list_optional(&cpu_dir.join("online"))? {
        return Ok(set);
    }
    let entries = match std::fs::read_dir(&cpu_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(CpuSet::new()),
        Err(source) => {
            return Err(Error::Io {
                path: cpu_dir,
                source,
            })
        }
    };
    let mut set = CpuSet::new();
    for entry in entries {
        let entry = entry.map_err(|source| Error::Io {
            path: cpu_dir.clone(),
            source,
        })?;
        let name = entry.file_name();
        let Some(digits) = name.to_str().and_then(|n| n.strip_prefix("cpu")) else {
            continue;
        };
        if !digits.is_empty() && digits.len() <= 5 && digits.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(cpu) = digits.parse::<usize>() {
                set.insert(cpu);
            }
        }
    }
    Ok(set)
}

/// One NUMA node as sysfs lists it: its id and its online CPUs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NumaNode {
    /// The node id (`N` of `nodeN`).
    pub id: u32,
    /// Its online CPUs (`cpulist` within the online CPUs).
    pub cpus: CpuSet,
}

/// The host's NUMA nodes with online CPUs, by id (`<root>/sys/devices/system/node/nodeN/cpulist`); empty without them.
pub fn numa_nodes(root: &Path) -> Result<Vec<NumaNode>> {
    let online = online_cpus(root)?;
    let node_dir = under(root, "/sys/devices/system/node");
    let entries = match std::fs::read_dir(&node_dir) {
        Ok(entries) => entries,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(Vec::new())
        }
        Err(source) => {
            return Err(Error::Io {
                path: node_dir,
                source,
            })
        }
    };
    let mut nodes = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(id) = name
            .to_str()
            .and_then(|n| n.strip_prefix("node"))
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(cpus) = read_cpu_list_optional(&e.path().join("cpulist"))? {
            let cpus = cpus.intersection(&online);
            if !cpus.is_empty() {
                nodes.push(NumaNode { id, cpus });
            }
        }
    }
    nodes.sort_by_key(|n| n.id);
    Ok(nodes)
}

/// Where a GPU whose NUMA node has no CPUs (or whose `local_cpulist` is empty) is placed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CpuNode {
    /// The nearest node with CPUs by the distance table, and its online CPUs.
    Nearest {
        /// The node it is placed on.
        node: u32,
        /// That node's online CPUs: the cores the GPU picks from.
        cpus: CpuSet,
        /// How a tie was settled (`None` where one node was nearest).
        note: Option<String>,
    },
    /// No distance says which node with CPUs is nearest: the GPU stays unplaced.
    Unplaced {
        /// Why, naming the file and value.
        why: String,
    },
}

/// The part of `/sys/devices/system/node` a CPU-less GPU's placement reads: the nodes with CPUs,
/// the online nodes (the distance columns) and the distance rows asked for, each either read or
/// the line that says why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeTable {
    /// The nodes with online CPUs, by id.
    pub with_cpus: Vec<NumaNode>,
    /// Why the nodes' CPUs could not be read, where they could not.
    pub cpus_error: Option<String>,
    /// The online nodes in `node/online` order, or why not.
    pub online: Result<Vec<u32>, String>,
    /// The distance row of each node asked for, or why not.
    pub rows: Vec<(u32, Result<Vec<u32>, String>)>,
}

/// The largest distance the table may give a reachable node (ACPI's SLIT writes 255 for none).
const UNREACHABLE: u32 = 255;

/// `<root>/sys/devices/system/node`.
fn node_dir(root: &Path) -> PathBuf {
    under(root, "/sys/devices/system/node")
}

/// A `nodeN/distance` row: whitespace-separated distances.
fn parse_row(path: &Path, text: &str) -> Result<Vec<u32>, String> {
    let body = text.trim_end_matches('\0').trim();
    let bad = || {
        format!(
            "{}: expected whitespace-separated distances: {}",
            path.display(),
            crate::quoted(text)
        )
    };
    if body.is_empty() {
        return Err(bad());
    }
    body.split_ascii_whitespace()
        .map(|w| {
            w.parse::<u32>()
                .ok()
                .filter(|_| w.len() <= 9 && w.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect::<Option<Vec<u32>>>()
        .ok_or_else(bad)
}

impl NodeTable {
    /// The node table under `root`, with the distance rows of `rows` (no file is read for them
    /// where `rows` is empty). Never an error: what cannot be read is said in the table.
    pub fn read(root: &Path, rows: &[u32]) -> NodeTable {
        let (with_cpus, cpus_error) = match numa_nodes(root) {
            Ok(nodes) => (nodes, None),
            Err(e) => (Vec::new(), Some(e.to_string())),
        };
        let mut table = NodeTable {
            with_cpus,
            cpus_error,
            online: Ok(Vec::new()),
            rows: Vec::new(),
        };
        table.read_rows(root, rows);
        table
    }

    /// Reads `node/online` and the rows of `ids` not yet held.
    fn read_rows(&mut self, root: &Path, ids: &[u32]) {
        if ids.is_empty() {
            return;
        }
        let dir = node_dir(root);
        let online_path = dir.join("online");
        self.online = match read_optional(&online_path) {
            Ok(Some(text)) => parse_cpu_list(&text)
                .map(|set| set.iter().map(|n| n as u32).collect())
                .map_err(|e| format!("{}: {e}", online_path.display())),
            Ok(None) => Err(format!("no {}", online_path.display())),
            Err(e) => Err(e.to_string()),
        };
        for &id in ids {
            let path = dir.join(format!("node{id}")).join("distance");
            let row = match read_optional(&path) {
                Ok(Some(text)) => parse_row(&path, &text),
                Ok(None) => Err(format!("no distance table ({} is missing)", path.display())),
                Err(e) => Err(e.to_string()),
            };
            self.rows.push((id, row));
        }
    }

    /// The node `id`'s online CPUs, where it has some.
    fn cpus_of(&self, id: u32) -> Option<&CpuSet> {
        self.with_cpus.iter().find(|n| n.id == id).map(|n| &n.cpus)
    }
}

/// Whether a GPU on `node` with `local` CPUs may need the node table: it names a node and
/// sysfs gives it no local CPUs (no `local_cpulist`, or an empty one).
fn may_need(node: Option<u32>, local: Option<&CpuSet>) -> Option<u32> {
    node.filter(|_| local.is_none_or(CpuSet::is_empty))
}

/// Whether a GPU on `node` with `local` CPUs is placed by the table: its `local_cpulist` is
/// empty, or it has none and its node has no CPUs.
fn needs(table: &NodeTable, node: u32, local: Option<&CpuSet>) -> bool {
    match local {
        Some(l) => l.is_empty(),
        None => table.cpus_of(node).is_none(),
    }
}

/// The CPU node of each GPU given as `(node, local CPUs)`: `None` for one whose locality sysfs
/// gives (the seed's rule applies as is), else where it is placed. The node table is read
/// under `root` only where some GPU needs it; without a `root` such a GPU is unplaced.
pub(crate) fn cpu_nodes(
    root: Option<&Path>,
    gpus: &[(Option<u32>, Option<&CpuSet>)],
) -> Vec<Option<CpuNode>> {
    let mut out = vec![None; gpus.len()];
    if gpus.iter().all(|(n, l)| may_need(*n, *l).is_none()) {
        return out;
    }
    let Some(root) = root else {
        for (slot, (node, local)) in out.iter_mut().zip(gpus) {
            if let Some(n) = may_need(*node, *local) {
                *slot = Some(CpuNode::Unplaced {
                    why: format!("node {n} has no CPUs for it and no node table is beside the PCI devices directory"),
                });
            }
        }
        return out;
    };
    let mut table = NodeTable::read(root, &[]);
    let mut ids: Vec<u32> = gpus
        .iter()
        .filter_map(|(n, l)| may_need(*n, *l).filter(|n| needs(&table, *n, *l)))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    table.read_rows(root, &ids);
    for (slot, (node, local)) in out.iter_mut().zip(gpus) {
        if let Some(n) = may_need(*node, *local).filter(|n| needs(&table, *n, *local)) {
            *slot = Some(choose(n, &table));
        }
    }
    out
}

/// Where a GPU on `node` (a node without CPUs, or one whose GPU has an empty `local_cpulist`)
/// is placed, by `table`: `node` itself where it has CPUs, else the node with CPUs at the
/// least distance in `node`'s row, the lowest number among equals.
pub fn choose(node: u32, table: &NodeTable) -> CpuNode {
    if let Some(cpus) = table.cpus_of(node) {
        return CpuNode::Nearest {
            node,
            cpus: cpus.clone(),
            note: None,
        };
    }
    let unplaced = |why: String| CpuNode::Unplaced {
        why: format!("node {node} has no CPUs and {why}"),
    };
    if let Some(e) = &table.cpus_error {
        return unplaced(format!("the nodes' CPUs could not be read ({e})"));
    }
    if table.with_cpus.is_empty() {
        return unplaced("no node has online CPUs".into());
    }
    let online = match &table.online {
        Ok(online) => online,
        Err(e) => return unplaced(format!("the distance columns are unknown ({e})")),
    };
    let row = match table.rows.iter().find(|(id, _)| *id == node) {
        Some((_, Ok(row))) => row,
        Some((_, Err(e))) => return unplaced(e.clone()),
        None => return unplaced("its distance row was not read".into()),
    };
    if row.len() != online.len() {
        return unplaced(format!(
            "node{node}/distance lists {} distances for the {} online nodes {}",
            row.len(),
            online.len(),
            crate::quoted(&format!("{online:?}"))
        ));
    }
    let mut best: Vec<(u32, u32)> = Vec::new();
    for n in &table.with_cpus {
        let Some(d) = online.iter().position(|o| *o == n.id).map(|i| row[i]) else {
            continue;
        };
        if d >= UNREACHABLE {
            continue;
        }
        match best.first() {
            Some(&(_, b)) if d > b => {}
            Some(&(_, b)) if d == b => best.push((n.id, d)),
            _ => best = vec![(n.id, d)],
        }
    }
    let Some(&(chosen, distance)) = best.first() else {
        return unplaced(format!(
            "node{node}/distance gives no node with CPUs a distance below {UNREACHABLE}"
        ));
    };
    let note = (best.len() > 1).then(|| {
        let tied: Vec<String> = best.iter().map(|(id, _)| id.to_string()).collect();
        format!(
            "node {node} is at distance {distance} from nodes {} alike: node {chosen}, the lowest number",
            tied.join(", ")
        )
    });
    CpuNode::Nearest {
        node: chosen,
        cpus: table.cpus_of(chosen).cloned().unwrap_or_default(),
        note,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &str) -> CpuSet {
        parse_cpu_list(s).unwrap()
    }

    /// Grace sockets 0 and 1; GPU memory nodes 2 and 3 near 0, 4 near 1.
    fn table(rows: Vec<(u32, Result<Vec<u32>, String>)>) -> NodeTable {
        NodeTable {
            with_cpus: vec![
                NumaNode {
                    id: 0,
                    cpus: set("0-71"),
                },
                NumaNode {
                    id: 1,
                    cpus: set("72-143"),
                },
            ],
            cpus_error: None,
            online: Ok(vec![0, 1, 2, 3, 4]),
            rows,
        }
    }

    #[test]
    fn the_nearest_node_with_cpus_wins() {
        let t = table(vec![
            (2, Ok(vec![80, 120, 10, 120, 120])),
            (4, Ok(vec![120, 80, 120, 120, 10])),
        ]);
        assert_eq!(
            choose(2, &t),
            CpuNode::Nearest {
                node: 0,
                cpus: set("0-71"),
                note: None
            }
        );
        assert!(matches!(
            choose(4, &t),
            CpuNode::Nearest {
                node: 1,
                note: None,
                ..
            }
        ));
        assert!(matches!(
            choose(1, &t),
            CpuNode::Nearest {
                node: 1,
                note: None,
                ..
            }
        ));
    }

    #[test]
    fn a_tie_goes_to_the_lowest_node_and_says_so() {
        let t = table(vec![(3, Ok(vec![80, 80, 120, 10, 120]))]);
        let CpuNode::Nearest { node, note, .. } = choose(3, &t) else {
            panic!("unplaced");
        };
        assert_eq!(node, 0);
        let note = note.unwrap();
        assert!(
            note.contains("nodes 0, 1") && note.contains("node 0, the lowest"),
            "{note}"
        );
    }

    #[test]
    fn no_usable_distance_leaves_the_gpu_unplaced_saying_why() {
        let why = |t: &NodeTable, n: u32| match choose(n, t) {
            CpuNode::Unplaced { why } => why,
            other => panic!("{other:?}"),
        };
        let missing = table(vec![(2, Err("no distance table (x is missing)".into()))]);
        assert!(
            why(&missing, 2).contains("no distance table"),
            "{}",
            why(&missing, 2)
        );
        let short = table(vec![(2, Ok(vec![80, 120]))]);
        assert!(
            why(&short, 2).contains("lists 2 distances for the 5"),
            "{}",
            why(&short, 2)
        );
        let far = table(vec![(2, Ok(vec![255, 255, 10, 255, 255]))]);
        assert!(why(&far, 2).contains("below 255"), "{}", why(&far, 2));
        let mut none = table(vec![(2, Ok(vec![80, 120, 10, 120, 120]))]);
        none.with_cpus.clear();
        assert!(why(&none, 2).contains("no node has online CPUs"));
        let mut cols = table(vec![(2, Ok(vec![80, 120, 10, 120, 120]))]);
        cols.online = Err("no node/online".into());
        assert!(why(&cols, 2).contains("distance columns are unknown"));
    }

    #[test]
    fn the_power9_dumps_gpu_memory_nodes_have_no_distance_table() {
        // A real dump: nodes 0 and 8 with CPUs, 250-255 GPU memory without; the dump kept no
        // `distance` files, so a GPU on 250 stays unplaced, naming the missing file.
        let r = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/topologies/hwloc-power9-ac922-6xv100");
        let t = NodeTable::read(&r, &[250]);
        let ids: Vec<u32> = t.with_cpus.iter().map(|n| n.id).collect();
        assert_eq!(ids, [0, 8]);
        assert_eq!(t.online, Ok(vec![0, 8, 250, 251, 252, 253, 254, 255]));
        let CpuNode::Unplaced { why } = choose(250, &t) else {
            panic!("placed without a distance");
        };
        assert!(
            why.starts_with("node 250 has no CPUs and no distance table")
                && why.contains("node250/distance is missing"),
            "{why}"
        );
        assert!(matches!(choose(8, &t), CpuNode::Nearest { node: 8, .. }));
    }

    #[test]
    fn rows_parse_or_quote_the_file() {
        let p = Path::new("/x/node2/distance");
        assert_eq!(parse_row(p, "80 120 10\n\0").unwrap(), vec![80, 120, 10]);
        for bad in ["", "\n", "10 x 20", "10 -1", "1234567890"] {
            let e = parse_row(p, bad).unwrap_err();
            assert!(e.contains("/x/node2/distance"), "{e}");
        }
    }

    #[test]
    fn gpus_with_local_cpus_need_no_table_and_one_without_a_table_is_unplaced() {
        let d = tempfile::tempdir().unwrap();
        // No sysfs at all: GPUs with local CPUs need nothing and read nothing.
        let l = set("0-3");
        assert_eq!(
            cpu_nodes(Some(d.path()), &[(Some(0), Some(&l)), (None, None)]),
            vec![None, None]
        );
        // A GPU on a node with an empty local list, and no node table: unplaced, saying so.
        let empty = CpuSet::new();
        let got = cpu_nodes(Some(d.path()), &[(Some(2), Some(&empty))]);
        let Some(CpuNode::Unplaced { why }) = &got[0] else {
            panic!("{got:?}");
        };
        assert!(why.contains("node 2 has no CPUs"), "{why}");
        let got = cpu_nodes(None, &[(Some(2), Some(&empty))]);
        assert!(matches!(&got[0], Some(CpuNode::Unplaced { .. })), "{got:?}");
    }
}
