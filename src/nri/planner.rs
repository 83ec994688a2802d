//! The NRI front end of the pipeline: at CreateContainer the container is read (its pod's
//! cgroups, its devices, its env and annotations), decided on, its GPUs claimed, its plan files
//! written on the host, and the [`SpecEdit`] answered as a container adjustment. Stop and
//! remove release the claims and the files; Synchronize drops what belongs to containers that
//! are gone and claims again for those that run.
//!
//! The configuration is the hook's (`--config`, default `/etc/cpuplan/hook.json`) unless the
//! runtime gives the plugin one at Configure: a plugin the runtime launches from its plugin
//! directory gets no arguments, and NRI hands it the file `<plugin_config_path>/10-cpuplan.conf`
//! (or `cpuplan.conf`) instead, which then holds the same JSON keys.
//!
//! The plan directory is mounted at [`PLAN_MOUNT`] (`/dev/cpuplan`, in the `/dev` the runtime
//! makes), never at the hook's `dir`, where the image's own files could stop the start. What it
//! leaves alone: a container with a mount at or under [`PLAN_MOUNT`], or whose `/dev` is not
//! the runtime's tmpfs, gets its env but no plan mount (the tenant's mount stays); a container
//! of the plugin's own pod,
//! or one that mounts the host's `nri_dir` or `claims_dir` (another plugin pod, as in a
//! DaemonSet rollout), is not planned at all.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use cpuplan::planenv::PLAN_PATH;
use cpuplan::Holder;
use nri_plugin::api::{
    ConfigureRequest, Container, ContainerAdjustment, ContainerUpdate, CreateContainerResponse,
    Event, LinuxResources, Mount, PodSandbox, UpdateContainerResponse,
};
use nri_plugin::{EventMask, Lifecycle, Plugin, PluginResult};

use crate::apply::claim::claim;
use crate::config::{paths_overlap, HookConfig, OnError};
use crate::decide::{verdict, Ask, ClaimResult, Course, Created, Problem, Why};
use crate::edit::{SpecEdit, PLAN_JSON};
use crate::logging::escape;
use crate::read::host::Host;
use crate::read::{read, Container as Ctr, Live};

use super::attempts::Attempts;
use super::from_edit::adjustment;
use super::health::{Health, Phase};
use super::ids::ContainerId;
use super::instance::Instance;
use super::metrics::{fallbacks_of, labels_of, Fallback, Metrics, Outcome, Request};
use super::plandir::{PlanDirs, Record};
use super::ranks::Ranks;
use super::spec::container_spec;

/// The longest the plugin waits for the claims lock: well below the runtime's 2 s plugin timeout.
pub const MAX_CLAIM_WAIT: Duration = Duration::from_millis(500);

/// What the runtime's plugin configuration is called in messages.
pub const RUNTIME_CONFIG: &str = "<the runtime's NRI plugin config>";

/// A container the plugin refuses (`on_error: deny`): the error that fails the runtime's call,
/// naming the container. Its text carries the problem's, so the problem is no `source` (the
/// stub renders a chain, which would print it twice).
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// At CreateContainer: the container is not created.
    #[error("cpuplan: container {id}: {problem}")]
    Create {
        /// The container id (escaped for the log).
        id: String,
        /// The planning problem.
        problem: Problem,
    },
    /// At UpdateContainer: kubelet's update fails.
    #[error("cpuplan: container {id}: update: {problem}")]
    Update {
        /// The container id (escaped for the log).
        id: String,
        /// The planning problem.
        problem: Problem,
    },
}

/// The handler that plans containers as the hook does.
#[derive(Debug)]
pub struct PlanHandler {
    /// The planner of the configuration in force (replaced when the runtime gives one).
    planner: RwLock<Arc<Planner>>,
    /// The plugin's `INDEX-NAME`.
    plugin: String,
    /// Whether `--log` named the log file (a configuration's `log` is then not opened).
    log_given: bool,
    /// The hold of the plan directory in force ([`Instance`]): taken before connecting by an
    /// external plugin, at Configure by one the runtime launched.
    instance: Mutex<Option<Instance>>,
    /// Whether Configure takes the hold (a plugin the runtime launched).
    hold_at_configure: AtomicBool,
    /// The metrics, kept across configurations.
    metrics: Arc<Metrics>,
    /// Whether the plugin is ready and live.
    health: Arc<Health>,
    /// The containers whose worker processes are placed, kept across configurations.
    ranks: Arc<Ranks>,
}

impl PlanHandler {
    /// A handler planning with `config` as the plugin named `plugin` (`10-cpuplan`); with
    /// `log_given`, a configuration the runtime gives keeps the log file `--log` named.
    pub fn new(config: HookConfig, plugin: &str, log_given: bool) -> PlanHandler {
        let metrics = Arc::new(Metrics::new());
        let ranks = Arc::new(Ranks::default());
        PlanHandler {
            planner: RwLock::new(Arc::new(Planner::new(config, plugin, &metrics, &ranks))),
            plugin: plugin.to_string(),
            log_given,
            instance: Mutex::new(None),
            hold_at_configure: AtomicBool::new(false),
            metrics,
            health: Arc::default(),
            ranks,
        }
    }

    /// The containers whose worker processes are placed (the watcher's, [`super::ranks`]).
    pub(crate) fn ranks(&self) -> Arc<Ranks> {
        Arc::clone(&self.ranks)
    }

    /// The plugin's health (ready, live), as the stub and the handlers report it.
    pub fn health(&self) -> Arc<Health> {
        Arc::clone(&self.health)
    }

    /// The metrics in the OpenMetrics text format, with the GPU claims this plugin holds now
    /// (live holders of its scope in the claims directory of the configuration in force).
    pub fn metrics_text(&self) -> String {
        let p = self.planner();
        let held = match cpuplan::list_claims(&p.config.claims_dir, &p.host.root) {
            Ok(claims) => Some(
                claims
                    .iter()
                    .filter(|c| c.live && c.holder.scope == p.scope)
                    .count(),
            ),
            Err(e) => {
                log::debug!("nri: metrics: cannot list the claims: {e}");
                None
            }
        };
        self.metrics.placements(&self.ranks.counts);
        self.metrics.encode(held)
    }

    /// Runs `request`'s handler `f`, timed and watched ([`Health::busy`]).
    fn timed<T>(&self, request: Request, f: impl FnOnce() -> T) -> T {
        let _busy = self.health.busy(request.as_str());
        let started = std::time::Instant::now();
        let out = f();
        self.metrics.took(request, started.elapsed());
        out
    }

    /// Keeps `instance` (the plan directory's lock) for the plugin's life; a configuration the
    /// runtime gives later with another `nri_dir` must take that one's lock too.
    pub(crate) fn hold(&self, instance: Instance) {
        *self.instance.lock().unwrap_or_else(|e| e.into_inner()) = Some(instance);
    }

    /// Takes the plan directory's lock at Configure, for the configuration in force then.
    pub(crate) fn hold_at_configure(&self) {
        self.hold_at_configure.store(true, Ordering::Relaxed);
    }

    /// The planner in force.
    fn planner(&self) -> Arc<Planner> {
        match self.planner.read() {
            Ok(p) => Arc::clone(&p),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// The configuration in force.
    pub(crate) fn config(&self) -> HookConfig {
        self.planner().config.clone()
    }
}

/// Plans with one configuration.
#[derive(Debug)]
struct Planner {
    config: HookConfig,
    host: Host,
    dirs: PlanDirs,
    /// The claims' scope: `nri:<plugin>`.
    scope: String,
    /// This plugin as a claim holder (its pid and start time, read once), any container.
    me: OnceLock<Holder>,
    /// The UID of the pod the plugin runs in, if it runs in one (from its own cgroup).
    own_pod: Option<String>,
    /// Containers given a plan mount that have not stopped yet.
    attempts: Attempts,
    /// The plugin's metrics.
    metrics: Arc<Metrics>,
    /// The containers whose worker processes are placed.
    ranks: Arc<Ranks>,
}

/// The UID of the Kubernetes pod whose cgroup `text` (a `/proc/PID/cgroup`) is in, if any:
/// `.../pod<uid>/...` (cgroupfs) or `...-pod<uid_with_underscores>.slice` (systemd).
pub fn pod_uid_of_cgroup(text: &str) -> Option<String> {
    text.lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .flat_map(|p| p.split('/'))
        .find_map(|c| {
            let c = c.strip_suffix(".slice").unwrap_or(c);
            let uid = c
                .rsplit_once("-pod")
                .map(|(_, u)| u)
                .or(c.strip_prefix("pod"))?;
            (uid.len() >= 32
                && uid
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() || b"-_".contains(&b)))
            .then(|| uid.replace('_', "-"))
        })
}

/// Where the plugin mounts a container's plan directory (read-only): in the `/dev` that the
/// runtime makes afresh for every container (containerd and CRI-O: a tmpfs over whatever the
/// image holds there), so that nothing of the image is at the destination and the runtime makes
/// it, a directory in that tmpfs. `CPUPLAN_PLAN` names its `plan.json` in the container's
/// environment, where the shim, the Python package and `cpuplan-exec` look first.
pub const PLAN_MOUNT: &str = crate::edit::NRI_PLAN_DIR;

/// Why the plan mount at [`PLAN_MOUNT`] could stop the start of a container with `mounts`, or
/// land outside the `/dev` the runtime makes, if it could: a mount of the container's own at or
/// under it (NRI would replace one at the same destination, and one below would be under a
/// read-only mount), or a `/dev` that is not the runtime's tmpfs (a volume, a bind in any
/// spelling, or none: what is there is then the image's or the host's).
fn plan_mount_unsafe(mounts: &[Mount]) -> Option<String> {
    if let Some(m) = mounts
        .iter()
        .find(|m| at_or_under(&m.destination, Path::new(PLAN_MOUNT)))
    {
        return Some(format!(
            "the container's own mount at {} covers the plan directory {PLAN_MOUNT}",
            m.destination
        ));
    }
    let dev = Path::new("/dev");
    let mut devs = mounts.iter().filter(|m| Path::new(&m.destination) == dev);
    let runtime_s = |m: &&Mount| {
        m.r#type == "tmpfs"
            && !Path::new(&m.source).is_absolute()
            && !m.options.iter().any(|o| o == "bind" || o == "rbind")
    };
    match devs.clone().find(|m| !runtime_s(m)) {
        Some(m) => Some(format!(
            "the container's /dev is its own mount ({} from {}), not the runtime's tmpfs: the plan directory {PLAN_MOUNT} would be made in it",
            if m.r#type.is_empty() { "no type" } else { &m.r#type },
            m.source
        )),
        None if devs.next().is_none() => Some(format!(
            "the container has no tmpfs of the runtime's at /dev: what is at {PLAN_MOUNT} is the image's"
        )),
        None => None,
    }
}

/// Whether a container path `dest` is `dir` or below it (a path with `..` counts as below).
fn at_or_under(dest: &str, dir: &Path) -> bool {
    let dest = Path::new(dest);
    dest.components()
        .any(|c| c == std::path::Component::ParentDir)
        || dest.starts_with(dir)
}

impl Planner {
    fn new(
        config: HookConfig,
        plugin: &str,
        metrics: &Arc<Metrics>,
        ranks: &Arc<Ranks>,
    ) -> Planner {
        Planner {
            host: Host::of(&config)
                .keeping_inventory()
                .counting_reads(metrics.inventory_reads()),
            dirs: PlanDirs::new(&config.nri_dir),
            config,
            scope: format!("nri:{plugin}"),
            me: OnceLock::new(),
            own_pod: std::fs::read_to_string("/proc/self/cgroup")
                .ok()
                .as_deref()
                .and_then(pod_uid_of_cgroup),
            attempts: Attempts::default(),
            metrics: Arc::clone(metrics),
            ranks: Arc::clone(ranks),
        }
    }

    /// Why `c` of `pod` is the plugin's own (its pod, or a container that mounts the host's
    /// plans or claims), if it is.
    fn plugin_s_own(&self, pod: &PodSandbox, c: &Container) -> Option<String> {
        if self.own_pod.as_deref().is_some_and(|uid| uid == pod.uid) {
            return Some("the plugin's own pod".into());
        }
        c.mounts.iter().find_map(|m| {
            let source = Path::new(&m.source);
            [&self.config.nri_dir, &self.config.claims_dir]
                .into_iter()
                .find(|d| source.is_absolute() && paths_overlap(source, d))
                .map(|d| format!("it mounts {} (the plugin's {})", m.source, d.display()))
        })
    }

    fn wait(&self) -> Duration {
        Duration::from_millis(self.config.claim_wait_ms).min(MAX_CLAIM_WAIT)
    }

    /// This plugin as the holder of container `id`'s claims: they last while the plugin runs,
    /// and are taken again at every Synchronize.
    fn holder(&self, id: &str) -> Result<Holder, Problem> {
        let me = match self.me.get() {
            Some(me) => me.clone(),
            None => match self.host.holder("", &self.scope, std::process::id()) {
                Ok(Some(me)) => self.me.get_or_init(|| me).clone(),
                Ok(None) => {
                    return Err(Problem::claim(Why(
                        "the plugin's own /proc entry is missing".into(),
                    )))
                }
                Err(e) => return Err(Problem::claim(e)),
            },
        };
        Ok(Holder {
            container: id.to_string(),
            ..me
        })
    }

    /// Claims `gpus` for container `id`, held by this plugin ([`crate::apply::claim`]).
    fn claim(&self, id: &str, gpus: &[String]) -> ClaimResult {
        if gpus.is_empty() {
            return ClaimResult::Skipped;
        }
        match self.holder(id) {
            Ok(holder) => claim(
                &self.config.claims_dir,
                &self.host.root,
                &holder,
                gpus,
                self.wait(),
            ),
            Err(e) => {
                log::warn!("container {}: no GPU claim: {e}", escape(id));
                ClaimResult::Failed(e)
            }
        }
    }

    /// Releases container `id`'s claims and removes its plan files. A claim another live
    /// instance of the plugin took over stays (see [`cpuplan::release`]): that one releases it.
    fn forget(&self, id: &ContainerId) {
        self.ranks.remove(id.as_str());
        let me = self.me.get().map(|me| Holder {
            container: id.to_string(),
            ..me.clone()
        });
        if let Err(e) = cpuplan::release(
            &self.config.claims_dir,
            &self.host.root,
            id.as_str(),
            &self.scope,
            me.as_ref(),
            self.wait(),
        ) {
            log::warn!("container {id}: cannot release GPU claims: {e}");
        }
        if self.dirs.remove(id) {
            log::info!("container {id}: gone, its plan and claims released");
        }
    }

    /// [`Planner::forget`] for the id `event` names, once it is checked; a bad id removes
    /// nothing.
    fn forget_named(&self, event: &str, id: &str) {
        match ContainerId::parse(id) {
            Ok(id) => {
                if event == "StopContainer" {
                    self.attempts.stopped(&id);
                }
                self.forget(&id)
            }
            Err(e) => log::warn!("nri: {event}: {e}: nothing released or removed"),
        }
    }

    /// A planning problem, judged by the one allow/deny rule ([`verdict`]): under `allow` the
    /// container is created unchanged, under `deny` not at all.
    fn problem(&self, id: &str, problem: Problem) -> Result<ContainerAdjustment, Refused> {
        self.metrics.problem(problem.cause());
        self.metrics.outcome(Request::Create, Outcome::Problem);
        log::warn!("container {id}: planning problem: {problem}");
        verdict(self.config.on_error, &problem)
            .map(|()| ContainerAdjustment::default())
            .map_err(|r| Refused::Create {
                id: id.to_string(),
                problem: r.problem,
            })
    }

    fn plan(&self, pod: &PodSandbox, c: &Container) -> Result<ContainerAdjustment, Refused> {
        let id = match ContainerId::parse(&c.id) {
            Ok(id) => id,
            Err(e) => return self.problem(&crate::logging::escape(&c.id), Problem::id(e)),
        };
        if let Some(why) = self.plugin_s_own(pod, c) {
            log::info!(
                "container {id} ({}/{}): not planned: {why}",
                pod.namespace,
                c.name
            );
            self.metrics.outcome(Request::Create, Outcome::Ignored);
            return Ok(ContainerAdjustment::default());
        }
        let id_text = id.to_string();
        let id = &id;
        let spec = match container_spec(pod, c) {
            Ok(s) => s,
            Err(e) => return self.problem(&id_text, Problem::spec(e)),
        };
        let container = Ctr {
            id: c.id.clone(),
            pid: None,
            bundle: None,
        };
        let mut inputs = read(&self.host, &self.config, container, spec, &Live::default());
        let unsafe_mount = plan_mount_unsafe(&c.mounts);
        if let Some(why) = &unsafe_mount {
            inputs.notes.push(format!("{why}: env only, no plan mount"));
        }
        let retried = match (&unsafe_mount, self.config.on_error) {
            (None, OnError::Allow) => self.attempts.never_started(&pod.id, &c.name),
            _ => None,
        };
        if let Some(before) = &retried {
            inputs.notes.push(format!(
                "the pod's earlier {} ({before}) got the plan mount and never ran: env only, no plan mount",
                c.name,
            ));
        }
        let mount = unsafe_mount.is_none() && retried.is_none();
        let mut course = Course::new(&inputs, &self.config, Ask::Create);
        if let Some(p) = &course.decision().problem {
            return self.problem(&id_text, p.clone());
        }
        let claims = course.decision().claims.clone();
        course.claimed(self.claim(&c.id, &claims));
        let (cpus, quota, period) =
            kubelet_cpu(c.linux.as_ref().and_then(|l| l.resources.as_ref()));
        let Created { claims, held } = Created::of(course.claim(), &claims);
        let record = Record {
            claims,
            held,
            cpus,
            quota,
            period,
            generation: 1,
        };
        let mut fallbacks = fallbacks_of(course.decision(), course.claim());
        if !mount {
            fallbacks.push(Fallback::EnvOnly);
        }
        let decision = course.into_decision();
        let placement = self.placement(id, c, &inputs, &decision);
        let mut edit = SpecEdit::new(&inputs, &decision, &self.config)
            .with_worker_placement(placement.as_ref().map(|p| p.workers.clone()));
        edit.dir = PathBuf::from(PLAN_MOUNT);
        if mount && !inputs.spec.sets_env(PLAN_PATH) {
            edit.env
                .push((PLAN_PATH.into(), format!("{PLAN_MOUNT}/{PLAN_JSON}")));
        }
        match self.dirs.write(id, &edit, &record) {
            Ok(dir) => {
                for note in &inputs.notes {
                    log::info!("container {id}: {note}");
                }
                log::info!("{}", decision.summary(&inputs));
                if mount {
                    self.attempts.mounted(&pod.id, &c.name, id);
                }
                self.place_ranks(id, placement);
                self.metrics
                    .outcome(Request::Create, labels_of(&decision).0);
                for f in fallbacks {
                    self.metrics.fallback(f);
                }
                Ok(adjustment(&edit, mount.then_some(dir.as_path())))
            }
            Err(e) => {
                self.forget(id);
                self.problem(&id_text, Problem::files(e))
            }
        }
    }
}

/// The events the plugin subscribes to: CreateContainer (to place the container),
/// UpdateContainer (to plan again inside kubelet's new CPUs), StopContainer and
/// RemoveContainer (to release what it was given).
pub const EVENTS: EventMask = EventMask::of(&[
    Event::CreateContainer,
    Event::UpdateContainer,
    Event::StopContainer,
    Event::RemoveContainer,
]);

impl Plugin for PlanHandler {
    fn events(&self) -> EventMask {
        EVENTS
    }

    /// A configuration from the runtime (non-empty) replaces the one in force (one that does
    /// not load fails the registration, naming the key); then the log keeps the `log_level` of
    /// the configuration in force and, unless `--log` named the file, goes to its `log`.
    fn configure(&self, req: &ConfigureRequest) -> PluginResult<()> {
        Ok(self.configure_with(&req.config)?)
    }

    fn create_container(
        &self,
        pod: &PodSandbox,
        container: &Container,
    ) -> PluginResult<CreateContainerResponse> {
        let planned = self.timed(Request::Create, || self.planner().plan(pod, container));
        Ok(planned?.into())
    }

    fn update_container(
        &self,
        pod: &PodSandbox,
        container: &Container,
        resources: Option<&LinuxResources>,
    ) -> PluginResult<UpdateContainerResponse> {
        let updated = self.timed(Request::Update, || {
            self.planner().update(pod, container, resources)
        });
        Ok(updated?)
    }

    /// Registered: ready; closed: not; a heartbeat: the stub's loop runs (live).
    fn lifecycle(&self, event: Lifecycle) {
        match event {
            Lifecycle::Registered => {
                self.health.set(Phase::Registered);
                self.metrics.registered(true);
            }
            Lifecycle::Closed => {
                self.health.set(Phase::Connecting);
                self.metrics.registered(false);
            }
            Lifecycle::Heartbeat => self.health.heartbeat(),
        }
    }

    fn stop_container(
        &self,
        _pod: &PodSandbox,
        container: &Container,
    ) -> PluginResult<Vec<ContainerUpdate>> {
        self.planner().forget_named("StopContainer", &container.id);
        Ok(Vec::new())
    }

    fn remove_container(&self, _pod: &PodSandbox, container: &Container) -> PluginResult<()> {
        self.planner()
            .forget_named("RemoveContainer", &container.id);
        Ok(())
    }

    fn synchronize(
        &self,
        pods: &[PodSandbox],
        containers: &[Container],
    ) -> PluginResult<Vec<ContainerUpdate>> {
        Ok(self.planner().synchronize(pods, containers))
    }
}

mod configure;
mod ranks;
mod update;
use update::kubelet_cpu;

#[cfg(test)]
mod tests;
