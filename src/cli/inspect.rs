//! Commands that look at the host and plan on request: `plan`, `quota`, `gpus`, `claims`.

use std::io::Write;
use std::path::PathBuf;

use cpuplan::{Claim, CpuSet, PlanFile, PoolSplit, Process, Setting};

use super::{Args, CliError, Command, Context, Exit, UsageError};
use crate::config::HookConfig;
use crate::read::host::Host;
use crate::render::render;

/// `plan`.
pub const PLAN: Command = Command {
    name: "plan",
    summary: "a plan for given devices, mask and usable CPUs",
    usage: "\
usage: cpuplan plan --setting off|auto|CPU --devices LIST --mask CPUS --usable N [--root DIR]
                   [--pool-split per-process|off | --seed] [--json]

LIST: the workers' PCI addresses, comma-separated, - for a CPU worker (e.g. 0000:18:00.0,-).
Prints the plan drawn over the host's NUMA nodes, or its JSON with --json. --root: the host root
(default /). The mask must be among the host's online CPUs, and usable at least 1.

The plan is the hook's: the API server reserves its whole core, and by default the pools are
split per process (pool_split per-process, the hook config's default): with two workers or
more, preprocess_threads is also at most left less the workers, so each worker's process keeps
a CPU (8 GPUs with little left: 1 where the seed gives 2). --pool-split off: one process drives
every GPU, no cap. --seed: the seed's deployment_plan exactly (mstar.utils.cpus): the API
server's result is one CPU (the lowest of its core), pinned and left count that one, and the
pools are not split.
",
    valued: &["setting", "devices", "mask", "usable", "root", "pool-split"],
    switches: &["json", "seed"],
    run: plan,
};

/// `quota`.
pub const QUOTA: Command = Command {
    name: "quota",
    summary: "the cgroup CPU quota, mask and usable CPUs of a process",
    usage: "\
usage: cpuplan quota [--root DIR] [--pid PID|self] [--json]

The tightest cgroup CPU quota over the process's cgroup and its ancestors (v1 and v2), its CPU
mask and the usable CPUs. JSON: {\"quota\":2.5,\"mask\":\"0-7\",\"usable\":2} (quota null when none).
",
    valued: &["root", "pid"],
    switches: &["json"],
    run: quota,
};

/// `gpus`.
pub const GPUS: Command = Command {
    name: "gpus",
    summary: "the host's GPUs (NVIDIA's, or those like a PCI device)",
    usage: "\
usage: cpuplan gpus [--like ADDR] [--root DIR] [--json]

The host's GPUs in address order with their NUMA node and local CPUs: without --like, the PCI
functions with NVIDIA's vendor id and a display or 3D class; with --like, those with the vendor
and class of the device at ADDR (0000:18:00.0, or nvidia-smi's 00000000:18:00.0).
JSON: [{\"address\":..,\"node\":..,\"local\":..}].
",
    valued: &["like", "root"],
    switches: &["json"],
    run: gpus,
};

/// `claims`.
pub const CLAIMS: Command = Command {
    name: "claims",
    summary: "the GPU claims on this host",
    usage: "\
usage: cpuplan claims [--config PATH] [--json]

The GPU claims in the hook config's claims_dir, each with its holder (container id, its
scope: the bundle path for the hook's claims; its init pid, with its pid namespace where that
is another than this command's) and whether it is live. For a live claim of the hook's, its
container's plan against its cgroup now (as explain --pid): `plan current`, or `plan stale:
cpuset 0-1 (plan 1)` when its cpuset or quota changed after the hook wrote the plan (kubelet's
CPU manager, a resize). --json gives each as {address, holder: {container, scope, pid,
start_time, pid_ns}, live, plan} with plan {stale, drifts, generation}, or {error}, or absent
(a claim not the hook's, or not live). A claims directory this user cannot read is an error
naming it (exit 2): run it as root.
",
    valued: &[],
    switches: &["json"],
    run: claims,
};

/// The directory `--name` gives (default `/`): it must exist.
pub(super) fn root_dir(a: &Args, name: &str) -> Result<Option<PathBuf>, CliError> {
    match a.value(name) {
        None => Ok(None),
        Some(dir) if std::path::Path::new(dir).is_dir() => Ok(Some(PathBuf::from(dir))),
        Some(dir) => Err(CliError::Usage(format!(
            "--{name} {dir:?}: no such directory"
        ))),
    }
}

/// The hook config `ctx` names, for a command that looks at the host (`explain`, `status`,
/// `claims`, `inventory`): one that fails to load is one warning line on stderr naming the file
/// and the error, and the command goes on with what an unusable config keeps (the defaults, and
/// each key of `KEPT_WHEN_UNUSABLE` that is valid on its own), exiting as its own work goes: a
/// broken config is when these commands are needed. Only a `--config` that does not exist is
/// the command's error.
pub(super) fn diagnostic_config(ctx: &super::Context) -> Result<HookConfig, CliError> {
    match HookConfig::load_from(ctx.config, ctx.config_given) {
        Ok(c) => Ok(c),
        Err(crate::config::ConfigError::Read { path, source })
            if ctx.config_given && source.kind() == std::io::ErrorKind::NotFound =>
        {
            Err(crate::config::ConfigError::Read { path, source }.into())
        }
        Err(e) => {
            eprintln!(
                "cpuplan: warning: {}; going on with the defaults (and the keys still valid on \
                 their own): the hook plans no container until the file is fixed",
                crate::logging::escape(&e.to_string())
            );
            Ok(HookConfig::of_unusable(ctx.config))
        }
    }
}

/// The hook config `ctx` names ([`diagnostic_config`]), with `--root` (both roots) and
/// `--topology-root` applied.
pub(super) fn config_with_roots(
    ctx: &super::Context,
    a: &Args,
) -> Result<crate::config::HookConfig, CliError> {
    let mut config = diagnostic_config(ctx)?;
    if let Some(r) = root_dir(a, "root")? {
        config.root = r.clone();
        config.topology_root = r;
    }
    if let Some(t) = root_dir(a, "topology-root")? {
        config.topology_root = t;
    }
    Ok(config)
}

/// `value` as pretty JSON, then a newline. serde escapes the C0 controls in a string; DEL and
/// the C1 controls (U+007F to U+009F: a terminal may take U+009B as CSI) it leaves raw, so they
/// are written as `\u00XX` here: no control character of a container's strings reaches the
/// terminal, and the JSON means the same. (Outside strings serde writes only ASCII.)
pub(super) fn print_json(
    out: &mut dyn Write,
    value: &impl serde::Serialize,
) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value).map_err(std::io::Error::from)?;
    out.write_all(json_controls_escaped(&text).as_bytes())?;
    out.write_all(b"\n")?;
    Ok(())
}

/// `json` with every raw control character but the newlines and indents between tokens (only
/// DEL and C1 are left raw by serde, and only inside strings) as `\u00XX`.
fn json_controls_escaped(json: &str) -> std::borrow::Cow<'_, str> {
    let raw = |c: char| c.is_control() && c != '\n';
    if !json.chars().any(raw) {
        return json.into();
    }
    json.chars()
        .map(|c| match raw(c) {
            true => format!("\\u{:04x}", c as u32),
            false => c.to_string(),
        })
        .collect::<String>()
        .into()
}

fn plan(_: &Context, a: &Args, out: &mut dyn Write) -> Result<Exit, CliError> {
    let setting: Setting = a
        .required("plan", "setting")?
        .parse()
        .map_err(|e| UsageError(format!("plan: --setting: {e}")))?;
    let devices: Vec<Option<String>> = a
        .required("plan", "devices")?
        .split(',')
        .filter(|d| !d.is_empty())
        .map(|d| (d != "-").then(|| cpuplan::PciAddress::canonical(d).unwrap_or(d.to_string())))
        .collect();
    let mask: CpuSet = a
        .required("plan", "mask")?
        .parse()
        .map_err(|e| UsageError(format!("plan: --mask: {e}")))?;
    let usable_text = a.required("plan", "usable")?;
    let usable: usize = usable_text.parse().ok().filter(|u| *u > 0).ok_or_else(|| {
        UsageError(format!(
            "plan: --usable {usable_text:?} is not a count of at least 1"
        ))
    })?;
    let root = root_dir(a, "root")?.unwrap_or_else(|| "/".into());
    let host = Host::of(&HookConfig {
        root: root.clone(),
        topology_root: root.clone(),
        ..HookConfig::default()
    });
    let online = host.online_cpus()?;
    if !mask.is_subset(&online) {
        return Err(CliError::Usage(format!(
            "plan: --mask {mask}: CPUs {} are not among the host's online CPUs {online}",
            mask.difference(&online)
        )));
    }
    let split: PoolSplit =
        match (a.value("pool-split"), a.switch("seed")) {
            (Some(_), true) => return Err(CliError::Usage(
                "plan: --seed and --pool-split: give one of them (--seed does not split the pools)"
                    .into(),
            )),
            (Some(v), false) => v
                .parse()
                .map_err(|e| UsageError(format!("plan: --pool-split: {e}")))?,
            (None, _) => PoolSplit::default(),
        };
    let plan = cpuplan::deployment_plan(setting, &devices, &mask, usable, &root)?.with_split(split);
    let plan = match a.switch("seed") {
        true => plan.seed_form(),
        false => plan,
    };
    if a.switch("json") {
        print_json(out, &PlanFile::new(&plan))?;
    } else {
        out.write_all(render(&plan, &host.nodes()?, &[]).as_bytes())?;
    }
    Ok(Exit::Ok)
}

fn quota(_: &Context, a: &Args, out: &mut dyn Write) -> Result<Exit, CliError> {
    let root = root_dir(a, "root")?.unwrap_or_else(|| "/".into());
    let proc = match a.value("pid").unwrap_or("self") {
        "self" => Process::Current,
        p => Process::Pid(
            p.parse()
                .map_err(|_| UsageError(format!("quota: --pid {p:?} is neither a pid nor self")))?,
        ),
    };
    let q = cpuplan::cgroup_cpu_quota(&root, proc)?;
    let mask = cpuplan::process_mask(&root, proc)?;
    let usable = cpuplan::usable_cpus(&mask, q);
    if a.switch("json") {
        print_json(
            out,
            &serde_json::json!({"quota": q, "mask": mask, "usable": usable}),
        )?;
    } else {
        let qs = q.map_or_else(|| "none".into(), |q| format!("{q} CPUs"));
        writeln!(
            out,
            "quota: {qs}\nmask: {mask} ({} CPUs)\nusable: {usable}",
            mask.len()
        )?;
    }
    Ok(Exit::Ok)
}

fn gpus(_: &Context, a: &Args, out: &mut dyn Write) -> Result<Exit, CliError> {
    let root = root_dir(a, "root")?.unwrap_or_else(|| "/".into());
    let list = match a.value("like") {
        Some(like) => {
            let address = cpuplan::PciAddress::canonical(like)
                .ok_or_else(|| UsageError(format!("gpus: --like {like:?} is not a PCI address")))?;
            cpuplan::host_gpus(&root, &address)?
        }
        None => cpuplan::nvidia_host_gpus(&root)?,
    };
    if a.switch("json") {
        print_json(out, &list)?;
    } else if list.is_empty() {
        writeln!(
            out,
            "no GPUs under {}",
            root.join("sys/bus/pci/devices").display()
        )?;
    } else {
        for g in &list {
            let node = g.node.map_or_else(|| "-".into(), |n| n.to_string());
            let local = match &g.local {
                None => "-".to_string(),
                Some(l) if l.is_empty() => "none".to_string(),
                Some(l) => l.to_string(),
            };
            let placed = match &g.cpu_node {
                Some(cpuplan::CpuNode::Nearest { node, cpus, note }) => format!(
                    "  placed on node {node} (cpus {cpus}){}",
                    note.as_ref().map(|n| format!(": {n}")).unwrap_or_default()
                ),
                Some(cpuplan::CpuNode::Unplaced { why }) => format!("  unplaced: {why}"),
                None => String::new(),
            };
            writeln!(
                out,
                "{}  node {node}  local cpus {local}{placed}",
                g.address
            )?;
        }
    }
    Ok(Exit::Ok)
}

/// A claim as `claims` lists it: the claim, and its container's plan checked where it can be.
#[derive(serde::Serialize)]
struct Listed<'a> {
    #[serde(flatten)]
    claim: &'a Claim,
    #[serde(skip_serializing_if = "Option::is_none")]
    plan: Option<PlanState>,
}

/// A claim's container's plan against its cgroup now.
#[derive(Clone, serde::Serialize)]
struct PlanState {
    #[serde(skip_serializing_if = "Option::is_none")]
    stale: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    drifts: Option<Vec<crate::decide::stale::Drift>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    generation: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip)]
    text: String,
}

/// The plan of a live claim's container where the hook claimed it (its holder's pid is the
/// container's init, in this command's pid namespace); `None` for any other claim.
fn plan_state(config: &HookConfig, c: &Claim, mine: u64) -> Option<PlanState> {
    let h = &c.holder;
    let ours = h.pid_ns == 0 || mine == 0 || h.pid_ns == mine;
    if !c.live || !h.scope.starts_with('/') || !ours {
        return None;
    }
    Some(match crate::explain::check_running(config, h.pid) {
        Ok(check) => PlanState {
            stale: Some(!check.drifts.is_empty()),
            generation: Some(check.running.plan.generation),
            text: format!("plan {}", check.summary()),
            drifts: Some(check.drifts),
            error: None,
        },
        Err(e) => PlanState {
            stale: None,
            drifts: None,
            generation: None,
            text: format!(
                "plan not checked: {}",
                crate::logging::escape(&e.to_string())
            ),
            error: Some(e.to_string()),
        },
    })
}

fn claims(ctx: &Context, a: &Args, out: &mut dyn Write) -> Result<Exit, CliError> {
    // A config that fails to load still names where the claims are (its claims_dir where
    // valid on its own, else the default): one warning line, and they are listed.
    let config = diagnostic_config(ctx)?;
    // Listing takes an unreadable directory for an empty one: it is checked first.
    super::status::readable("the claims directory", &config.claims_dir).map_err(CliError::input)?;
    let list = cpuplan::list_claims(&config.claims_dir, &config.root)?;
    let mine = cpuplan::own_pid_ns();
    // One check per container: a container of several GPUs holds several claims.
    let mut checked: std::collections::BTreeMap<(String, u32), Option<PlanState>> =
        Default::default();
    let listed: Vec<Listed> = list
        .iter()
        .map(|c| {
            let key = (c.holder.scope.clone(), c.holder.pid);
            let plan = checked
                .entry(key)
                .or_insert_with(|| plan_state(&config, c, mine))
                .clone();
            Listed { claim: c, plan }
        })
        .collect();
    if a.switch("json") {
        print_json(out, &listed)?;
    } else if list.is_empty() {
        writeln!(out, "no GPU claims in {}", config.claims_dir.display())?;
    } else {
        for Listed { claim: c, plan } in &listed {
            let ns = match c.holder.pid_ns {
                0 => String::new(),
                n if n == mine => String::new(),
                n => format!(" of pid namespace {n}"),
            };
            let plan = plan
                .as_ref()
                .map_or_else(String::new, |p| format!("  {}", p.text));
            writeln!(
                out,
                "{}  container {}  {}  pid {}{ns}  {}{plan}",
                c.address,
                crate::logging::escape(&c.holder.container),
                crate::logging::escape(&crate::apply::claim::describe_scope(&c.holder.scope)),
                c.holder.pid,
                if c.live { "live" } else { "stale" }
            )?;
        }
    }
    Ok(Exit::Ok)
}
