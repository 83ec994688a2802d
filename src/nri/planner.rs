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

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use cpuplan::{ClaimOutcome, Holder};

use crate::config::{HookConfig, OnError};
use crate::decide::{decide, ClaimResult, Decision};
use crate::edit::SpecEdit;
use crate::read::host::Host;
use crate::read::{read, Container as Ctr, Live};

use super::from_edit::adjustment;
use super::handler::Handler;
use super::plandir::{safe_id, PlanDirs, Record};
use super::proto::{Container, ContainerAdjustment, ContainerUpdate, PodSandbox};
use super::spec::container_spec;

/// The longest the plugin waits for the claims lock: well below the runtime's 2 s plugin timeout.
pub const MAX_CLAIM_WAIT: Duration = Duration::from_millis(500);

/// What the runtime's plugin configuration is called in messages.
pub const RUNTIME_CONFIG: &str = "<the runtime's NRI plugin config>";

/// The handler that plans containers as the hook does.
#[derive(Debug)]
pub struct PlanHandler {
    /// The planner of the configuration in force (replaced when the runtime gives one).
    planner: RwLock<Arc<Planner>>,
    /// The plugin's `INDEX-NAME`.
    plugin: String,
    /// Whether `--log` named the log file (a configuration's `log` is then not opened).
    log_given: bool,
}

impl PlanHandler {
    /// A handler planning with `config` as the plugin named `plugin` (`10-cpuplan`); with
    /// `log_given`, a configuration the runtime gives keeps the log file `--log` named.
    pub fn new(config: HookConfig, plugin: &str, log_given: bool) -> PlanHandler {
        PlanHandler {
            planner: RwLock::new(Arc::new(Planner::new(config, plugin))),
            plugin: plugin.to_string(),
            log_given,
        }
    }

    /// The planner in force.
    fn planner(&self) -> Arc<Planner> {
        match self.planner.read() {
            Ok(p) => Arc::clone(&p),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> HookConfig {
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
}

impl Planner {
    fn new(config: HookConfig, plugin: &str) -> Planner {
        Planner {
            host: Host::of(&config).keeping_inventory(),
            dirs: PlanDirs::new(&config.nri_dir),
            config,
            scope: format!("nri:{plugin}"),
            me: OnceLock::new(),
        }
    }

    fn wait(&self) -> Duration {
        Duration::from_millis(self.config.claim_wait_ms).min(MAX_CLAIM_WAIT)
    }

    /// This plugin as the holder of container `id`'s claims: they last while the plugin runs,
    /// and are taken again at every Synchronize.
    fn holder(&self, id: &str) -> Result<Holder, String> {
        let me = match self.me.get() {
            Some(me) => me.clone(),
            None => match self.host.holder("", &self.scope, std::process::id()) {
                Ok(Some(me)) => self.me.get_or_init(|| me).clone(),
                Ok(None) => return Err("the plugin's own /proc entry is missing".into()),
                Err(e) => return Err(e.to_string()),
            },
        };
        Ok(Holder {
            container: id.to_string(),
            ..me
        })
    }

    fn claim(&self, id: &str, gpus: &[String]) -> ClaimResult {
        if gpus.is_empty() {
            return ClaimResult::Skipped;
        }
        let holder = match self.holder(id) {
            Ok(h) => h,
            Err(e) => return ClaimResult::Failed(e),
        };
        match cpuplan::claim_gpus(
            &self.config.claims_dir,
            &self.host.root,
            &holder,
            gpus,
            self.wait(),
        ) {
            Ok(ClaimOutcome::Claimed) => ClaimResult::Claimed,
            Ok(ClaimOutcome::Held { address, by }) => {
                // Who holds it goes to the host's log only: the plan is the tenant's.
                log::info!(
                    "container {id}: GPU {address} is held by live container {} (pid {}, scope {})",
                    crate::logging::escape(&by.container),
                    by.pid,
                    crate::logging::escape(&by.scope)
                );
                ClaimResult::held(&address)
            }
            Err(e) => ClaimResult::Failed(e.to_string()),
        }
    }

    /// Releases container `id`'s claims and removes its plan files.
    fn forget(&self, id: &str) {
        if let Err(e) = cpuplan::release(&self.config.claims_dir, id, &self.scope, self.wait()) {
            log::warn!("container {id}: cannot release GPU claims: {e}");
        }
        if self.dirs.remove(id) {
            log::info!("container {id}: gone, its plan and claims released");
        }
    }

    /// A planning problem: under `allow` the container is created unchanged, under `deny` not at all.
    fn problem(&self, id: &str, problem: &str) -> Result<ContainerAdjustment, String> {
        log::warn!("container {id}: planning problem: {problem}");
        match self.config.on_error {
            OnError::Allow => Ok(ContainerAdjustment::default()),
            OnError::Deny => Err(format!("cpuplan: container {id}: {problem}")),
        }
    }

    fn plan(&self, pod: &PodSandbox, c: &Container) -> Result<ContainerAdjustment, String> {
        let id = crate::logging::escape(&c.id).into_owned();
        if !safe_id(&c.id) {
            return self.problem(&id, "the container id is not a file name");
        }
        let spec = match container_spec(pod, c) {
            Ok(s) => s,
            Err(e) => return self.problem(&id, &e),
        };
        let container = Ctr {
            id: c.id.clone(),
            pid: None,
            bundle: None,
        };
        let inputs = read(&self.host, &self.config, container, spec, &Live::default());
        let decision = decide(&inputs, &self.config);
        if let Some(p) = &decision.problem {
            return self.problem(&id, p);
        }
        let claimed = self.claim(&c.id, &decision.claims);
        if let ClaimResult::Failed(why) = &claimed {
            log::warn!("container {id}: no GPU claim: {why}");
        }
        let record = Record {
            claims: match claimed {
                ClaimResult::Claimed => decision.claims.clone(),
                _ => Vec::new(),
            },
        };
        let decision: Decision = decision.after_claim(&claimed);
        let edit = SpecEdit::new(&inputs, &decision, &self.config);
        match self.dirs.write(&c.id, &edit, &record) {
            Ok(dir) => {
                for note in &inputs.notes {
                    log::info!("container {id}: {note}");
                }
                log::info!("{}", decision.summary(&inputs));
                Ok(adjustment(&edit, &dir))
            }
            Err(e) => {
                self.forget(&c.id);
                self.problem(&id, &e.to_string())
            }
        }
    }
}

impl Handler for PlanHandler {
    /// A configuration from the runtime (non-empty `text`) replaces the one in force (one that
    /// does not parse fails the registration, naming the key); then the log keeps the
    /// `log_level` of the configuration in force and, unless `--log` named the file, goes to its
    /// `log`.
    fn configure(&self, text: &str, _runtime: &str, _version: &str) -> Result<(), String> {
        let given = !text.trim().is_empty();
        if given {
            let config = HookConfig::parse(Path::new(RUNTIME_CONFIG), text.as_bytes())
                .map_err(|e| e.to_string())?;
            let planner = Arc::new(Planner::new(config, &self.plugin));
            match self.planner.write() {
                Ok(mut p) => *p = planner,
                Err(poisoned) => *poisoned.into_inner() = planner,
            }
        }
        let config = self.config();
        crate::logging::set_level(config.log_level);
        if !self.log_given {
            if let Some(log) = &config.log {
                crate::logging::init(Some(log));
            }
        }
        if given {
            log::info!(
                "nri: planning with {RUNTIME_CONFIG} (nri_dir {}, claims_dir {})",
                config.nri_dir.display(),
                config.claims_dir.display()
            );
        }
        Ok(())
    }

    fn create_container(
        &self,
        pod: &PodSandbox,
        container: &Container,
    ) -> Result<ContainerAdjustment, String> {
        self.planner().plan(pod, container)
    }

    fn stop_container(&self, _pod: &PodSandbox, container: &Container) -> Vec<ContainerUpdate> {
        self.planner().forget(&container.id);
        Vec::new()
    }

    fn remove_container(&self, _pod: &PodSandbox, container: &Container) {
        self.planner().forget(&container.id);
    }

    fn synchronize(
        &self,
        pods: &[PodSandbox],
        containers: &[Container],
    ) -> Result<Vec<ContainerUpdate>, String> {
        self.planner().synchronize(pods, containers)
    }
}

impl Planner {
    fn synchronize(
        &self,
        pods: &[PodSandbox],
        containers: &[Container],
    ) -> Result<Vec<ContainerUpdate>, String> {
        // A runtime (re)connecting may come after a change of GPUs: read them anew.
        self.host.forget_inventory();
        let running: BTreeSet<&str> = containers.iter().map(|c| c.id.as_str()).collect();
        let (mut kept, mut dropped) = (0, 0);
        let ids = self.dirs.ids();
        self.dirs.sweep(&ids);
        for id in ids {
            if !running.contains(id.as_str()) {
                self.forget(&id);
                dropped += 1;
                continue;
            }
            kept += 1;
            let Some(record) = self.dirs.record(&id) else {
                continue;
            };
            match self.claim(&id, &record.claims) {
                ClaimResult::Held(why) | ClaimResult::Failed(why) => {
                    log::warn!("container {id}: its GPU claim could not be taken again: {why}")
                }
                ClaimResult::Claimed | ClaimResult::Skipped => {}
            }
        }
        log::info!(
            "synchronized with {} pods and {} containers: kept the plans of {kept}, dropped {dropped}",
            pods.len(),
            containers.len()
        );
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_s_config_replaces_the_file_s_and_a_bad_one_fails_configure() {
        let h = PlanHandler::new(HookConfig::default(), "10-cpuplan", true);
        h.configure("", "containerd", "1.7").unwrap();
        assert_eq!(h.config(), HookConfig::default(), "no config given: kept");
        h.configure(
            r#"{"nri_dir": "/t/nri", "claims_dir": "/t/claims", "on_error": "deny"}"#,
            "containerd",
            "1.7",
        )
        .unwrap();
        let c = h.config();
        assert_eq!(c.nri_dir, Path::new("/t/nri"));
        assert_eq!(c.claims_dir, Path::new("/t/claims"));
        assert_eq!(c.on_error, OnError::Deny);
        assert_eq!(h.planner().dirs.dir("x"), Path::new("/t/nri/x"));
        let e = h
            .configure(r#"{"step_thread_core": "fast"}"#, "containerd", "1.7")
            .unwrap_err();
        assert!(
            e.contains(RUNTIME_CONFIG) && e.contains("step_thread_core"),
            "{e}"
        );
        assert_eq!(h.config(), c, "a bad config changes nothing");
        h.configure(r#"{"bogus": 1}"#, "containerd", "1.7")
            .unwrap_err();
    }
}
