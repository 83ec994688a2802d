//! The hook's stages: `createRuntime` reads, decides and applies; `poststop` releases the GPU claims.
//!
//! createRuntime applies a decision in one fixed order: claim → cpuset → files. A failure after
//! the claim releases it, a failure of the files puts the cpuset back as it was, and the files
//! are written all or nothing, so no file is left that pins CPUs the hook did not keep, and the
//! `off` plan it falls back to is what is really in force. What each step's outcome makes of
//! the decision is the decide module's ([`Course`]): this file only reports what happened.

use std::io::Read;
use std::mem::ManuallyDrop;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::apply::below::{open_rootfs, remove_plan_files_of, write_placed_in, RootfsError};
use crate::apply::claim::{claim_for_init, release, scope};
use crate::apply::cpuset::{
    restore_cpuset, write_cpuset, CpusetError, CpusetWrite, Narrowed, UnitSet,
};
use crate::apply::hostplan;
use crate::apply::identity::check_pid;
use crate::config::HookConfig;
use crate::decide::{verdict, Course, Decision, Refusal};
use crate::edit::{PlanDoc, SpecEdit};
use crate::read::bundle::{load_bundle, load_rootfs};
use crate::read::host::Host;
use crate::read::nodes::gpu_nodes;
use crate::read::state::{read_state, HookState, StateError};
use crate::read::{read, Container, Inputs, Live, ReadError};

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
            return create_runtime(&config, &state, Some(ReadError::Config(e)));
        }
        return refuse(&config, &state, &e.to_string()).map(|()| None);
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
            if hostplan::take(&config.claims_dir, &scope(state.bundle()), state.id()) {
                remove_host_plan_files(&config, &state);
            }
            Ok(None)
        }
        Stage::CreateRuntime => create_runtime(&config, &state, None),
    }
}

/// At poststop, where createRuntime recorded that it wrote the plan files into the rootfs's own
/// filesystem ([`hostplan`]): those in a rootfs that is a host directory (no tmpfs on the plan
/// directory's path inside the container) are removed, so that the next container on that
/// directory never reads this one's plan.
fn remove_host_plan_files(config: &HookConfig, state: &HookState) {
    // Only the rootfs: poststop has no use for the rest of the spec.
    let Ok(rootfs) = load_rootfs(state.bundle()) else {
        return;
    };
    let rootfs = rootfs.as_path();
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

/// Logs a planning problem and gives the verdict on it: under `deny` the hook's error.
fn refuse(config: &HookConfig, state: &HookState, problem: &str) -> Result<(), HookError> {
    log::warn!("container {}: planning problem: {problem}", state.id());
    verdict(config.on_error, problem).map_err(|r| denied(state, r))
}

/// A refusal as the hook's error, naming the container.
fn denied(state: &HookState, r: Refusal) -> HookError {
    HookError::Denied {
        container: state.id().to_string(),
        problem: r.problem,
    }
}

/// Logs `cause` and makes it the course's: under `deny` the hook's error, else the `off` plan.
fn fail(state: &HookState, course: &mut Course, cause: String) -> Result<(), HookError> {
    log::warn!("container {}: planning problem: {cause}", state.id());
    course.fail(cause).map_err(|r| denied(state, r))
}

/// Reads, decides, claims, narrows the cpuset and writes the plan files of the container in
/// `state`; `unusable` is why the hook config failed to load, if it did (`config` is then what
/// [`HookConfig::of_unusable`] keeps): it is the inputs' problem, so the decision is `off`.
fn create_runtime(
    config: &HookConfig,
    state: &HookState,
    unusable: Option<ReadError>,
) -> Result<Option<Report>, HookError> {
    // The hook is a one-shot process: what it read goes with it at exit. Neither the host's
    // inventory nor the inputs are dropped, which skips a walk that freed each allocation in
    // turn (about 4 % of a createRuntime's instructions).
    let (host, inventory) = Host::stored(config, false);
    let host = ManuallyDrop::new(host);
    crate::read::host::log_inventory(state.id(), &inventory);
    let spec = match load_bundle(state.bundle()) {
        Ok(spec) => spec,
        // Without the bundle the rootfs is unknown: nothing can be written, only logged.
        Err(e) => return refuse(config, state, &e.to_string()).map(|()| None),
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
    let mut inputs = ManuallyDrop::new(read(&host, config, container, spec, &live));
    if unusable.is_some() {
        inputs.problem = unusable;
    }
    let mut course = Course::new(&inputs, config);
    let rootfs = match rootfs {
        Ok(fd) => fd,
        Err(e) => {
            // Nothing can be written: the report says what would have been.
            fail(state, &mut course, e.to_string())?;
            return Ok(Some(report(&inputs, course.into_decision(), None)));
        }
    };
    if let Some(p) = &course.decision().problem {
        log::warn!("container {}: planning problem: {p}", state.id());
        course.verdict().map_err(|r| denied(state, r))?;
    }
    // Also before any write: a pid outside the container's own cgroup (a host process with a
    // private mount namespace passes the check above) gets nothing either.
    if let Some(pid) = state.pid() {
        let cgroups_path = inputs.spec.cgroups_path.as_deref();
        if let Err(e) = check_pid(&inputs.cgroups, pid, cgroups_path, &inputs.container.id) {
            fail(state, &mut course, e.to_string())?;
            return Ok(Some(report(&inputs, course.into_decision(), None)));
        }
    }
    log::debug!(
        "container {}: rootfs {} opened; cpuset {} planned",
        state.id(),
        rootfs_path.display(),
        course
            .decision()
            .cpuset
            .as_ref()
            .map_or_else(|| "unchanged".to_string(), |c| c.to_string())
    );
    course.claimed(claim_for_init(
        &host,
        config,
        &inputs.container,
        &course.decision().claims,
    ));
    let cpuset_file = narrow(config, &host, state, &inputs, &mut course)?;
    let written = write_files(
        config,
        state,
        &rootfs,
        &SpecEdit::new(&inputs, course.decision(), config),
    );
    let cpuset_file = match written {
        Ok(()) => {
            log::debug!(
                "container {}: wrote the plan files in {} inside the container",
                state.id(),
                config.dir.display()
            );
            cpuset_file.map(|n| n.path)
        }
        Err(e) => {
            release_logged(config, &host, &inputs);
            if let Some(narrowed) = cpuset_file {
                put_back(state, &narrowed);
            }
            let was_off = course.is_off();
            let cause = e.to_string();
            if was_off {
                refuse(config, state, &cause)?;
            } else {
                fail(state, &mut course, cause)?;
                let off = SpecEdit::new(&inputs, course.decision(), config);
                if let Err(e) = write_files(config, state, &rootfs, &off) {
                    log::warn!(
                        "container {}: cannot write the off plan either: {e}",
                        state.id()
                    );
                }
            }
            None
        }
    };
    let decision = course.into_decision();
    log_decision(&inputs, &decision);
    Ok(Some(report(&inputs, decision, cpuset_file)))
}

/// Writes the decision's cpuset, if it has one and the container a pid: where it was written
/// and what the file (and the systemd unit) held, to put back. A cpuset the host does not let the hook write keeps it
/// ([`Course::keep_cpuset`]); any other failure releases the claims and is a planning problem.
fn narrow(
    config: &HookConfig,
    host: &Host,
    state: &HookState,
    inputs: &Inputs,
    course: &mut Course,
) -> Result<Option<Narrowed>, HookError> {
    let (Some(set), Some(pid)) = (course.decision().cpuset.clone(), state.pid()) else {
        return Ok(None);
    };
    let cgroups_path = inputs.spec.cgroups_path.as_deref();
    let bus = crate::apply::unit::system_bus(&config.root);
    match write_cpuset(
        &inputs.cgroups,
        pid,
        &set,
        (cgroups_path, &inputs.container.id),
        &bus,
    ) {
        Ok(CpusetWrite::Written(narrowed)) => {
            log::debug!(
                "container {}: wrote {set} to {} (it was {})",
                state.id(),
                narrowed.path.display(),
                narrowed.was.trim()
            );
            match &narrowed.unit {
                UnitSet::NotSystemd => {}
                UnitSet::Set { unit, took, .. } => log::debug!(
                    "container {}: set AllowedCPUs={set} on {unit} through systemd in {} ms",
                    state.id(),
                    took.as_millis()
                ),
                UnitSet::Failed { why, .. } => log::warn!(
                    "container {}: cpuset {set} written to the cgroup file only, which systemd \
                     resets at its next daemon-reload: {why}",
                    state.id()
                ),
            }
            Ok(Some(narrowed))
        }
        Ok(CpusetWrite::NoController) => {
            let why = "cpuset kept: the host has no cpuset controller for the container";
            log::warn!("container {}: {why}", state.id());
            course.keep_cpuset(why.into());
            Ok(None)
        }
        Err(e @ CpusetError::Write { .. }) if e.is_refusal() => {
            let why = format!("cpuset kept: {e} (rootless or read-only cgroups)");
            log::warn!("container {}: {why}", state.id());
            course.keep_cpuset(why);
            Ok(None)
        }
        Err(e) => {
            release_logged(config, host, inputs);
            fail(state, course, e.to_string())?;
            Ok(None)
        }
    }
}

/// Puts the cpuset back as it was before [`narrow`], logging how it went.
fn put_back(state: &HookState, narrowed: &Narrowed) {
    match restore_cpuset(narrowed) {
        Ok(()) => log::info!(
            "container {}: cpuset put back to {} ({})",
            state.id(),
            narrowed.was.trim(),
            narrowed.path.display()
        ),
        Err(e) => log::warn!("container {}: cannot put the cpuset back: {e}", state.id()),
    }
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

/// Writes the edit's files; where they sit in the rootfs's own filesystem, records it for
/// poststop ([`hostplan`]: without the record poststop does not look for them).
fn write_files(
    config: &HookConfig,
    state: &HookState,
    rootfs: &OwnedFd,
    edit: &SpecEdit,
) -> Result<(), RootfsError> {
    if write_placed_in(rootfs, &edit.dir, &edit.files)? {
        if let Err(e) = hostplan::mark(&config.claims_dir, &scope(state.bundle()), state.id()) {
            log::warn!(
                "container {}: its plan files are in the rootfs, and poststop will not remove them: cannot record them in {}: {e}",
                state.id(),
                hostplan::records_dir(&config.claims_dir).display()
            );
        }
    }
    Ok(())
}

/// One line per container (and one per note of the read).
fn log_decision(inputs: &Inputs, decision: &Decision) {
    for note in &inputs.notes {
        log::info!("container {}: {note}", inputs.container.id);
    }
    log::info!("{}", decision.summary(inputs));
}
