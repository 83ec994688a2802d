//! Whether a running container's plan is stale: its cgroup's CPUs or quota no longer what the
//! plan was made for (kubelet's CPU manager set another cpuset, an in-place resize another
//! quota, after the hook wrote the plan once). Pure: the caller reads both sides.

use cpuplan::CpuSet;
use serde::Serialize;

/// One way the cgroup now differs from the plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "what", rename_all = "lowercase")]
pub enum Drift {
    /// The cgroup's CPUs are not the plan's mask.
    Cpuset {
        /// The CPUs the cgroup gives now.
        now: CpuSet,
        /// The plan's mask.
        plan: CpuSet,
    },
    /// The cgroup's quota is not the one the plan was made with (in CPUs; `null`: none).
    Quota {
        /// The tightest quota now.
        now: Option<f64>,
        /// The quota the plan recorded.
        plan: Option<f64>,
    },
}

/// A quota in words: `2 CPUs`, `none`.
fn quota_text(q: Option<f64>) -> String {
    q.map_or_else(|| "none".into(), |q| format!("{q} CPUs"))
}

impl std::fmt::Display for Drift {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Drift::Cpuset { now, plan } => write!(f, "cpuset {now} (plan {plan})"),
            Drift::Quota { now, plan } => {
                write!(f, "quota {} (plan {})", quota_text(*now), quota_text(*plan))
            }
        }
    }
}

/// What the plan was made for: its mask, and the quota it recorded (`None`: not recorded, so
/// not compared).
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    /// The plan's mask.
    pub mask: CpuSet,
    /// The quota recorded beside it, where one was: `Some(None)` is "no quota".
    pub quota: Option<Option<f64>>,
}

/// The cgroup now.
#[derive(Debug, Clone, PartialEq)]
pub struct Now {
    /// The CPUs it gives.
    pub cpus: CpuSet,
    /// Its tightest quota.
    pub quota: Option<f64>,
}

/// Two quotas the same (a quota is a ratio of two integers: equal within a millionth of a CPU).
fn same_quota(a: Option<f64>, b: Option<f64>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => (a - b).abs() < 1e-6,
        _ => false,
    }
}

/// How the cgroup `now` differs from what the plan was made for; empty: the plan is current.
pub fn drifts(planned: &Planned, now: &Now) -> Vec<Drift> {
    let mut out = Vec::new();
    if now.cpus != planned.mask {
        out.push(Drift::Cpuset {
            now: now.cpus.clone(),
            plan: planned.mask.clone(),
        });
    }
    if let Some(plan) = planned.quota {
        if !same_quota(now.quota, plan) {
            out.push(Drift::Quota {
                now: now.quota,
                plan,
            });
        }
    }
    out
}

/// The drifts in one line: `stale: cpuset 0-1 (plan 1); quota 2 CPUs (plan 1 CPUs)`, or
/// `current` when there are none.
pub fn summary(drifts: &[Drift]) -> String {
    if drifts.is_empty() {
        return "current".into();
    }
    let parts: Vec<String> = drifts.iter().map(Drift::to_string).collect();
    format!("stale: {}", parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpus(s: &str) -> CpuSet {
        s.parse().unwrap()
    }

    fn planned(mask: &str, quota: Option<Option<f64>>) -> Planned {
        Planned {
            mask: cpus(mask),
            quota,
        }
    }

    fn now(c: &str, quota: Option<f64>) -> Now {
        Now {
            cpus: cpus(c),
            quota,
        }
    }

    #[test]
    fn the_same_cpus_and_quota_are_current() {
        let p = planned("1", Some(Some(1.0)));
        assert_eq!(drifts(&p, &now("1", Some(1.0))), vec![]);
        assert_eq!(summary(&drifts(&p, &now("1", Some(1.0)))), "current");
        let none = planned("0-3", Some(None));
        assert_eq!(drifts(&none, &now("0-3", None)), vec![]);
    }

    #[test]
    fn kubelet_s_shared_pool_over_the_narrowed_cpuset_is_stale() {
        let d = drifts(&planned("1", Some(Some(1.0))), &now("0-1", Some(1.0)));
        assert_eq!(
            d,
            vec![Drift::Cpuset {
                now: cpus("0-1"),
                plan: cpus("1")
            }]
        );
        assert_eq!(summary(&d), "stale: cpuset 0-1 (plan 1)");
        // A narrower set is stale too (an exclusive set kubelet gave).
        let d = drifts(&planned("0-1", Some(None)), &now("0", None));
        assert_eq!(summary(&d), "stale: cpuset 0 (plan 0-1)");
    }

    #[test]
    fn a_resized_quota_is_stale_and_both_drifts_are_said() {
        let d = drifts(&planned("1", Some(Some(0.5))), &now("1", Some(2.0)));
        assert_eq!(summary(&d), "stale: quota 2 CPUs (plan 0.5 CPUs)");
        let d = drifts(&planned("1", Some(Some(0.5))), &now("0-1", None));
        assert_eq!(
            summary(&d),
            "stale: cpuset 0-1 (plan 1); quota none (plan 0.5 CPUs)"
        );
        let d = drifts(&planned("1", Some(None)), &now("1", Some(1.0)));
        assert_eq!(summary(&d), "stale: quota 1 CPUs (plan none)");
    }

    #[test]
    fn a_quota_not_recorded_is_not_compared_and_rounding_is_not_a_drift() {
        assert_eq!(drifts(&planned("1", None), &now("1", Some(7.0))), vec![]);
        let third = 100_000.0 / 300_000.0;
        assert_eq!(
            drifts(&planned("1", Some(Some(third))), &now("1", Some(1.0 / 3.0))),
            vec![]
        );
    }

    #[test]
    fn drifts_serialise_with_what_they_are() {
        let d = drifts(&planned("1", Some(Some(0.5))), &now("0-1", Some(2.0)));
        assert_eq!(
            serde_json::to_value(&d).unwrap(),
            serde_json::json!([
                {"what": "cpuset", "now": "0-1", "plan": "1"},
                {"what": "quota", "now": 2.0, "plan": 0.5}
            ])
        );
    }
}
