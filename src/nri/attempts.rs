//! Containers whose plan mount may have stopped their start: the last line of defence. The
//! plugin cannot see an image's own files (NRI gives it the spec, not the root filesystem), so
//! it mounts the plan in the `/dev` the runtime makes ([`super::planner::PLAN_MOUNT`]), where
//! no file of the image can be; should a runtime still fail a start on it, a container that
//! got a plan mount and was never stopped never ran (a start that fails leaves no task, so no
//! StopContainer); when its pod creates a container of the same name again (kubelet's next
//! attempt), under `on_error: allow`, the plugin gives that one its env and no plan mount.

use std::collections::VecDeque;
use std::sync::Mutex;

use super::ids::ContainerId;

/// The most first attempts remembered (the oldest go first); Synchronize drops those of pods
/// that are gone.
pub const MAX_ATTEMPTS: usize = 4096;

/// One container given a plan mount, not stopped since.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Attempt {
    pod: String,
    name: String,
    id: ContainerId,
}

/// The containers given a plan mount that have not stopped (so not run) yet.
#[derive(Debug, Default)]
pub struct Attempts(Mutex<VecDeque<Attempt>>);

impl Attempts {
    fn with<T>(&self, f: impl FnOnce(&mut VecDeque<Attempt>) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Container `id`, named `name` in pod sandbox `pod`, was given a plan mount.
    pub fn mounted(&self, pod: &str, name: &str, id: &ContainerId) {
        self.with(|a| {
            a.retain(|x| !(x.pod == pod && x.name == name));
            if a.len() >= MAX_ATTEMPTS {
                a.pop_front();
            }
            a.push_back(Attempt {
                pod: pod.into(),
                name: name.into(),
                id: id.clone(),
            });
        })
    }

    /// The earlier container of that name in that pod that was given a plan mount and never
    /// stopped, if any.
    pub fn never_started(&self, pod: &str, name: &str) -> Option<ContainerId> {
        self.with(|a| {
            a.iter()
                .find(|x| x.pod == pod && x.name == name)
                .map(|x| x.id.clone())
        })
    }

    /// Container `id` stopped: it ran.
    pub fn stopped(&self, id: &ContainerId) {
        self.with(|a| a.retain(|x| &x.id != id))
    }

    /// Forgets the attempts of pods not in `pods` (at Synchronize).
    pub fn keep_pods(&self, pods: &[&str]) {
        self.with(|a| a.retain(|x| pods.contains(&x.pod.as_str())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> ContainerId {
        ContainerId::parse(s).unwrap()
    }

    #[test]
    fn an_attempt_that_never_stopped_is_remembered_by_pod_and_name() {
        let a = Attempts::default();
        assert_eq!(a.never_started("p", "app"), None);
        a.mounted("p", "app", &id("c1"));
        assert_eq!(a.never_started("p", "app"), Some(id("c1")));
        assert_eq!(a.never_started("p", "other"), None);
        assert_eq!(a.never_started("q", "app"), None);
        a.stopped(&id("c1"));
        assert_eq!(a.never_started("p", "app"), None, "it ran");
        a.mounted("p", "app", &id("c2"));
        a.mounted("p", "app", &id("c3"));
        assert_eq!(a.never_started("p", "app"), Some(id("c3")), "the latest");
        a.keep_pods(&["q"]);
        assert_eq!(a.never_started("p", "app"), None, "its pod is gone");
    }

    #[test]
    fn at_most_max_attempts_are_kept() {
        let a = Attempts::default();
        for i in 0..MAX_ATTEMPTS + 10 {
            a.mounted(&format!("p{i}"), "app", &id(&format!("c{i}")));
        }
        assert_eq!(a.never_started("p0", "app"), None, "the oldest went");
        assert!(a
            .never_started(&format!("p{MAX_ATTEMPTS}"), "app")
            .is_some());
        assert_eq!(a.0.lock().unwrap().len(), MAX_ATTEMPTS);
    }
}
