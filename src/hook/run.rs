//! The hook's stages: `createRuntime` plans and writes, `poststop` releases the GPU claims.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::Duration;

use cpuplan::Process;

use crate::bundle::BundleConfig;
use crate::config::{HookConfig, OnError};
use crate::hook::cpuset::{write_cpuset, CpusetError, CpusetWrite};
use crate::hook::decide::{self, ClaimResult};
use crate::hook::inputs::gather;
use crate::hook::problem::Problem;
use crate::output::{open_rootfs, plan_env, write_plan_files_in, HookPlan};
use crate::state::{read_state, HookState, StateError};

/// An OCI hook stage, as the registration names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// `createRuntime`, or the older `prestart`: plan and write.
    CreateRuntime,
    /// `poststop`: release the container's GPU claims.
    Poststop,
    /// Any other stage: logged and ignored.
    Other,
}

impl Stage {
    /// The stage named `name`.
    pub fn parse(name: &str) -> Stage {
        match name {
            "createRuntime" | "prestart" => Stage::CreateRuntime,
            "poststop" => Stage::Poststop,
            _ => Stage::Other,
        }
    }
}

/// Why the hook exits non-zero.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// The state on stdin is unusable (always fatal).
    #[error(transparent)]
    State(#[from] StateError),
    /// A planning problem under `on_error: deny`.
    #[error("container {container}: {problem}")]
    Denied {
        /// The container id.
        container: String,
        /// The cause.
        problem: Problem,
    },
}

/// What a createRuntime run did, for the log and for tests.
#[derive(Debug, Clone)]
pub struct Report {
    /// The plan written (or that would have been).
    pub plan: HookPlan,
    /// Where the cpuset was written, if it was.
    pub cpuset_file: Option<std::path::PathBuf>,
    /// The problem that led to the `off` plan, if any.
    pub problem: Option<String>,
}

/// Runs `stage` on the state in `input` with the config at `config_path`: the hook's library entry point.
///
/// `Ok(None)` for stages that write nothing. Planning problems are logged and, under
/// `on_error: allow`, turned into the `off` plan; under `deny` they are returned.
pub fn run_hook(
    stage: Option<&str>,
    input: impl Read,
    config_path: &Path,
) -> Result<Option<Report>, HookError> {
    let state = read_state(input)?;
    let (config, config_problem) = match HookConfig::load(config_path) {
        Ok(c) => (c, None),
        Err(e) => (HookConfig::default(), Some(e)),
    };
    crate::logging::init(config.log.as_deref());
    let stage = match stage {
        Some(s) => Stage::parse(s),
        None if state.stopped() => Stage::Poststop,
        None => Stage::CreateRuntime,
    };
    if let Some(e) = config_problem {
        return fail(&config, &state, None, Problem::Config(e));
    }
    match stage {
        Stage::Other => {
            log::info!(
                "container {}: stage {} needs nothing",
                state.id(),
                stage_name(stage)
            );
            Ok(None)
        }
        Stage::Poststop => {
            poststop(&config, &state);
            Ok(None)
        }
        Stage::CreateRuntime => {
            let bundle = match BundleConfig::load(state.bundle()) {
                Ok(b) => b,
                Err(e) => return fail(&config, &state, None, e.into()),
            };
            match create_runtime(&config, &state, &bundle) {
                Ok(report) => {
                    log::info!(
                        "container {}: pid {:?} gpus [{}] mask {} usable {} quota {:?} setting {} ({}): {}",
                        state.id(),
                        state.pid(),
                        report.plan.inputs.gpus.join(","),
                        report.plan.plan.mask,
                        report.plan.plan.usable,
                        report.plan.inputs.quota,
                        report.plan.plan.setting,
                        report.plan.inputs.setting_from,
                        report.plan.plan.why
                    );
                    Ok(Some(report))
                }
                Err(problem) => fail(&config, &state, Some(&bundle), problem),
            }
        }
    }
}

fn stage_name(stage: Stage) -> &'static str {
    match stage {
        Stage::CreateRuntime => "createRuntime",
        Stage::Poststop => "poststop",
        Stage::Other => "other",
    }
}

/// Plans the container, writes its cpuset and its plan files.
pub fn create_runtime(
    config: &HookConfig,
    state: &HookState,
    bundle: &BundleConfig,
) -> Result<Report, Problem> {
    let pid = state.pid();
    let g = gather(config, bundle, state.state.annotations().as_ref(), pid)?;
    // Before any write: a pid in the hook's own mount namespace (an exited container's pid
    // reused by a host process) must get neither a cpuset nor a claim, only the refusal. The
    // rootfs opened here is the one the plan files are written into.
    let rootfs = open_rootfs(&config.root, pid, &bundle.rootfs)?;
    let (want, mut cpuset_why) = decide::decide_cpuset(config, &g);
    let mut mask = g.mask.clone();
    let mut written = None;
    if let (Some(set), Some(pid)) = (&want, pid) {
        match write_cpuset(&g.cgroups, pid, set, bundle.cgroups_path.as_deref()) {
            Ok(CpusetWrite::Written(path)) => {
                mask = set.clone();
                written = Some(path);
            }
            Ok(CpusetWrite::NoController) => {
                cpuset_why =
                    "cpuset kept: the host has no cpuset controller for the container".into();
                log::warn!("container {}: {cpuset_why}", state.id());
            }
            Err(e @ CpusetError::Write { .. }) if is_rootless(&e) => {
                cpuset_why = format!("cpuset kept: {e} (rootless or read-only cgroups)");
                log::warn!("container {}: {cpuset_why}", state.id());
            }
            Err(e) => return Err(e.into()),
        }
    }
    let claim = decide::claim(config, &g, state.id(), pid);
    if let ClaimResult::Failed(why) = &claim {
        log::warn!("container {}: no GPU claim: {why}", state.id());
    }
    let plan = match decide::plan(&g, &mask, &claim) {
        Ok(p) => p,
        Err(e) => {
            release_quietly(config, state.id());
            return Err(e);
        }
    };
    let cpuset_set = written.as_ref().map(|_| mask.clone());
    let file = decide::hook_plan(&g, &plan, state.id(), cpuset_set, &cpuset_why);
    if let Err(e) = write_files(config, &rootfs, &file, &g.addresses()) {
        release_quietly(config, state.id());
        return Err(e);
    }
    Ok(Report {
        plan: file,
        cpuset_file: written,
        problem: None,
    })
}

fn is_rootless(e: &CpusetError) -> bool {
    match e {
        CpusetError::Write { source, .. } => matches!(
            source.raw_os_error(),
            Some(nix::libc::EPERM) | Some(nix::libc::EACCES) | Some(nix::libc::EROFS)
        ),
        _ => false,
    }
}

fn release_quietly(config: &HookConfig, container: &str) {
    let _ = cpuplan::release(
        &config.claims_dir,
        container,
        Duration::from_millis(config.claim_wait_ms),
    );
}

fn write_files(
    config: &HookConfig,
    rootfs: &OwnedFd,
    file: &HookPlan,
    devices: &[Option<String>],
) -> Result<(), Problem> {
    let env = plan_env(&file.plan, devices);
    let mut json = serde_json::to_vec_pretty(file).unwrap_or_default();
    json.push(b'\n');
    write_plan_files_in(
        rootfs,
        &config.dir,
        &[("plan.json", &json), ("plan.env", env.as_bytes())],
    )?;
    Ok(())
}

/// Handles a planning problem: logged; `deny` fails the hook, `allow` writes the `off` plan with the cause where it can.
fn fail(
    config: &HookConfig,
    state: &HookState,
    bundle: Option<&BundleConfig>,
    problem: Problem,
) -> Result<Option<Report>, HookError> {
    log::warn!("container {}: planning problem: {problem}", state.id());
    if config.on_error == OnError::Deny {
        return Err(HookError::Denied {
            container: state.id().to_string(),
            problem,
        });
    }
    let cause = problem.to_string();
    let Some(bundle) = bundle else {
        return Ok(None);
    };
    let mask = state
        .pid()
        .and_then(|pid| cpuplan::process_mask(&config.root, Process::Pid(pid)).ok())
        .map(|m| match &bundle.cpus {
            Some(c) => c.intersection(&m),
            None => m,
        })
        .or_else(|| bundle.cpus.clone())
        .unwrap_or_default();
    let usable = cpuplan::usable_cpus(&mask, bundle.quota);
    let plan = decide::off_plan(mask.clone(), usable, 0, &cause);
    let file = HookPlan {
        plan: cpuplan::PlanFile::new(&plan, "off", &[]),
        container: state.id().to_string(),
        inputs: crate::output::Inputs {
            quota: bundle.quota,
            config_quota: bundle.quota,
            cgroup_quota: None,
            config_cpus: bundle.cpus.clone(),
            mask,
            cpuset: None,
            gpus: Vec::new(),
            setting_from: "off after a planning problem".into(),
        },
    };
    let written = open_rootfs(&config.root, state.pid(), &bundle.rootfs)
        .map_err(Problem::from)
        .and_then(|rootfs| write_files(config, &rootfs, &file, &[]));
    if let Err(e) = written {
        log::warn!(
            "container {}: cannot write the off plan either: {e}",
            state.id()
        );
    }
    Ok(Some(Report {
        plan: file,
        cpuset_file: None,
        problem: Some(cause),
    }))
}

fn poststop(config: &HookConfig, state: &HookState) {
    match cpuplan::release(
        &config.claims_dir,
        state.id(),
        Duration::from_millis(config.claim_wait_ms),
    ) {
        Ok(n) => log::info!(
            "container {}: stopped, released {n} GPU claim(s)",
            state.id()
        ),
        Err(e) => log::warn!("container {}: cannot release GPU claims: {e}", state.id()),
    }
}
