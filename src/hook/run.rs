//! The hook's stages: `createRuntime` reads, decides and applies; `poststop` releases the GPU claims.
//!
//! createRuntime applies a decision in one fixed order: claim → cpuset → files. A failure after
//! the claim releases it, a failure of the files puts the cpuset back as it was, and the files
//! are written all or nothing, so no file is left that pins CPUs the hook did not keep, and the
//! `off` plan it falls back to is what is really in force.

use std::io::Read;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use crate::config::{HookConfig, OnError};
use crate::decide::{decide, Decision};
use crate::edit::{PlanDoc, SpecEdit};
use crate::hook::claim::{claim, release, scope};
use crate::hook::cpuset::{restore_cpuset, write_cpuset, CpusetError, CpusetWrite};
use crate::hook::identity::check_pid;
use crate::hook::rootfs::{open_rootfs, remove_plan_files_of, write_plan_files_in};
use crate::problem::Problem;
use crate::read::bundle::load_bundle;
use crate::read::host::Host;
use crate::read::nodes::gpu_nodes;
use crate::read::state::{read_state, HookState, StateError};
use crate::read::{read, Container, Inputs, Live};

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
    /// The stage's name in the log.
    pub fn name(self) -> &'static str {
        match self {
            Stage::CreateRuntime => "createRuntime",
            Stage::Poststop => "poststop",
            Stage::Other => "another stage",
        }
    }

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
        problem: String,
    },
}

/// What a createRuntime run did, for the log and for tests.
#[derive(Debug, Clone)]
pub struct Report {
    /// The plan written (or that would have been).
    pub plan: PlanDoc,
    /// Where the cpuset was written, if it was.
    pub cpuset_file: Option<PathBuf>,
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
    // A debug build can be made to panic here, for the test that the binary fails open.
    #[cfg(debug_assertions)]
    if std::env::var_os("HOOK_TEST_PANIC").is_some() {
        panic!("HOOK_TEST_PANIC is set");
    }
    let state = read_state(input)?;
    let (config, config_problem) = match HookConfig::load(config_path) {
        Ok(c) => (c, None),
        Err(e) => (HookConfig::of_unusable(config_path), Some(e)),
    };
    crate::logging::init(config.log.as_deref());
    crate::logging::set_level(config.log_level);
    let stage = match stage {
        Some(s) => Stage::parse(s),
        None if state.stopped() => Stage::Poststop,
        None => Stage::CreateRuntime,
    };
    log::debug!(
        "container {}: {} with the config {}, pid {}, bundle {}",
        state.id(),
        stage.name(),
        config_path.display(),
        state
            .pid()
            .map_or_else(|| "none".to_string(), |p| p.to_string()),
        state.bundle().display()
    );
    if let Some(e) = config_problem {
        // createRuntime still writes the off plan carrying the cause (or, under deny, refuses
        // the container): the containers see why they are not planned, not just the host log.
        if stage == Stage::CreateRuntime {
            return create_runtime(&config, &state, Some(Problem::Config(e)));
        }
        return refuse(&config, &state, Problem::Config(e).to_string()).map(|()| None);
    }
    match stage {
        Stage::Other => {
            log::info!("container {}: stage needs nothing", state.id());
            Ok(None)
        }
        Stage::Poststop => {
            match release(&config, state.id(), state.bundle(), None) {
                Ok(n) => log::info!(
                    "container {}: stopped, released {n} GPU claim(s)",
                    state.id()
                ),
                Err(e) => log::warn!("container {}: cannot release GPU claims: {e}", state.id()),
            }
            remove_host_plan_files(&config, &state);
            Ok(None)
        }
        Stage::CreateRuntime => create_runtime(&config, &state, None),
    }
}

/// At poststop: the plan files the createRuntime stage wrote into a rootfs that is a host
/// directory (no tmpfs on the plan directory's path inside the container) are removed, so that
/// the next container on that directory never reads this one's plan.
fn remove_host_plan_files(config: &HookConfig, state: &HookState) {
    let Ok(spec) = load_bundle(state.bundle()) else {
        return;
    };
    let Some(rootfs) = spec.rootfs.as_deref() else {
        return;
    };
    let names = [crate::edit::PLAN_ENV, crate::edit::PLAN_JSON];
    match remove_plan_files_of(
        rootfs,
        &config.dir,
        &names,
        crate::edit::PLAN_JSON,
        state.id(),
    ) {
        Ok(true) => log::info!(
            "container {}: removed its plan files from {} (the rootfs is a host directory)",
            state.id(),
            rootfs
                .join(config.dir.strip_prefix("/").unwrap_or(&config.dir))
                .display()
        ),
        Ok(false) => {}
        Err(e) => log::warn!(
            "container {}: cannot remove its plan files from the rootfs {}: {e}",
            state.id(),
            rootfs.display()
        ),
    }
}

/// Logs a planning problem; under `deny` it is the hook's error, under `allow` the container starts.
fn refuse(config: &HookConfig, state: &HookState, problem: String) -> Result<(), HookError> {
    log::warn!("container {}: planning problem: {problem}", state.id());
    match config.on_error {
        OnError::Deny => Err(HookError::Denied {
            container: state.id().to_string(),
            problem,
        }),
        OnError::Allow => Ok(()),
    }
}

/// Reads, decides, claims, narrows the cpuset and writes the plan files of the container in
/// `state`; `unusable` is why the hook config failed to load, if it did (`config` is then what
/// [`HookConfig::of_unusable`] keeps): it is the inputs' problem, so the decision is `off`.
fn create_runtime(
    config: &HookConfig,
    state: &HookState,
    unusable: Option<Problem>,
) -> Result<Option<Report>, HookError> {
    let host = Host::of(config);
    let spec = match load_bundle(state.bundle()) {
        Ok(spec) => spec,
        // Without the bundle the rootfs is unknown: nothing can be written, only logged.
        Err(e) => return refuse(config, state, Problem::Bundle(e).to_string()).map(|()| None),
    };
    let container = Container {
        id: state.id().to_string(),
        pid: state.pid(),
        bundle: Some(state.bundle().clone()),
    };
    let rootfs_path = spec.rootfs.clone().unwrap_or_default();
    // Before any write: a pid in the hook's own mount namespace (an exited container's pid
    // reused by a host process) must get neither a cpuset nor a claim, only the refusal. The
    // rootfs opened here is the one the GPU device nodes are read from and the plan files are
    // written into.
    let rootfs = open_rootfs(&config.root, state.pid(), &rootfs_path);
    let live = Live {
        annotations: state.annotations().clone(),
        nodes: rootfs
            .as_ref()
            .map(|fd| gpu_nodes(fd.as_fd(), &spec.mounts))
            .unwrap_or_default(),
    };
    let mut inputs = read(&host, config, container, spec, &live);
    if unusable.is_some() {
        inputs.problem = unusable;
    }
    let decision = decide(&inputs, config);
    let rootfs = match rootfs {
        Ok(fd) => fd,
        Err(e) => {
            let cause = Problem::Write(e).to_string();
            refuse(config, state, cause.clone())?;
            // Nothing can be written: the report says what would have been.
            let off = Decision::off(&inputs, cause);
            return Ok(Some(report(&inputs, off, None)));
        }
    };
    if let Some(p) = &decision.problem {
        refuse(config, state, p.clone())?;
    }
    // Also before any write: a pid outside the container's own cgroup (a host process with a
    // private mount namespace passes the check above) gets nothing either.
    if let Some(pid) = state.pid() {
        let cgroups_path = inputs.spec.cgroups_path.as_deref();
        if let Err(e) = check_pid(&inputs.cgroups, pid, cgroups_path, &inputs.container.id) {
            let cause = Problem::Identity(e).to_string();
            refuse(config, state, cause.clone())?;
            let off = Decision::off(&inputs, cause);
            return Ok(Some(report(&inputs, off, None)));
        }
    }
    log::debug!(
        "container {}: rootfs {} opened; cpuset {} planned",
        state.id(),
        rootfs_path.display(),
        decision
            .cpuset
            .as_ref()
            .map_or_else(|| "unchanged".to_string(), |c| c.to_string())
    );
    let claimed = claim(&host, config, &inputs, &decision);
    let mut decision = decision.after_claim(&claimed);
    let mut cpuset_file = None;
    if let (Some(set), Some(pid)) = (&decision.cpuset, state.pid()) {
        match write_cpuset(
            &inputs.cgroups,
            pid,
            set,
            inputs.spec.cgroups_path.as_deref(),
            &inputs.container.id,
        ) {
            Ok(CpusetWrite::Written { path, was }) => {
                log::debug!(
                    "container {}: wrote {set} to {} (it was {})",
                    state.id(),
                    path.display(),
                    was.trim()
                );
                cpuset_file = Some((path, was))
            }
            Ok(CpusetWrite::NoController) => {
                let why = "cpuset kept: the host has no cpuset controller for the container";
                log::warn!("container {}: {why}", state.id());
                decision =
                    Decision::keeping_cpuset(&inputs, config, why.into()).after_claim(&claimed);
            }
            Err(e @ CpusetError::Write { .. }) if e.is_refusal() => {
                let why = format!("cpuset kept: {e} (rootless or read-only cgroups)");
                log::warn!("container {}: {why}", state.id());
                decision = Decision::keeping_cpuset(&inputs, config, why).after_claim(&claimed);
            }
            Err(e) => {
                release_logged(config, &host, &inputs);
                let cause = Problem::Cpuset(e).to_string();
                refuse(config, state, cause.clone())?;
                decision = Decision::off(&inputs, cause);
            }
        }
    }
    let edit = SpecEdit::new(&inputs, &decision, config);
    let written = write_files(&rootfs, &edit);
    if written.is_ok() {
        log::debug!(
            "container {}: wrote the plan files in {} inside the container",
            state.id(),
            edit.dir.display()
        );
    }
    if let Err(e) = written {
        release_logged(config, &host, &inputs);
        if let Some((path, was)) = cpuset_file.take() {
            match restore_cpuset(&path, &was) {
                Ok(()) => log::info!(
                    "container {}: cpuset put back to {} ({})",
                    state.id(),
                    was.trim(),
                    path.display()
                ),
                Err(e) => log::warn!("container {}: cannot put the cpuset back: {e}", state.id()),
            }
        }
        let cause = Problem::Write(e).to_string();
        refuse(config, state, cause.clone())?;
        if decision.problem.is_none() {
            let off = Decision::off(&inputs, cause);
            if let Err(e) = write_files(&rootfs, &SpecEdit::new(&inputs, &off, config)) {
                log::warn!(
                    "container {}: cannot write the off plan either: {e}",
                    state.id()
                );
            }
            decision = off;
        }
    }
    log_decision(&inputs, &decision);
    let cpuset_file = cpuset_file.map(|(path, _)| path);
    Ok(Some(report(&inputs, decision, cpuset_file)))
}

fn report(inputs: &Inputs, decision: Decision, cpuset_file: Option<PathBuf>) -> Report {
    Report {
        plan: PlanDoc::new(inputs, &decision),
        cpuset_file,
        problem: decision.problem,
    }
}

/// Releases what this createRuntime claimed for the container (its init, live, holds it).
fn release_logged(config: &HookConfig, host: &Host, inputs: &Inputs) {
    let Some(bundle) = &inputs.container.bundle else {
        return;
    };
    let id = &inputs.container.id;
    let by = inputs
        .container
        .pid
        .and_then(|pid| host.holder(id, &scope(bundle), pid).ok().flatten());
    if let Err(e) = release(config, id, bundle, by.as_ref()) {
        log::warn!(
            "container {}: cannot release GPU claims: {e}",
            inputs.container.id
        );
    }
}

fn write_files(
    rootfs: &std::os::fd::OwnedFd,
    edit: &SpecEdit,
) -> Result<(), crate::hook::rootfs::RootfsError> {
    let files: Vec<(&str, &[u8])> = edit
        .files
        .iter()
        .map(|f| (f.name, f.bytes.as_slice()))
        .collect();
    write_plan_files_in(rootfs, &edit.dir, &files)
}

/// One line per container (and one per note of the read).
fn log_decision(inputs: &Inputs, decision: &Decision) {
    for note in &inputs.notes {
        log::info!("container {}: {note}", inputs.container.id);
    }
    log::info!("{}", decision.summary(inputs));
}
