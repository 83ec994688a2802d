//! The node drawn as `explain` draws a container: one row of cells per NUMA node, one cell per
//! core, each planned container's cores marked with its letter, the GPUs under their node with
//! the claim on each, then each container's plan. `cpuplan status` gathers what it draws.

use std::fmt::Write;

use cpuplan::CpuSet;
use serde::Serialize;

use crate::logging::escape;
use crate::read::host::NodeCores;

/// The node as `cpuplan status` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Picture {
    /// The NUMA nodes (and the CPUs on none), each with its cores.
    pub nodes: Vec<Node>,
    /// The host's GPUs and any other device a claim names, in address order.
    pub gpus: Vec<Gpu>,
    /// Every planned container found, in the order of their letters.
    pub containers: Vec<Planned>,
    /// What could not be read (one line each); the picture shows the rest.
    pub problems: Vec<String>,
}

/// One NUMA node.
#[derive(Debug, Clone, Serialize)]
pub struct Node {
    /// Its id, `None` for CPUs sysfs places on no node.
    pub node: Option<u32>,
    /// Its online CPUs.
    pub cpus: CpuSet,
    /// Its cores' hardware threads.
    #[serde(skip)]
    pub cores: Vec<CpuSet>,
}

impl From<NodeCores> for Node {
    fn from(n: NodeCores) -> Node {
        Node {
            node: n.node,
            cpus: n.cpus,
            cores: n.cores,
        }
    }
}

/// A GPU and the claim on it.
#[derive(Debug, Clone, Serialize)]
pub struct Gpu {
    /// Its PCI address.
    pub address: String,
    /// Its NUMA node.
    pub node: Option<u32>,
    /// The claim on it, where there is one.
    pub claim: Option<GpuClaim>,
}

/// Who holds a GPU's claim.
#[derive(Debug, Clone, Serialize)]
pub struct GpuClaim {
    /// The container id.
    pub container: String,
    /// The claim's pid: the container's init (the hook's), the plugin (the NRI plugin's).
    pub pid: u32,
    /// Whether that pid still runs.
    pub live: bool,
    /// The container's letter, where it is one of the planned containers.
    pub mark: Option<char>,
}

/// One planned container.
#[derive(Debug, Clone, Serialize)]
pub struct Planned {
    /// Its letter in the drawing.
    pub mark: char,
    /// Its id.
    pub container: String,
    /// Which route planned it: `hook` or `nri`.
    pub route: &'static str,
    /// Its init's pid (the hook's containers).
    pub pid: Option<u32>,
    /// The CPUs its cgroup lets it use now, where its pid says (else its plan's mask).
    pub cpuset: CpuSet,
    /// Each worker's GPU (`None`: a CPU worker) and pinned CPUs (`None`: unpinned).
    pub workers: Vec<Worker>,
    /// The API server's pinned CPUs.
    pub result: Option<CpuSet>,
    /// The GPUs it claims.
    pub gpus: Vec<String>,
    /// Its plan against its cgroup now: `current`, `stale: ...`, or why it was not checked.
    pub plan: String,
}

/// One worker of a planned container.
#[derive(Debug, Clone, Serialize)]
pub struct Worker {
    /// Its GPU, `None` for a CPU worker.
    pub device: Option<String>,
    /// Its pinned CPUs, `None` when unpinned.
    pub cpus: Option<CpuSet>,
    /// The CPUs the NRI plugin places its processes on at their exec (its `plan.json`'s
    /// `worker_placement`), `None` where they keep the container's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placed: Option<CpuSet>,
}

/// The line under a container whose worker processes the NRI plugin places.
const PLACED_NOTE: &str = "  each worker's processes are placed at their exec by the NRI plugin (by their rank variable: LOCAL_RANK and the like); the rest keep the container's cpus\n";

/// The letter of the `i`th container: `A`..`Z`, then `#` for the rest.
pub fn mark(i: usize) -> char {
    (b'A'..=b'Z').nth(i).map_or('#', char::from)
}

/// What the cells mean, printed above the nodes.
pub const LEGEND: &str = "\
legend: one cell per core
  A B C ...  a core a container's workers or API server are pinned to (its letter, listed below)
  a b c ...  a core of a container's CPUs, left to its pools
  *          a core in more than one container's CPUs
  .          a core no planned container uses
";

impl Picture {
    /// The cell of `core`: the letter of the one container whose CPUs hold it (upper case where
    /// it pins it), `*` where several hold it, `.` where none.
    fn cell(&self, core: &CpuSet) -> char {
        let mut holders = self.containers.iter().filter(|c| c.cpuset.intersects(core));
        let Some(first) = holders.next() else {
            return '.';
        };
        if holders.next().is_some() {
            return '*';
        }
        let pinned = first
            .workers
            .iter()
            .filter_map(|w| w.cpus.as_ref())
            .chain(first.result.as_ref())
            .any(|cpus| cpus.intersects(core));
        match pinned {
            true => first.mark,
            false => first.mark.to_ascii_lowercase(),
        }
    }

    /// The drawing. Every string read from a container's plan, a claim or a plan directory (an
    /// id, a device, a problem) is printed through [`escape`]: a container's own `plan.json`
    /// is the tenant's, and no control character of it reaches the operator's terminal.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let cpus: usize = self.nodes.iter().map(|n| n.cpus.len()).sum();
        let cores: usize = self.nodes.iter().map(|n| n.cores.len()).sum();
        let claimed = self.gpus.iter().filter(|g| g.claim.is_some()).count();
        let _ = writeln!(
            s,
            "node: {} NUMA node(s), {cpus} CPUs, {cores} cores; {} planned container(s); {claimed} of {} GPU(s) claimed",
            self.nodes.iter().filter(|n| n.node.is_some()).count(),
            self.containers.len(),
            self.gpus.len(),
        );
        s.push_str(LEGEND);
        for n in &self.nodes {
            let label = n
                .node
                .map_or_else(|| "no node".into(), |id| format!("node {id}"));
            let _ = writeln!(s, "{label}: cpus {}", n.cpus);
            for chunk in n.cores.chunks(64) {
                let line: String = chunk.iter().map(|core| self.cell(core)).collect();
                let first = chunk.first().and_then(|c| c.first()).unwrap_or(0);
                let _ = writeln!(s, "  {:>5} {line}", format!("c{first}"));
            }
            for g in self
                .gpus
                .iter()
                .filter(|g| g.node.is_some() && g.node == n.node)
            {
                s.push_str(&gpu_line(g));
            }
        }
        for g in self.gpus.iter().filter(|g| {
            !self
                .nodes
                .iter()
                .any(|n| n.node.is_some() && n.node == g.node)
        }) {
            s.push_str(&gpu_line(g));
        }
        for c in &self.containers {
            let pid = c.pid.map_or_else(String::new, |p| format!(", pid {p}"));
            let _ = writeln!(
                s,
                "container {} [{}] ({}{pid}): cpus {}, plan {}",
                escape(&c.container),
                c.mark,
                c.route,
                c.cpuset,
                escape(&c.plan)
            );
            for (i, w) in c.workers.iter().enumerate() {
                let dev = w.device.as_deref().map_or("cpu worker".into(), escape);
                let pinned = w
                    .cpus
                    .as_ref()
                    .map_or_else(|| "unpinned".into(), |cpus| format!("cpus {cpus}"));
                let placed = w.placed.as_ref().map_or_else(String::new, |cpus| {
                    format!(", its processes placed on cpus {cpus}")
                });
                let _ = writeln!(s, "  worker {i} GPU {dev}: {pinned}{placed}");
            }
            if let Some(r) = &c.result {
                let _ = writeln!(s, "  API server: cpus {r}");
            }
            if c.workers.iter().any(|w| w.placed.is_some()) {
                s.push_str(PLACED_NOTE);
            }
        }
        if self.containers.is_empty() {
            s.push_str("no planned containers (no live claim, plan record or NRI plan)\n");
        }
        for p in &self.problems {
            let _ = writeln!(s, "problem: {}", escape(p));
        }
        s
    }
}

/// `  gpu ADDR: free`, or who claims it.
fn gpu_line(g: &Gpu) -> String {
    let node = g
        .node
        .map_or_else(|| "no node".into(), |n| format!("node {n}"));
    match &g.claim {
        None => format!("  gpu {} ({node}): free\n", escape(&g.address)),
        Some(c) => format!(
            "  gpu {} ({node}): claimed by container {}{} (pid {}, {})\n",
            escape(&g.address),
            escape(&c.container),
            c.mark.map_or_else(String::new, |m| format!(" [{m}]")),
            c.pid,
            if c.live { "live" } else { "stale" }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(l: &str) -> CpuSet {
        cpuplan::parse_cpu_list(l).unwrap()
    }

    #[test]
    fn cells_mark_pinned_cores_upper_case_the_rest_lower_and_shared_with_a_star() {
        let cores: Vec<CpuSet> = (0..6).map(|c| set(&format!("{c},{}", c + 6))).collect();
        let a = Planned {
            mark: 'A',
            container: "a".into(),
            route: "hook",
            pid: Some(1),
            cpuset: set("0-2,6-8"),
            workers: vec![Worker {
                device: Some("0000:18:00.0".into()),
                cpus: Some(set("0,6")),
                placed: None,
            }],
            result: Some(set("2,8")),
            gpus: vec!["0000:18:00.0".into()],
            plan: "current".into(),
        };
        let mut b = a.clone();
        (b.mark, b.container, b.cpuset, b.workers, b.result) =
            ('B', "b".into(), set("2-3,8-9"), Vec::new(), None);
        let p = Picture {
            nodes: vec![Node {
                node: Some(0),
                cpus: set("0-11"),
                cores,
            }],
            gpus: vec![Gpu {
                address: "0000:18:00.0".into(),
                node: Some(0),
                claim: Some(GpuClaim {
                    container: "a".into(),
                    pid: 1,
                    live: true,
                    mark: Some('A'),
                }),
            }],
            containers: vec![a, b],
            problems: Vec::new(),
        };
        let text = p.text();
        assert!(text.contains("     c0 Aa*b..\n"), "{text}");
        assert!(
            text.contains("  gpu 0000:18:00.0 (node 0): claimed by container a [A] (pid 1, live)"),
            "{text}"
        );
        assert!(text.contains("container a [A] (hook, pid 1): cpus 0-2,6-8, plan current"));
        assert!(text.contains("  worker 0 GPU 0000:18:00.0: cpus 0,6\n  API server: cpus 2,8\n"));
        assert!(!text.contains(PLACED_NOTE), "{text}");
        assert_eq!(mark(25), 'Z');
        assert_eq!(mark(26), '#');
    }

    #[test]
    fn a_placed_worker_shows_its_placement_cpus_and_the_plugin_s_note() {
        let worker = |d: &str, cpus: &str, placed: Option<&str>| Worker {
            device: Some(d.into()),
            cpus: Some(set(cpus)),
            placed: placed.map(set),
        };
        let c = Planned {
            mark: 'A',
            container: "c\u{1b}1".into(),
            route: "nri",
            pid: None,
            cpuset: set("0-11"),
            workers: vec![
                worker("0000:18:00.0", "0", Some("0-5")),
                worker("0000:2a:00.0", "6", None),
            ],
            result: Some(set("11")),
            gpus: Vec::new(),
            plan: "generation 1".into(),
        };
        let p = Picture {
            nodes: Vec::new(),
            gpus: Vec::new(),
            containers: vec![c],
            problems: Vec::new(),
        };
        let text = p.text();
        assert!(
            text.contains(&format!(
                "container c\\u{{1b}}1 [A] (nri): cpus 0-11, plan generation 1\n  worker 0 GPU 0000:18:00.0: cpus 0, its processes placed on cpus 0-5\n  worker 1 GPU 0000:2a:00.0: cpus 6\n  API server: cpus 11\n{PLACED_NOTE}"
            )),
            "{text}"
        );
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["containers"][0]["workers"][0]["placed"], "0-5");
        assert!(json["containers"][0]["workers"][1].get("placed").is_none());
    }
}
