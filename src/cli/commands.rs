//! The subcommands of `cpuplan-hook`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use cpuplan::{CpuSet, PlanFile, Process, Setting};

use crate::cli::args::{take_global_config, Args, UsageError};
use crate::cli::help;
use crate::config::{HookConfig, DEFAULT_CONFIG};
use crate::render::{host_nodes, render};

/// How a subcommand ended.
pub enum Exit {
    /// Exit status 0.
    Ok,
    /// Exit with this status (hook failures).
    Code(i32),
}

/// Runs the command line `words` (without the program name), writing to `out`; an error whose
/// root is a [`UsageError`] or a bad file exits 2, others 1.
pub fn main_with(mut words: Vec<String>, out: &mut dyn Write) -> Result<Exit> {
    let config_path = take_global_config(&mut words)?
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG));
    let (cmd, rest) = match words.split_first() {
        Some((c, rest)) if !c.starts_with('-') => (c.as_str(), rest.to_vec()),
        Some((c, _)) if c == "--help" || c == "-h" => ("help", Vec::new()),
        _ => ("hook", words.clone()),
    };
    match cmd {
        "help" => {
            out.write_all(help::MAIN.as_bytes())?;
            Ok(Exit::Ok)
        }
        "hook" => hook(&rest, &config_path, out),
        "plan" => plan(&rest, out),
        "quota" => quota(&rest, out),
        "gpus" => gpus(&rest, out),
        "explain" => explain(&rest, &config_path, out),
        "claims" => claims(&rest, &config_path, out),
        "precreate" => precreate(&rest, &config_path, out),
        "install" => install(&rest, &config_path, out),
        "uninstall" => uninstall(&rest, &config_path, out),
        other => Err(UsageError(format!(
            "unknown subcommand {other:?} (see cpuplan-hook --help)"
        ))
        .into()),
    }
}

fn hook(words: &[String], config: &Path, out: &mut dyn Write) -> Result<Exit> {
    let a = Args::parse("hook", words, &[], &[])?;
    if a.help {
        out.write_all(help::HOOK.as_bytes())?;
        return Ok(Exit::Ok);
    }
    if a.positional.len() > 1 {
        return Err(UsageError("hook: at most one STAGE".into()).into());
    }
    if let Err(e) = crate::privileges::drop_capabilities() {
        eprintln!("cpuplan-hook: warning: could not drop capabilities: {e}");
    }
    let stdin = std::io::stdin().lock();
    match crate::hook::run_hook(a.positional.first().map(String::as_str), stdin, config) {
        Ok(_) => Ok(Exit::Ok),
        Err(e) => {
            eprintln!("cpuplan-hook: {e}");
            Ok(Exit::Code(1))
        }
    }
}

fn root_of(a: &Args, key: &str) -> PathBuf {
    PathBuf::from(a.value(key).unwrap_or("/"))
}

fn print_json(out: &mut dyn Write, value: &impl serde::Serialize) -> Result<()> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    out.write_all(b"\n")?;
    Ok(())
}

fn plan(words: &[String], out: &mut dyn Write) -> Result<Exit> {
    let a = Args::parse(
        "plan",
        words,
        &["setting", "devices", "mask", "usable", "root"],
        &["json"],
    )?;
    if a.help {
        out.write_all(help::PLAN.as_bytes())?;
        return Ok(Exit::Ok);
    }
    let setting: Setting = a
        .required("plan", "setting")?
        .parse()
        .map_err(|e| UsageError(format!("plan: --setting: {e}")))?;
    let devices: Vec<Option<String>> = a
        .required("plan", "devices")?
        .split(',')
        .filter(|d| !d.is_empty())
        .map(|d| (d != "-").then(|| d.to_string()))
        .collect();
    let mask: CpuSet = a
        .required("plan", "mask")?
        .parse()
        .map_err(|e| UsageError(format!("plan: --mask: {e}")))?;
    let usable: usize = a.required("plan", "usable")?.parse().map_err(|_| {
        UsageError(format!(
            "plan: --usable {:?} is not a number",
            a.value("usable").unwrap_or("")
        ))
    })?;
    let root = root_of(&a, "root");
    let plan = cpuplan::deployment_plan(setting, &devices, &mask, usable, &root)
        .map_err(|e| anyhow!(BadInput(e.to_string())))?;
    if a.switch("json") {
        print_json(out, &PlanFile::new(&plan, &setting.to_string(), &devices))?;
    } else {
        let nodes = host_nodes(&root).map_err(|e| anyhow!(BadInput(e.to_string())))?;
        out.write_all(render(&plan, &setting.to_string(), &devices, &nodes, &[]).as_bytes())?;
    }
    Ok(Exit::Ok)
}

/// A bad input file or value: exit 2 like a usage error.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

fn quota(words: &[String], out: &mut dyn Write) -> Result<Exit> {
    let a = Args::parse("quota", words, &["root", "pid"], &["json"])?;
    if a.help {
        out.write_all(help::QUOTA.as_bytes())?;
        return Ok(Exit::Ok);
    }
    let root = root_of(&a, "root");
    let proc = match a.value("pid").unwrap_or("self") {
        "self" => Process::Current,
        p => Process::Pid(
            p.parse()
                .map_err(|_| UsageError(format!("quota: --pid {p:?} is neither a pid nor self")))?,
        ),
    };
    let q = cpuplan::cgroup_cpu_quota(&root, proc).map_err(|e| BadInput(e.to_string()))?;
    let mask = cpuplan::process_mask(&root, proc).map_err(|e| BadInput(e.to_string()))?;
    let usable = cpuplan::usable_cpus(&mask, q);
    if a.switch("json") {
        print_json(
            out,
            &serde_json::json!({"quota": q, "mask": mask, "usable": usable}),
        )?;
    } else {
        let qs = q
            .map(|q| format!("{q} CPUs"))
            .unwrap_or_else(|| "none".into());
        writeln!(
            out,
            "quota: {qs}\nmask: {mask} ({} CPUs)\nusable: {usable}",
            mask.len()
        )?;
    }
    Ok(Exit::Ok)
}

fn gpus(words: &[String], out: &mut dyn Write) -> Result<Exit> {
    let a = Args::parse("gpus", words, &["like", "root"], &["json"])?;
    if a.help {
        out.write_all(help::GPUS.as_bytes())?;
        return Ok(Exit::Ok);
    }
    let like = a.required("gpus", "like")?;
    let list =
        cpuplan::host_gpus(&root_of(&a, "root"), like).map_err(|e| BadInput(e.to_string()))?;
    if a.switch("json") {
        print_json(out, &list)?;
    } else {
        for g in &list {
            let node = g.node.map(|n| n.to_string()).unwrap_or_else(|| "-".into());
            let local = g
                .local
                .as_ref()
                .map(|l| l.to_string())
                .unwrap_or_else(|| "-".into());
            writeln!(out, "{}  node {node}  local cpus {local}", g.address)?;
        }
    }
    Ok(Exit::Ok)
}

fn explain(words: &[String], config_path: &Path, out: &mut dyn Write) -> Result<Exit> {
    let a = Args::parse(
        "explain",
        words,
        &["bundle", "root", "topology-root"],
        &["json"],
    )?;
    if a.help {
        out.write_all(help::EXPLAIN.as_bytes())?;
        return Ok(Exit::Ok);
    }
    let bundle = PathBuf::from(a.required("explain", "bundle")?);
    let mut config = HookConfig::load(config_path).map_err(|e| BadInput(e.to_string()))?;
    if let Some(r) = a.value("root") {
        config.root = PathBuf::from(r);
        config.topology_root = PathBuf::from(r);
    }
    if let Some(t) = a.value("topology-root") {
        config.topology_root = PathBuf::from(t);
    }
    let e = crate::explain::explain(&config, &bundle).map_err(|e| BadInput(e.to_string()))?;
    if a.switch("json") {
        print_json(out, &e.file)?;
    } else {
        let nodes = host_nodes(&config.topology_root).map_err(|e| BadInput(e.to_string()))?;
        let devices = e.gathered.addresses();
        let text = render(
            &e.plan,
            &e.gathered.setting.to_string(),
            &devices,
            &nodes,
            &e.notes,
        );
        out.write_all(text.as_bytes())?;
    }
    Ok(Exit::Ok)
}

fn claims(words: &[String], config_path: &Path, out: &mut dyn Write) -> Result<Exit> {
    let a = Args::parse("claims", words, &[], &["json"])?;
    if a.help {
        out.write_all(help::CLAIMS.as_bytes())?;
        return Ok(Exit::Ok);
    }
    let config = HookConfig::load(config_path).map_err(|e| BadInput(e.to_string()))?;
    let list = cpuplan::list_claims(&config.claims_dir, &config.root)
        .with_context(|| format!("claims in {}", config.claims_dir.display()))
        .map_err(|e| BadInput(format!("{e:#}")))?;
    if a.switch("json") {
        print_json(out, &list)?;
    } else if list.is_empty() {
        writeln!(out, "no GPU claims in {}", config.claims_dir.display())?;
    } else {
        for c in &list {
            writeln!(
                out,
                "{}  container {}  pid {}  {}",
                c.address,
                c.holder.container,
                c.holder.pid,
                if c.live { "live" } else { "stale" }
            )?;
        }
    }
    Ok(Exit::Ok)
}

fn precreate(words: &[String], config_path: &Path, out: &mut dyn Write) -> Result<Exit> {
    let a = Args::parse("precreate", words, &[], &[])?;
    if a.help {
        out.write_all(help::PRECREATE.as_bytes())?;
        return Ok(Exit::Ok);
    }
    if let Err(e) = crate::privileges::drop_capabilities() {
        eprintln!("cpuplan-hook: warning: could not drop capabilities: {e}");
    }
    let mut input = Vec::new();
    std::io::Read::take(std::io::stdin().lock(), crate::bundle::MAX_CONFIG)
        .read_to_end(&mut input)?;
    let (config, problem) = match HookConfig::load(config_path) {
        Ok(c) => (c, None),
        Err(e) => (HookConfig::default(), Some(e)),
    };
    crate::logging::init(config.log.as_deref());
    if let Some(e) = problem {
        // The config's own on_error is unknown: allow, and pass the runtime config through.
        log::warn!("precreate: {e}; config left unchanged");
        out.write_all(&input)?;
        return Ok(Exit::Ok);
    }
    match crate::precreate::precreate(&config, &input) {
        Ok(v) => {
            serde_json::to_writer(&mut *out, &v)?;
            Ok(Exit::Ok)
        }
        Err(e) => {
            eprintln!("cpuplan-hook: {e}");
            Ok(Exit::Code(1))
        }
    }
}

/// The install options of the command line (`config_path` is the global `--config`).
fn install_options(a: &Args, config_path: &Path) -> crate::install::Options {
    let p = |k: &str| a.value(k).map(PathBuf::from);
    crate::install::Options {
        root_prefix: p("root-prefix"),
        prefix: p("prefix"),
        hooks_dir: p("hooks-dir"),
        config: (config_path != Path::new(DEFAULT_CONFIG)).then(|| config_path.to_path_buf()),
        containerd: a.switch("containerd"),
        containerd_config: p("containerd-config"),
        containerd_runtimes: a
            .value("containerd-runtimes")
            .map(|v| {
                v.split(',')
                    .filter(|r| !r.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default(),
        ctr_root: p("ctr-root"),
    }
}

/// The options `install` and `uninstall` share.
const INSTALL_OPTS: &[&str] = &[
    "prefix",
    "hooks-dir",
    "root-prefix",
    "containerd-config",
    "containerd-runtimes",
    "ctr-root",
];

fn install(words: &[String], config_path: &Path, out: &mut dyn Write) -> Result<Exit> {
    let a = Args::parse(
        "install",
        words,
        INSTALL_OPTS,
        &["with-precreate", "containerd"],
    )?;
    if a.help {
        out.write_all(help::INSTALL.as_bytes())?;
        return Ok(Exit::Ok);
    }
    let me = std::env::current_exe().context("cannot find this binary")?;
    let (layout, containerd) = install_options(&a, config_path)
        .resolve()
        .map_err(|e| BadInput(e.to_string()))?;
    let mut said = crate::install::install(&layout, &me, a.switch("with-precreate"))
        .map_err(|e| BadInput(e.to_string()))?;
    if let Some(c) = &containerd {
        said.extend(
            crate::install::containerd::install(&layout, c).map_err(|e| BadInput(e.to_string()))?,
        );
    }
    for line in said {
        writeln!(out, "{line}")?;
    }
    Ok(Exit::Ok)
}

fn uninstall(words: &[String], config_path: &Path, out: &mut dyn Write) -> Result<Exit> {
    let a = Args::parse("uninstall", words, INSTALL_OPTS, &["containerd"])?;
    if a.help {
        out.write_all(help::INSTALL.as_bytes())?;
        return Ok(Exit::Ok);
    }
    let (layout, containerd) = install_options(&a, config_path)
        .resolve()
        .map_err(|e| BadInput(e.to_string()))?;
    let mut said = Vec::new();
    if let Some(c) = &containerd {
        said.extend(
            crate::install::containerd::uninstall(&layout, c)
                .map_err(|e| BadInput(e.to_string()))?,
        );
    }
    said.extend(crate::install::uninstall(&layout).map_err(|e| BadInput(e.to_string()))?);
    for line in said {
        writeln!(out, "{line}")?;
    }
    Ok(Exit::Ok)
}
