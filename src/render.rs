//! The readable form of a plan: the host drawn as NUMA nodes of cores, then the why.

use std::fmt::Write;

use cpuplan::{CpuPlan, HostGpu};

use crate::logging::escape;
pub use crate::read::host::NodeCores;

/// A GPU's memory node without CPUs, its worker's mark and where the GPU was placed.
fn memory_node(plan: &CpuPlan, g: &HostGpu) -> String {
    let memory = g
        .node
        .map_or_else(|| "no node".to_string(), |n| format!("node {n}"));
    let mark = plan
        .devices
        .iter()
        .position(|d| d.as_deref() == Some(g.address.as_str()))
        .map(|i| format!(" [{}]", worker_mark(i)))
        .unwrap_or_default();
    match (g.unplaced_why(), g.placement_node()) {
        (Some(why), _) => format!(
            "GPU memory {memory} (no CPUs): gpu {}{mark} not placed: {}",
            escape(&g.address),
            escape(why)
        ),
        (None, Some(on)) => format!(
            "GPU memory {memory} (no CPUs): gpu {}{mark}, placed on node {on}{}",
            escape(&g.address),
            g.placement_note()
                .map(|n| format!(" ({})", escape(n)))
                .unwrap_or_default()
        ),
        (None, None) => format!("GPU memory {memory}: gpu {}{mark}", escape(&g.address)),
    }
}

fn worker_mark(i: usize) -> char {
    // No 'o' (a core left to pools) and no 'r' (too like the API server's R).
    const MARKS: &[u8] = b"0123456789abcdefghijklmnpqstuvwxyz";
    MARKS.get(i).map(|b| *b as char).unwrap_or('W')
}

/// What the cells mean, printed above the nodes.
pub const LEGEND: &str = "\
legend: one cell per core
  0 1 2 ... a b c ...  a GPU worker's core: the mark is the worker's (listed below; W from the 35th on)
  R                    the API server's core (its result threads)
  o                    a core of the mask, free for the thread pools
  .                    a core outside the mask: the container cannot run there
";

/// The plan drawn over the host's nodes: one row per node, one cell per core. Every string of
/// the plan, the notes and the GPUs (a device, a `why`: a running container's `plan.json` is
/// its own) is printed through [`escape`]: no control character reaches the terminal.
pub fn render(plan: &CpuPlan, nodes: &[NodeCores], notes: &[String]) -> String {
    render_with(plan, nodes, notes, &[])
}

/// [`render`], with the memory node of each of `gpus` that sits on a node without CPUs drawn
/// under the node it was placed on (or, unplaced, after the nodes).
pub fn render_with(
    plan: &CpuPlan,
    nodes: &[NodeCores],
    notes: &[String],
    gpus: &[HostGpu],
) -> String {
    let setting = plan.setting;
    let devices = &plan.devices;
    let mut s = String::new();
    let cpus: usize = nodes.iter().map(|n| n.cpus.len()).sum();
    let cores: usize = nodes.iter().map(|n| n.cores.len()).sum();
    let _ = writeln!(
        s,
        "host: {} NUMA node(s), {cpus} CPUs, {cores} cores; mask {} ({} CPUs), usable {}, setting {setting}",
        nodes.iter().filter(|n| n.node.is_some()).count(),
        plan.mask,
        plan.mask.len(),
        plan.usable
    );
    s.push_str(LEGEND);
    for n in nodes {
        let label = n
            .node
            .map(|id| format!("node {id}"))
            .unwrap_or_else(|| "no node".into());
        let _ = writeln!(s, "{label}: cpus {}", n.cpus);
        for chunk in n.cores.chunks(64) {
            let mut line = String::new();
            for core in chunk {
                let mut c = if core.intersects(&plan.mask) {
                    'o'
                } else {
                    '.'
                };
                if plan
                    .result
                    .as_ref()
                    .is_some_and(|r| r.cpus.intersects(core))
                {
                    c = 'R';
                }
                for (i, w) in plan.workers.iter().enumerate() {
                    if w.as_ref().is_some_and(|w| w.cpus.intersects(core)) {
                        c = worker_mark(i);
                    }
                }
                line.push(c);
            }
            let first = chunk.first().and_then(|c| c.first()).unwrap_or(0);
            let _ = writeln!(s, "  {:>5} {line}", format!("c{first}"));
        }
        for g in gpus.iter().filter(|g| g.cpu_node.is_some()) {
            if n.node.is_some() && g.placement_node() == n.node && g.node != n.node {
                let _ = writeln!(s, "  {}", memory_node(plan, g));
            }
        }
    }
    for g in gpus.iter().filter(|g| g.unplaced_why().is_some()) {
        let _ = writeln!(s, "{}", memory_node(plan, g));
    }
    for (i, w) in plan.workers.iter().enumerate() {
        let dev = devices
            .get(i)
            .cloned()
            .flatten()
            .map_or_else(|| "cpu worker".into(), |d| escape(&d).into_owned());
        match w {
            Some(w) => {
                let _ = writeln!(
                    s,
                    "worker {} [{}] GPU {dev}: cpus {} ({})",
                    i,
                    worker_mark(i),
                    w.cpus,
                    escape(&w.why)
                );
            }
            None => {
                let _ = writeln!(s, "worker {} GPU {dev}: unpinned", i);
            }
        }
    }
    match &plan.result {
        Some(r) => {
            let _ = writeln!(s, "API server [R]: cpus {} ({})", r.cpus, escape(&r.why));
        }
        None => {
            let _ = writeln!(s, "API server: unpinned");
        }
    }
    let _ = writeln!(
        s,
        "pools: left {} -> preprocess_threads {}, png_threads {}, encode_workers {}, copy_workers {}",
        plan.left(),
        plan.preprocess_threads(),
        plan.png_threads(),
        plan.encode_workers(),
        plan.copy_workers()
    );
    s.push_str(&render_shares(plan));
    for n in notes {
        let _ = writeln!(s, "note: {}", escape(n));
    }
    let _ = writeln!(s, "why: {}", escape(&plan.why));
    s
}

/// What each process's pool variables (`OMP_NUM_THREADS` and the others) hold, and their sum.
fn render_shares(plan: &CpuPlan) -> String {
    let sh = plan.shares();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "processes (pool_split {}): the threads OMP_NUM_THREADS and the other pool variables hold",
        plan.split
    );
    let _ = writeln!(
        s,
        "  API server: {} (preprocess_threads; cpuplan-exec --result)",
        sh.api_server
    );
    let workers = match (plan.split, sh.workers) {
        (_, 0) => None,
        (cpuplan::PoolSplit::Off, _) => Some("the one process driving every GPU".to_string()),
        (_, 1) => Some("worker 0".to_string()),
        (_, n) => Some(format!("workers 0-{}, each", n - 1)),
    };
    if let Some(w) = workers {
        let _ = writeln!(
            s,
            "  {w}: {} (plan.env, the container's environment, cpuplan-exec --worker N)",
            sh.worker
        );
    }
    let _ = writeln!(
        s,
        "  any other process: {} (the container's environment)",
        sh.other
    );
    let verdict = if sh.sum <= sh.usable {
        "within"
    } else if sh.api_server == 1 && sh.worker == 1 {
        "over: more processes than CPUs, one thread each"
    } else {
        "over"
    };
    let _ = writeln!(
        s,
        "  sum: {} + {} x {} = {} of left {}, usable {} ({verdict})",
        sh.api_server, sh.workers, sh.worker, sh.sum, sh.left, sh.usable
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use cpuplan::StepCpus;

    #[test]
    fn the_shares_say_each_process_and_the_sum() {
        let plan = |split| {
            CpuPlan::unpinned(
                cpuplan::Setting::Off,
                "0-63".parse().unwrap(),
                46,
                vec![None; 8],
                "w",
            )
            .with_split(split)
        };
        let text = render_shares(&plan(cpuplan::PoolSplit::PerProcess));
        assert!(
            text.contains("  API server: 4 (preprocess_threads"),
            "{text}"
        );
        assert!(text.contains("  workers 0-7, each: 5 (plan.env"), "{text}");
        assert!(text.contains("  any other process: 5 "), "{text}");
        assert!(
            text.contains("  sum: 4 + 8 x 5 = 44 of left 46, usable 46 (within)"),
            "{text}"
        );
        let off = render_shares(&plan(cpuplan::PoolSplit::Off));
        assert!(
            off.contains("  the one process driving every GPU: 46 "),
            "{off}"
        );
        assert!(off.contains("= 50 of left 46, usable 46 (over)"), "{off}");
        // Two workers on 2 CPUs: more processes than CPUs, one each.
        let tight = CpuPlan::unpinned(
            cpuplan::Setting::Off,
            "0-1".parse().unwrap(),
            2,
            vec![None; 2],
            "w",
        );
        let t = render_shares(&tight);
        assert!(
            t.contains("= 3 of left 2, usable 2 (over: more processes than CPUs, one thread each)"),
            "{t}"
        );
    }

    #[test]
    fn worker_marks_never_read_as_another_cell() {
        let marks: Vec<char> = (0..40).map(worker_mark).collect();
        assert!(
            !marks.contains(&'o')
                && !marks.contains(&'.')
                && !marks.contains(&'R')
                && !marks.contains(&'r')
        );
        let first: std::collections::HashSet<char> = marks[..34].iter().copied().collect();
        assert_eq!(first.len(), 34, "the first 34 workers have distinct marks");
        assert_eq!(marks[34], 'W');
    }

    #[test]
    fn draws_workers_server_mask() {
        let nodes = vec![NodeCores {
            node: Some(0),
            cpus: "0-7".parse().unwrap(),
            cores: (0..4).map(|c| [c, c + 4].into_iter().collect()).collect(),
        }];
        let plan = CpuPlan {
            setting: cpuplan::Setting::Auto,
            mask: "0-2,4-6".parse().unwrap(),
            usable: 4,
            devices: vec![Some("0000:18:00.0".into())],
            workers: vec![Some(StepCpus {
                cpus: "0,4".parse().unwrap(),
                why: "w".into(),
            })],
            result: Some(StepCpus {
                cpus: "2,6".parse().unwrap(),
                why: "r".into(),
            }),
            split: cpuplan::PoolSplit::PerProcess,
            why: "because".into(),
        };
        let text = render(&plan, &nodes, &[]);
        assert!(text.contains(LEGEND), "{text}");
        assert!(
            text.contains("  worker 0: 1 (plan.env"),
            "one worker keeps left: {text}"
        );
        assert!(
            text.contains("  sum: 1 + 1 x 1 = 2 of left 1, usable 4 (within)"),
            "{text}"
        );
        for word in [
            "worker",
            "API server",
            "free for the thread pools",
            "outside the mask",
        ] {
            assert!(LEGEND.contains(word), "{word}");
        }
        assert!(text.contains("node 0: cpus 0-7"), "{text}");
        assert!(text.contains("   c0 0oR."), "{text}");
        assert!(
            text.contains("worker 0 [0] GPU 0000:18:00.0: cpus 0,4"),
            "{text}"
        );
        assert!(text.contains("API server [R]: cpus 2,6"), "{text}");
        assert!(text.ends_with("why: because\n"), "{text}");
    }
}
