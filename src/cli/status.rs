//! `status`: the node as `explain` draws a container (NUMA nodes, GPUs with their claims,
//! every planned container's cores), gathered from the claims directory, the hook's plan
//! records and the NRI plugin's plan directories, and drawn by [`crate::picture`].

use std::collections::BTreeMap;
use std::io::Write;

use cpuplan::{Claim, Holder};

use super::inspect::{config_with_roots, print_json};
use super::{Args, CliError, Command, Context, Exit};
use crate::config::HookConfig;
use crate::picture::{mark, Gpu, GpuClaim, Node, Picture, Planned, Worker};
use crate::read::host::Host;
use crate::read::running::RecordedPlan;

/// `status`.
pub const STATUS: Command = Command {
    name: "status",
    summary: "the node: NUMA nodes, GPUs and their claims, each planned container's cores",
    usage: "\
usage: cpuplan status [--root DIR] [--topology-root DIR] [--config PATH] [--json]

The node drawn as explain draws a container: one row per NUMA node, one cell per core, each
planned container's cores marked with its letter (upper case where its workers or API server
are pinned, lower case for the rest of its CPUs, * for a core several containers share), the
GPUs under their node with the claim on each, then each container: its route, pid, CPUs now,
workers and API server, and its plan against its cgroup (current, or stale after a resize).
The containers are those the hook planned that hold a GPU claim or a plan record (claims_dir,
and hostplans/ beside it) and run, and those the NRI plugin planned (nri_dir/<id>/plan.json).
--json gives {nodes, gpus, containers, problems}. Reads only; run it as root: a user who
cannot read the claims, the plan records or the NRI plan directories gets one line naming the
directory and the error, and exit status 2 (never an empty node).
",
    valued: &["root", "topology-root"],
    switches: &["json"],
    run: status,
};

/// The most bytes of one NRI plan file read.
const MAX_PLAN: usize = 1 << 20;

fn status(ctx: &Context, a: &Args, out: &mut dyn Write) -> Result<Exit, CliError> {
    let config = config_with_roots(ctx, a)?;
    let picture = gather(&config)?;
    if a.switch("json") {
        print_json(out, &picture)?;
    } else {
        out.write_all(picture.text().as_bytes())?;
    }
    Ok(Exit::Ok)
}

/// A directory `status` or `claims` reads that is there but cannot be listed (a user other
/// than root).
#[derive(Debug, thiserror::Error)]
#[error("cannot read {what} {}: {source} (the hook and the NRI plugin keep it for root: run this as root)", .path.display())]
pub(super) struct Unreadable {
    /// Which directory (`the claims directory`…).
    what: &'static str,
    /// Its path.
    path: std::path::PathBuf,
    /// The OS error.
    #[source]
    source: std::io::Error,
}

/// `dir` listed once, to learn that it can be: absent is fine (nothing planned there), any
/// other error is [`Unreadable`].
pub(super) fn readable(what: &'static str, dir: &std::path::Path) -> Result<(), Unreadable> {
    match std::fs::read_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Unreadable {
            what,
            path: dir.to_path_buf(),
            source: e,
        }),
        _ => Ok(()),
    }
}

/// What `status` draws, read now.
fn gather(config: &HookConfig) -> Result<Picture, CliError> {
    // Every listing below takes an unreadable directory for an empty one: it is checked first.
    readable("the claims directory", &config.claims_dir).map_err(CliError::input)?;
    let records = crate::apply::hostplan::records_dir(&config.claims_dir);
    readable("the plan records' directory", &records).map_err(CliError::input)?;
    readable("the NRI plugin's plan directory", &config.nri_dir).map_err(CliError::input)?;
    let host = Host::of(config);
    let nodes: Vec<Node> = host.nodes()?.into_iter().map(Node::from).collect();
    let mut problems = Vec::new();
    let claims = cpuplan::list_claims(&config.claims_dir, &config.root)?;
    let mut containers: Vec<Planned> = Vec::new();
    // The hook's containers: a live holder of a claim or of a plan record, once each.
    let mut holders: BTreeMap<(String, String, u32), Holder> = BTreeMap::new();
    for c in claims
        .iter()
        .filter(|c| c.live && c.holder.scope.starts_with('/'))
    {
        holders.insert(key(&c.holder), c.holder.clone());
    }
    for (h, live) in crate::apply::hostplan::holders(&config.claims_dir, &config.root) {
        if live {
            holders.insert(key(&h), h);
        }
    }
    for h in holders.values() {
        let i = containers.len();
        match crate::explain::check_running(config, h.pid) {
            Ok(check) => {
                let plan = &check.running.plan;
                containers.push(planned(
                    i,
                    &h.container,
                    "hook",
                    Some(h.pid),
                    check.running.cpus.clone(),
                    plan,
                    &claims,
                    check.summary(),
                ));
            }
            Err(e) => problems.push(format!(
                "container {} (pid {}): plan not read: {}",
                crate::logging::escape(&h.container),
                h.pid,
                crate::logging::escape(&e.to_string())
            )),
        }
    }
    // The NRI plugin's containers: a plan directory each.
    for (id, plan) in nri_plans(&config.nri_dir, &mut problems) {
        let i = containers.len();
        let mask = plan.file.mask.clone();
        let state = format!(
            "generation {} (the plugin keeps it current)",
            plan.generation
        );
        containers.push(planned(i, &id, "nri", None, mask, &plan, &claims, state));
    }
    let gpus = gpus(config, &claims, &containers, &mut problems);
    Ok(Picture {
        nodes,
        gpus,
        containers,
        problems,
    })
}

fn key(h: &Holder) -> (String, String, u32) {
    (h.scope.clone(), h.container.clone(), h.pid)
}

/// One planned container from its plan.
#[allow(clippy::too_many_arguments)]
fn planned(
    i: usize,
    container: &str,
    route: &'static str,
    pid: Option<u32>,
    cpuset: cpuplan::CpuSet,
    plan: &RecordedPlan,
    claims: &[Claim],
    state: String,
) -> Planned {
    let devices = plan.file.worker_devices();
    let workers = plan
        .file
        .workers
        .iter()
        .enumerate()
        .map(|(w, pinned)| Worker {
            device: devices.get(w).cloned().flatten(),
            cpus: pinned.as_ref().map(|p| p.cpus.clone()),
            placed: plan
                .worker_placement
                .as_ref()
                .and_then(|p| p.get(w).cloned().flatten()),
        })
        .collect();
    Planned {
        mark: mark(i),
        container: container.to_string(),
        route,
        pid,
        cpuset,
        workers,
        result: plan.file.result.as_ref().map(|r| r.cpus.clone()),
        gpus: claims
            .iter()
            .filter(|c| c.live && c.holder.container == container)
            .map(|c| c.address.clone())
            .collect(),
        plan: state,
    }
}

/// The plans in the NRI plugin's plan directories (`<nri_dir>/<id>/plan.json`), by id.
fn nri_plans(nri_dir: &std::path::Path, problems: &mut Vec<String>) -> Vec<(String, RecordedPlan)> {
    let Ok(listed) = std::fs::read_dir(nri_dir) else {
        return Vec::new();
    };
    let mut ids: Vec<String> = listed
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().to_str().map(String::from))
        .filter(|n| !n.starts_with('.'))
        .collect();
    ids.sort();
    let mut found = Vec::new();
    for id in ids {
        let path = nri_dir.join(&id).join(crate::edit::PLAN_JSON);
        let read = cpuplan::read_file(&path, MAX_PLAN)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<RecordedPlan>(&b).map_err(|e| e.to_string()));
        match read {
            Ok(plan) => found.push((id, plan)),
            Err(e) => problems.push(format!(
                "{}: {}",
                path.display(),
                crate::logging::escape(&e)
            )),
        }
    }
    found
}

/// The host's GPUs (NVIDIA's) and every other device a claim names, each with its claim.
fn gpus(
    config: &HookConfig,
    claims: &[Claim],
    containers: &[Planned],
    problems: &mut Vec<String>,
) -> Vec<Gpu> {
    let mut gpus: BTreeMap<String, Gpu> = BTreeMap::new();
    match cpuplan::nvidia_host_gpus(&config.topology_root) {
        Ok(list) => {
            for g in list {
                gpus.insert(
                    g.address.clone(),
                    Gpu {
                        address: g.address,
                        node: g.node,
                        claim: None,
                    },
                );
            }
        }
        Err(e) => problems.push(format!("the host's GPUs: {e}")),
    }
    for c in claims {
        let g = gpus.entry(c.address.clone()).or_insert_with(|| Gpu {
            address: c.address.clone(),
            node: cpuplan::host_gpus(&config.topology_root, &c.address)
                .ok()
                .and_then(|l| l.into_iter().find(|g| g.address == c.address))
                .and_then(|g| g.node),
            claim: None,
        });
        g.claim = Some(GpuClaim {
            container: c.holder.container.clone(),
            pid: c.holder.pid,
            live: c.live,
            mark: containers
                .iter()
                .find(|p| p.container == c.holder.container)
                .map(|p| p.mark),
        });
    }
    gpus.into_values().collect()
}
