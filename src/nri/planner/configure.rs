//! The runtime's Configure (the configuration in force, the plan directory held) and
//! Synchronize (what belongs to containers that are gone dropped, the rest claimed again).

use super::*;

impl PlanHandler {
    /// Configure with the runtime's plugin configuration `text` (empty: none given).
    pub(crate) fn configure_with(&self, text: &str) -> Result<(), crate::nri::NriError> {
        let given = !text.trim().is_empty();
        let config = match given {
            true => HookConfig::parse(Path::new(RUNTIME_CONFIG), text.as_bytes())?
                .on_host(Path::new(RUNTIME_CONFIG))?,
            false => self.config(),
        };
        crate::logging::set_level(config.log_level);
        if !self.log_given {
            if let Some(log) = &config.log {
                crate::logging::init(Some(log));
            }
        }
        if let Err(e) = self.hold_dir(&config.nri_dir) {
            log::error!("nri: {e}");
            return Err(e);
        }
        if given {
            log::info!(
                "nri: planning with {RUNTIME_CONFIG} (nri_dir {}, claims_dir {})",
                config.nri_dir.display(),
                config.claims_dir.display()
            );
            let planner = Arc::new(Planner::new(
                config,
                &self.plugin,
                &self.metrics,
                &self.ranks,
            ));
            match self.planner.write() {
                Ok(mut p) => *p = planner,
                Err(poisoned) => *poisoned.into_inner() = planner,
            }
        }
        Ok(())
    }

    /// Holds `nri_dir` where the plugin must and does not yet: one it holds another directory
    /// for, or one launched by the runtime (its configuration in force known only now). It
    /// does not wait: another plugin serving the directory fails the registration.
    fn hold_dir(&self, nri_dir: &Path) -> Result<(), crate::nri::NriError> {
        let mut held = self.instance.lock().unwrap_or_else(|e| e.into_inner());
        let wanted = match held.as_ref() {
            Some(i) => i.dir() != nri_dir,
            None => self.hold_at_configure.load(Ordering::Relaxed),
        };
        if wanted {
            *held = Some(Instance::acquire(nri_dir, false)?);
        }
        Ok(())
    }
}

impl Planner {
    /// Drops what belongs to containers that are gone (only what carries the plugin's record),
    /// and claims again for those that run.
    pub(super) fn synchronize(
        &self,
        pods: &[PodSandbox],
        containers: &[Container],
    ) -> Vec<ContainerUpdate> {
        // A runtime (re)connecting may come after a change of GPUs: read them anew.
        self.host.forget_inventory();
        let running: BTreeSet<&str> = containers.iter().map(|c| c.id.as_str()).collect();
        let live_pods: Vec<&str> = pods.iter().map(|p| p.id.as_str()).collect();
        self.attempts.keep_pods(&live_pods);
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
            if let Some(c) = containers.iter().find(|c| c.id == id.as_str()) {
                let pod = pods.iter().find(|p| p.id == c.pod_sandbox_id);
                self.restore_ranks(&id, c, pod);
            }
            let Some(record) = self.dirs.record(&id) else {
                continue;
            };
            match self.claim(id.as_str(), &record.claims) {
                ClaimResult::Held(why) => {
                    log::warn!("container {id}: its GPU claim could not be taken again: {why}")
                }
                ClaimResult::Failed(why) => {
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
        Vec::new()
    }
}
