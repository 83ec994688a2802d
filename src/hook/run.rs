//! The hook's stages: `createRuntime` reads, decides and applies; `poststop` releases the GPU claims.
//!
//! createRuntime applies a decision in one fixed order: claim → cpuset → files. A failure after
//! the claim releases it, a failure of the files puts the cpuset back as it was, and the files
//! are written all or nothing, so no file is left that pins CPUs the hook did not keep, and the
//! `off` plan it falls back to is what is really in force. What each step's outcome makes of
//! the decision is the decide module's ([`Course`]): this file only reports what happened.

use std::io::Read;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use cpuplan::Holder;

use crate::apply::below::{open_rootfs, remove_plan_files_of, PlanDir};
use crate::apply::claim::{claim_for_init, release, scope, Deadline};
use crate::apply::cpuset::{
    restore_cpuset, write_cpuset, CpusetError, CpusetWrite, Narrowed, UnitSet,
};
use crate::apply::hostplan::{self, Hold};
use crate::apply::identity::check_pid;
use crate::apply::unit::unit_wait;
use crate::config::HookConfig;
use crate::decide::{verdict, Ask, Course, Decision, Problem, Refusal};
use crate::edit::{PlanDoc, SpecEdit};
use crate::logging::escape;
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
        problem: Problem,
    },
}

/// What a createRuntime run did, for the log and for tests.
#[derive(Debug, Clone)]
pub struct Report {
    /// The plan written (or that would have been).
    pub plan: PlanDoc,
    /// Where the cpuset was written, if it was.
    pub cpuset_file: Option<PathBuf>,
    /// The problem that led to the `off` plan, if any, as `plan.json` words it.
    pub problem: Option<String>,
    /// That problem's kind (`Problem::cause`).
    pub cause: Option<&'static str>,
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
    let started = std::time::Instant::now();
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
            return create_runtime(&config, &state, started, Some(ReadError::Config(e)));
        }
        // Said once per container, by its createRuntime: the other stages go on with what the
        // config keeps (poststop releases what the container holds in its claims_dir, where
        // that key is valid on its own; refusing a poststop would refuse nothing).
        log::debug!("container {}: {}: {e}", state.id(), stage.name());
    }
    match stage {
        Stage::Other => {
            log::info!("container {}: stage needs nothing", state.id());
            Ok(None)
        }
        Stage::Poststop => {
            let deadline = Deadline::new(started, None);
            match release(&config, state.id(), state.bundle(), None, &deadline) {
                Ok(n) => log::info!(
                    "container {}: stopped, released {n} GPU claim(s)",
                    state.id()
                ),
                Err(e) => log::warn!("container {}: cannot release GPU claims: {e}", state.id()),
            }
            let (wait, _) = deadline.wait(config.claim_wait_ms);
            let bundle_scope = scope(state.bundle());
            if hostplan::take(
                &config.claims_dir,
                &config.root,
                &bundle_scope,
                state.id(),
                wait,
            ) {
                remove_host_plan_files(&config, state.bundle(), state.id());
            }
            Ok(None)
        }
        Stage::CreateRuntime => create_runtime(&config, &state, started, None),
    }
}

/// At poststop (or where a later createRuntime collects the record of a container whose
/// poststop never ran), where createRuntime recorded that it wrote the plan files of container
/// `id` of `bundle` into the rootfs's own filesystem ([`hostplan`]): those in a rootfs that is a
/// host directory (no tmpfs on the plan directory's path inside the container) are removed
/// where `plan.json` still names the container, so that the next container on that directory
/// never reads this one's plan.
fn remove_host_plan_files(config: &HookConfig, bundle: &Path, id: &str) {
    // Only the rootfs: poststop has no use for the rest of the spec.
    let Ok(rootfs) = load_rootfs(bundle) else {
        return;
    };
    let rootfs = rootfs.as_path();
    let names = [crate::edit::PLAN_ENV, crate::edit::PLAN_JSON];
    match remove_plan_files_of(rootfs, &config.dir, &names, crate::edit::PLAN_JSON, id) {
        Ok(true) => log::info!(
            "container {}: removed its plan files from {} (the rootfs is a host directory)",
            escape(id),
            rootfs
                .join(config.dir.strip_prefix("/").unwrap_or(&config.dir))
                .display()
        ),
        Ok(false) => {}
        Err(e) => log::warn!(
            "container {}: cannot remove its plan files from the rootfs {}: {e}",
            escape(id),
            rootfs.display()
        ),
    }
}

/// Logs a planning problem and gives the verdict on it: under `deny` the hook's error.
fn refuse(config: &HookConfig, state: &HookState, problem: &Problem) -> Result<(), HookError> {
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
fn fail(state: &HookState, course: &mut Course, cause: Problem) -> Result<(), HookError> {
    log::warn!("container {}: planning problem: {cause}", state.id());
    course.fail(cause).map_err(|r| denied(state, r))
}

/// Reads, decides, claims, narrows the cpuset and writes the plan files of the container in
/// `state`, for a hook that started at `started`; `unusable` is why the hook config failed to
/// load, if it did (`config` is then what [`HookConfig::of_unusable`] keeps): it is the inputs'
/// problem, so the decision is `off`.
fn create_runtime(
    config: &HookConfig,
    state: &HookState,
    started: std::time::Instant,
    unusable: Option<ReadError>,
) -> Result<Option<Report>, HookError> {
    let (host, inventory) = Host::stored(config, false);
    crate::read::host::log_inventory(state.id(), &inventory);
    let spec = match load_bundle(state.bundle()) {
        Ok(spec) => spec,
        // Without the bundle the rootfs is unknown: nothing can be written, only logged.
        Err(e) => return refuse(config, state, &Problem::spec(e)).map(|()| None),
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
    // The init's mount table: what the runtime really mounted at the container's /dev.
    let table = state.pid().map(|pid| {
        cpuplan::Process::Pid(pid)
            .proc_dir(&config.root)
            .join("mountinfo")
    });
    let live = Live {
        annotations: state.annotations().clone(),
        nodes: rootfs
            .as_ref()
            .map(|fd| gpu_nodes(fd.as_fd(), &spec.mounts, table.as_deref()))
            .unwrap_or_default(),
    };
    let mut inputs = read(&host, config, container, spec, &live);
    if let Some(e) = unusable {
        inputs.problem = Some(std::sync::Arc::new(e));
    }
    let mut course = Course::new(&inputs, config, Ask::Create);
    let rootfs = match rootfs {
        Ok(fd) => fd,
        Err(e) => {
            // Nothing can be written: the report says what would have been.
            fail(state, &mut course, Problem::rootfs(e))?;
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
            fail(state, &mut course, Problem::identity(e))?;
            return Ok(Some(report(&inputs, course.into_decision(), None)));
        }
    }
    // The locks (the host-plan records', the claims') are waited on no longer than the hook's
    // registration lets it run.
    let deadline = Deadline::new(started, own_timeout(&inputs.spec.hooks));
    // The plan directory, opened (made) before anything is claimed: where it is on the rootfs's
    // own filesystem, another live container on the same rootfs directory may plan there.
    let names = [crate::edit::PLAN_ENV, crate::edit::PLAN_JSON];
    let plan_dir = match PlanDir::open(&rootfs, &config.dir, &names) {
        Ok(d) => d,
        Err(e) => {
            fail(state, &mut course, Problem::files(e))?;
            return Ok(Some(report(&inputs, course.into_decision(), None)));
        }
    };
    if plan_dir.on_rootfs() {
        if let Some((cause, holder)) = hold_plan_dir(config, &host, &inputs, &plan_dir, &deadline) {
            log::warn!(
                "container {}: planning problem: {cause} (held by live container {}, pid {}, bundle {})",
                state.id(),
                escape(&holder.container),
                holder.pid,
                escape(&holder.scope)
            );
            course
                .fail(Problem::PlanDirHeld(cause))
                .map_err(|r| denied(state, r))?;
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
        &deadline,
    ));
    let cpuset_file = narrow(config, &host, state, &inputs, &mut course, &deadline)?;
    let written = plan_dir.write_placed(&SpecEdit::new(&inputs, course.decision(), config).files);
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
            release_logged(config, &host, &inputs, &deadline);
            if let Some(narrowed) = cpuset_file {
                put_back(state, &narrowed, &deadline);
            }
            let was_off = course.is_off();
            let cause = Problem::files(e);
            if was_off {
                refuse(config, state, &cause)?;
            } else {
                fail(state, &mut course, cause)?;
                let off = SpecEdit::new(&inputs, course.decision(), config);
                if let Err(e) = plan_dir.write_placed(&off.files) {
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
    deadline: &Deadline,
) -> Result<Option<Narrowed>, HookError> {
    let (Some(set), Some(pid)) = (course.decision().cpuset.clone(), state.pid()) else {
        return Ok(None);
    };
    let cgroups_path = inputs.spec.cgroups_path.as_deref();
    let bus = crate::apply::unit::system_bus(&config.root);
    // systemd is waited on no longer than the hook's registration leaves (less the rest of its
    // work), so that a bus that does not answer never gets the hook killed.
    let unit_wait = unit_wait(deadline.left());
    match write_cpuset(
        &inputs.cgroups,
        pid,
        &set,
        (cgroups_path, &inputs.container.id),
        (&bus, unit_wait),
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
                UnitSet::NotOwn { unit, why } => log::warn!(
                    "container {}: AllowedCPUs not set on {unit}, cpuset {set} written to the \
                     cgroup file only: {why}",
                    state.id()
                ),
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
            release_logged(config, host, inputs, deadline);
            fail(state, course, Problem::cpuset(e))?;
            Ok(None)
        }
    }
}

/// Puts the cpuset back as it was before [`narrow`], logging how it went; systemd is waited on
/// no longer than the registration leaves.
fn put_back(state: &HookState, narrowed: &Narrowed, deadline: &Deadline) {
    match restore_cpuset(narrowed, unit_wait(deadline.left())) {
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
        problem: decision.problem.as_ref().map(ToString::to_string),
        cause: decision.problem.as_ref().map(Problem::cause),
    }
}

/// Releases what this createRuntime claimed for the container (its init, live, holds it).
fn release_logged(config: &HookConfig, host: &Host, inputs: &Inputs, deadline: &Deadline) {
    let Some(bundle) = &inputs.container.bundle else {
        return;
    };
    let id = &inputs.container.id;
    let by = inputs
        .container
        .pid
        .and_then(|pid| host.holder(id, &scope(bundle), pid).ok().flatten());
    if let Err(e) = release(config, id, bundle, by.as_ref(), deadline) {
        log::warn!(
            "container {}: cannot release GPU claims: {e}",
            inputs.container.id
        );
    }
}

/// The timeout, in seconds, of this hook's own registration in the spec (the `createRuntime`
/// or `prestart` hooks whose program is this executable; the shortest where several are):
/// what the runtime kills it after. `None` where none is found (a wrapper script, no
/// timeout): the shipped registrations' bound holds.
fn own_timeout(hooks: &[crate::read::spec::SpecHook]) -> Option<i64> {
    use std::os::unix::fs::MetadataExt;
    let me = std::fs::metadata("/proc/self/exe").ok()?;
    hooks
        .iter()
        .filter(|h| {
            std::fs::metadata(&h.path).is_ok_and(|m| m.dev() == me.dev() && m.ino() == me.ino())
        })
        .filter_map(|h| h.timeout)
        .min()
}

/// Where the plan directory is on the rootfs's own filesystem: takes it for the container
/// ([`hostplan::hold`]), which also records it for poststop and collects the records of gone
/// containers (their plan files removed here). Returns why the container gets no plan files,
/// and who holds the directory, where another live container plans for it; a record that
/// cannot be made is a warning, and the files are written as before.
fn hold_plan_dir(
    config: &HookConfig,
    host: &Host,
    inputs: &Inputs,
    plan_dir: &PlanDir,
    deadline: &Deadline,
) -> Option<(String, Holder)> {
    let container = &inputs.container;
    let (Some(pid), Some(bundle)) = (container.pid, &container.bundle) else {
        return None;
    };
    let id = escape(&container.id);
    let unrecorded = |why: String| {
        log::warn!(
            "container {id}: its plan files are in the rootfs, and neither poststop nor another container on it knows: cannot record them in {}: {why}",
            hostplan::records_dir(&config.claims_dir).display()
        );
    };
    let holder = match host.holder(&container.id, &scope(bundle), pid) {
        Ok(Some(h)) => h,
        Ok(None) => {
            unrecorded(format!("pid {pid} is gone or a zombie"));
            return None;
        }
        Err(e) => {
            unrecorded(e.to_string());
            return None;
        }
    };
    let dir = match plan_dir.identity() {
        Ok(key) => hostplan::dir_id(key),
        Err(e) => {
            unrecorded(format!("cannot stat {}: {e}", config.dir.display()));
            return None;
        }
    };
    let (wait, _) = deadline.wait(config.claim_wait_ms);
    let (held, collected) =
        match hostplan::hold(&config.claims_dir, &host.root, &dir, &holder, wait) {
            Ok(Hold::Taken { collected }) => (None, collected),
            Ok(Hold::Held { by, collected }) => (Some(by), collected),
            Err(e) => {
                unrecorded(e.to_string());
                return None;
            }
        };
    for gone in collected {
        remove_host_plan_files(config, Path::new(&gone.scope), &gone.container);
    }
    held.map(|by| {
        let cause = format!(
            "its plan directory {} is on its rootfs's own filesystem, shared with another live container that plans for it: a rootfs directory is planned for by one container at a time, so this one gets no plan files",
            config.dir.display()
        );
        (cause, by)
    })
}

/// One line per container (and one per note of the read).
fn log_decision(inputs: &Inputs, decision: &Decision) {
    for note in &inputs.notes {
        log::info!("container {}: {note}", inputs.container.id);
    }
    log::info!("{}", decision.summary(inputs));
}
