//! The plugin's Prometheus metrics (`prometheus-client`), served by [`super::http`] at
//! `/metrics` in the Prometheus text format or, asked for, OpenMetrics ([`format`]), with the
//! `process_*` metrics of Prometheus's client libraries ([`process`]). Every label takes a
//! value from a fixed list (an outcome, a cause, a request): no container id, pod or GPU is
//! ever a label, and every family is served from the start, each of its label values at 0.

mod format;
mod process;

pub use format::{convert, Format};
pub use process::PROCESS;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

use super::ranks::Counts;
use crate::decide::{ClaimResult, Decision};

/// What became of a container the plugin was asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Its plan pins a GPU worker's or the API server's threads.
    Pinned,
    /// Its pools are sized to its quota, nothing pinned (`auto` found nothing to pin, a GPU
    /// held by another container, or a CPU setting that pins nothing).
    Sized,
    /// Its setting is `off`: pools sized, nothing pinned, as asked.
    Off,
    /// A planning problem: under `allow` the container runs unplanned, under `deny` it is refused.
    Problem,
    /// Not planned: the plugin's own pod, or a container that mounts the plugin's directories.
    Ignored,
}

impl Outcome {
    /// Its label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Pinned => "pinned",
            Outcome::Sized => "sized",
            Outcome::Off => "off",
            Outcome::Problem => "problem",
            Outcome::Ignored => "ignored",
        }
    }
}

/// A way the plan fell short of what was asked while the container was still planned (the
/// `cause` of `cpuplan_nri_fallbacks_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fallback {
    /// The GPUs' local CPUs could not honour the setting: planned over the whole mask.
    CpusetKept,
    /// Another container holds one of its GPUs: nothing pinned.
    ClaimHeld,
    /// Its GPUs could not be claimed (lock busy, directory unwritable): planned without a claim.
    ClaimFailed,
    /// Its env only, no plan mount (its own mount covers the plan directory, its `/dev` is not
    /// the runtime's, or an earlier attempt with the mount never ran).
    EnvOnly,
}

impl Fallback {
    /// Its label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Fallback::CpusetKept => "cpuset_kept",
            Fallback::ClaimHeld => "claim_held",
            Fallback::ClaimFailed => "claim_failed",
            Fallback::EnvOnly => "env_only",
        }
    }
}

/// The NRI request a handling time is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Request {
    /// CreateContainer.
    Create,
    /// UpdateContainer.
    Update,
}

impl Request {
    /// Its label value, and its name in NRI.
    pub fn as_str(self) -> &'static str {
        match self {
            Request::Create => "CreateContainer",
            Request::Update => "UpdateContainer",
        }
    }
}

/// The one place the labels are taken from what a decision says: its outcome, and where it has
/// a problem, its cause's label ([`crate::decide::Problem::cause`], a fixed list).
pub fn labels_of(decision: &Decision) -> (Outcome, Option<&'static str>) {
    if let Some(p) = &decision.problem {
        return (Outcome::Problem, Some(p.cause()));
    }
    let outcome = if !decision.plan.pinned().is_empty() {
        Outcome::Pinned
    } else if decision.plan.setting == cpuplan::Setting::Off {
        Outcome::Off
    } else {
        Outcome::Sized
    };
    (outcome, None)
}

/// The fallbacks a planned container met: the cpuset rule's (from the decision) and the claim's.
pub fn fallbacks_of(decision: &Decision, claim: &ClaimResult) -> Vec<Fallback> {
    let mut out = Vec::new();
    if decision.over_mask {
        out.push(Fallback::CpusetKept);
    }
    match claim {
        ClaimResult::Held(_) => out.push(Fallback::ClaimHeld),
        ClaimResult::Failed(_) => out.push(Fallback::ClaimFailed),
        ClaimResult::Claimed | ClaimResult::Skipped => {}
    }
    out
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    request: &'static str,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PlacementLabels {
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CauseLabels {
    cause: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    request: &'static str,
}

/// Every metric's name (after the `cpuplan_` prefix) and help line, in the order served:
/// the one list docs/kubernetes.md's table is checked against.
const HELP: [(&str, &str); 11] = [
    ("build", "The plugin's version"),
    ("nri_containers", "Containers handled at CreateContainer and UpdateContainer, by outcome (pinned, sized, off, problem, ignored)"),
    ("nri_problems", "Planning problems, by cause (the problem's kind, from a fixed list): under on_error allow the container runs unplanned, under deny it is refused"),
    ("nri_fallbacks", "Containers planned short of what was asked, by cause (cpuset_kept, claim_held, claim_failed, env_only)"),
    ("nri_request_duration", "Time the plugin took to answer an NRI request, by request"),
    ("nri_registered", "1 while the plugin is registered with the runtime, else 0"),
    ("nri_registrations", "Registrations with the runtime (the first, and one per reconnection)"),
    ("nri_claims_held", "GPU claims this plugin holds for live containers"),
    ("nri_inventory_rebuilds", "Times the plugin read the host inventory afresh (at start, and after each Synchronize)"),
    ("nri_placements", "GPU worker processes looked at by rank placement, by outcome (placed, already_inside, elsewhere, bad_signal, gone)"),
    ("nri_placement_overruns", "Times the kernel's process events overran the plugin's socket (the processes whose events were lost keep their container's CPUs)"),
];

/// Which of the watcher's [`Counts`] an outcome is read from.
type CountOf = fn(&Counts) -> &AtomicU64;

/// Every value of `cpuplan_nri_placements_total`'s `outcome`, each with the count of
/// [`Counts`] it is read from.
const PLACEMENTS: [(&str, CountOf); 5] = [
    ("placed", |c| &c.placed),
    ("already_inside", |c| &c.already),
    ("elsewhere", |c| &c.elsewhere),
    ("bad_signal", |c| &c.bad_signal),
    ("gone", |c| &c.gone),
];

/// Every value of `cpuplan_nri_problems_total`'s `cause` ([`crate::decide::Problem::cause`]).
pub use crate::decide::problem::CAUSES as PROBLEM_CAUSES;

/// Every outcome, in order.
const OUTCOMES: [Outcome; 5] = [
    Outcome::Pinned,
    Outcome::Sized,
    Outcome::Off,
    Outcome::Problem,
    Outcome::Ignored,
];

/// Every fallback, in order.
const FALLBACKS: [Fallback; 4] = [
    Fallback::CpusetKept,
    Fallback::ClaimHeld,
    Fallback::ClaimFailed,
    Fallback::EnvOnly,
];

/// The handling-time buckets, in seconds: from half a millisecond to the runtime's 2 s timeout.
pub const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0,
];

/// The plugin's metrics: counters kept as events happen, gauges set at each scrape.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    containers: Family<OutcomeLabels, Counter>,
    problems: Family<CauseLabels, Counter>,
    fallbacks: Family<CauseLabels, Counter>,
    duration: Family<RequestLabels, Histogram>,
    registered: Gauge,
    registrations: Counter,
    claims_held: Gauge,
    inventory_reads: Arc<AtomicU64>,
    inventory_rebuilds: Counter,
    placements: Family<PlacementLabels, Counter>,
    placement_overruns: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Every metric at zero, each label value of each family too, registered under the prefix
    /// `cpuplan`; and the process's metrics.
    pub fn new() -> Metrics {
        let mut root = Registry::default();
        root.register_collector(Box::new(process::ProcessCollector));
        let registry = root.sub_registry_with_prefix("cpuplan");
        let m = Metrics {
            registry: Registry::default(),
            containers: Family::default(),
            problems: Family::default(),
            fallbacks: Family::default(),
            duration: Family::new_with_constructor(|| Histogram::new(BUCKETS)),
            registered: Gauge::default(),
            registrations: Counter::default(),
            claims_held: Gauge::default(),
            inventory_reads: Arc::default(),
            inventory_rebuilds: Counter::default(),
            placements: Family::default(),
            placement_overruns: Counter::default(),
        };
        let [build, containers, problems, fallbacks, duration, registered, registrations, claims, rebuilds, placements, overruns] =
            HELP;
        let version = Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]);
        registry.register(build.0, build.1, version);
        registry.register(containers.0, containers.1, m.containers.clone());
        registry.register(problems.0, problems.1, m.problems.clone());
        registry.register(fallbacks.0, fallbacks.1, m.fallbacks.clone());
        let (name, help, unit) = (duration.0, duration.1, Unit::Seconds);
        registry.register_with_unit(name, help, unit, m.duration.clone());
        registry.register(registered.0, registered.1, m.registered.clone());
        registry.register(registrations.0, registrations.1, m.registrations.clone());
        registry.register(claims.0, claims.1, m.claims_held.clone());
        registry.register(rebuilds.0, rebuilds.1, m.inventory_rebuilds.clone());
        registry.register(placements.0, placements.1, m.placements.clone());
        registry.register(overruns.0, overruns.1, m.placement_overruns.clone());
        for (outcome, _) in PLACEMENTS {
            let _ = m.placements.get_or_create(&PlacementLabels { outcome });
        }
        for request in [Request::Create, Request::Update] {
            for outcome in OUTCOMES {
                let _ = m.containers.get_or_create(&OutcomeLabels {
                    request: request.as_str(),
                    outcome: outcome.as_str(),
                });
            }
            let _ = m.duration.get_or_create(&RequestLabels {
                request: request.as_str(),
            });
        }
        for cause in PROBLEM_CAUSES {
            let _ = m.problems.get_or_create(&CauseLabels { cause });
        }
        for f in FALLBACKS {
            let _ = m
                .fallbacks
                .get_or_create(&CauseLabels { cause: f.as_str() });
        }
        Metrics {
            registry: root,
            ..m
        }
    }

    /// A container handled by `request` ended with `outcome`.
    pub fn outcome(&self, request: Request, outcome: Outcome) {
        self.containers
            .get_or_create(&OutcomeLabels {
                request: request.as_str(),
                outcome: outcome.as_str(),
            })
            .inc();
    }

    /// A planning problem of `cause` ([`crate::decide::Problem::cause`]).
    pub fn problem(&self, cause: &'static str) {
        self.problems.get_or_create(&CauseLabels { cause }).inc();
    }

    /// A container planned with `fallback`.
    pub fn fallback(&self, fallback: Fallback) {
        self.fallbacks
            .get_or_create(&CauseLabels {
                cause: fallback.as_str(),
            })
            .inc();
    }

    /// `request` took `took` to answer.
    pub fn took(&self, request: Request, took: Duration) {
        self.duration
            .get_or_create(&RequestLabels {
                request: request.as_str(),
            })
            .observe(took.as_secs_f64());
    }

    /// Registered with the runtime (`true`), or no longer (`false`).
    pub fn registered(&self, registered: bool) {
        self.registered.set(i64::from(registered));
        if registered {
            self.registrations.inc();
        }
    }

    /// The counter the host's inventory reads go to ([`crate::read::host::Host::counting_reads`]).
    pub fn inventory_reads(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.inventory_reads)
    }

    /// The rank watcher's `counts` as they are now (the counters move up to them; they are kept
    /// by the watcher's thread, which touches no metric).
    pub fn placements(&self, counts: &Counts) {
        for (outcome, count) in PLACEMENTS {
            let c = self.placements.get_or_create(&PlacementLabels { outcome });
            let (now, served) = (count(counts).load(Ordering::Relaxed), c.get());
            if now > served {
                c.inc_by(now - served);
            }
        }
        let now = counts.overruns.load(Ordering::Relaxed);
        let served = self.placement_overruns.get();
        if now > served {
            self.placement_overruns.inc_by(now - served);
        }
    }

    /// Text in the OpenMetrics format ([`convert`] gives the Prometheus format), with `claims_held` as the gauge's value now.
    pub fn encode(&self, claims_held: Option<usize>) -> String {
        if let Some(n) = claims_held {
            self.claims_held.set(n as i64);
        }
        let reads = self.inventory_reads.load(Ordering::Relaxed);
        let counted = self.inventory_rebuilds.get();
        if reads > counted {
            self.inventory_rebuilds.inc_by(reads - counted);
        }
        let mut text = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            log::warn!("nri: cannot encode the metrics: {e}");
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::Problem;

    fn sample(text: &str, line_start: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(line_start))
            .and_then(|v| v.trim().parse().ok())
    }

    #[test]
    fn counters_histogram_and_gauges_encode_with_bounded_labels() {
        let m = Metrics::new();
        m.outcome(Request::Create, Outcome::Pinned);
        m.outcome(Request::Create, Outcome::Pinned);
        m.outcome(Request::Update, Outcome::Sized);
        m.problem("spec");
        m.fallback(Fallback::ClaimHeld);
        m.took(Request::Create, Duration::from_millis(3));
        m.registered(true);
        m.inventory_reads().fetch_add(2, Ordering::Relaxed);
        let text = m.encode(Some(3));
        let at = |s: &str| sample(&text, s);
        assert_eq!(
            at(r#"cpuplan_nri_containers_total{request="CreateContainer",outcome="pinned"} "#),
            Some(2.0),
            "{text}"
        );
        assert_eq!(
            at(r#"cpuplan_nri_containers_total{request="UpdateContainer",outcome="sized"} "#),
            Some(1.0)
        );
        assert_eq!(
            at(r#"cpuplan_nri_problems_total{cause="spec"} "#),
            Some(1.0)
        );
        assert_eq!(
            at(r#"cpuplan_nri_fallbacks_total{cause="claim_held"} "#),
            Some(1.0)
        );
        assert_eq!(
            at(r#"cpuplan_nri_request_duration_seconds_count{request="CreateContainer"} "#),
            Some(1.0)
        );
        assert_eq!(
            at(r#"cpuplan_nri_request_duration_seconds_bucket{le="0.0025",request="CreateContainer"} "#)
                .or(at(r#"cpuplan_nri_request_duration_seconds_bucket{request="CreateContainer",le="0.0025"} "#)),
            Some(0.0),
            "{text}"
        );
        assert_eq!(at("cpuplan_nri_registered "), Some(1.0));
        assert_eq!(at("cpuplan_nri_registrations_total "), Some(1.0));
        assert_eq!(at("cpuplan_nri_claims_held "), Some(3.0));
        assert_eq!(at("cpuplan_nri_inventory_rebuilds_total "), Some(2.0));
        assert!(text.contains("cpuplan_build_info{version=\""), "{text}");
        m.registered(false);
        let text = m.encode(None);
        assert_eq!(sample(&text, "cpuplan_nri_registered "), Some(0.0));
        assert_eq!(
            sample(&text, "cpuplan_nri_claims_held "),
            Some(3.0),
            "kept when it could not be counted"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn every_metric_is_served_from_the_start_and_in_the_kubernetes_docs_table() {
        let text = Metrics::new().encode(None);
        let docs = include_str!("../../docs/kubernetes.md");
        for (name, help) in HELP {
            let served = text.lines().any(|l| {
                l.starts_with(&format!("# HELP cpuplan_{name}"))
                    && l.ends_with(&format!(" {help}."))
            });
            assert!(served, "{name}: {text}");
            assert!(
                docs.contains(&format!("| `cpuplan_{name}")),
                "docs/kubernetes.md has no row for cpuplan_{name}"
            );
        }
        for (name, help) in PROCESS {
            let family = name.strip_suffix("_total").unwrap_or(name);
            assert!(
                text.contains(&format!("# HELP {family} {help}\n")),
                "{name}: {text}"
            );
            assert!(
                text.lines().any(|l| l.starts_with(&format!("{name} "))),
                "{name}: {text}"
            );
            assert!(
                docs.contains(&format!("| `{name}`")),
                "docs/kubernetes.md has no row for {name}"
            );
        }
    }

    #[test]
    fn every_label_value_of_every_family_is_at_zero_from_the_start() {
        let text = Metrics::new().encode(None);
        let at = |s: &str| sample(&text, s);
        for request in ["CreateContainer", "UpdateContainer"] {
            for outcome in OUTCOMES.map(Outcome::as_str) {
                let s = format!(
                    r#"cpuplan_nri_containers_total{{request="{request}",outcome="{outcome}"}} "#
                );
                assert_eq!(at(&s), Some(0.0), "{s}\n{text}");
            }
            let count =
                format!(r#"cpuplan_nri_request_duration_seconds_count{{request="{request}"}} "#);
            assert_eq!(at(&count), Some(0.0), "{text}");
        }
        for cause in PROBLEM_CAUSES {
            let s = format!(r#"cpuplan_nri_problems_total{{cause="{cause}"}} "#);
            assert_eq!(at(&s), Some(0.0), "{text}");
        }
        for f in FALLBACKS.map(Fallback::as_str) {
            let s = format!(r#"cpuplan_nri_fallbacks_total{{cause="{f}"}} "#);
            assert_eq!(at(&s), Some(0.0), "{text}");
        }
        assert_eq!(at("cpuplan_nri_registrations_total "), Some(0.0));
        assert_eq!(at("cpuplan_nri_inventory_rebuilds_total "), Some(0.0));
        for (outcome, _) in PLACEMENTS {
            let s = format!(r#"cpuplan_nri_placements_total{{outcome="{outcome}"}} "#);
            assert_eq!(at(&s), Some(0.0), "{s}\n{text}");
        }
        assert_eq!(at("cpuplan_nri_placement_overruns_total "), Some(0.0));
    }

    #[test]
    fn placements_follow_the_watcher_s_counts_by_outcome() {
        let m = Metrics::new();
        let counts = Counts::default();
        counts.placed.fetch_add(3, Ordering::Relaxed);
        counts.already.fetch_add(1, Ordering::Relaxed);
        counts.bad_signal.fetch_add(2, Ordering::Relaxed);
        counts.overruns.fetch_add(4, Ordering::Relaxed);
        m.placements(&counts);
        counts.placed.fetch_add(1, Ordering::Relaxed);
        m.placements(&counts);
        m.placements(&counts);
        let text = m.encode(None);
        let at = |o: &str| {
            sample(
                &text,
                &format!(r#"cpuplan_nri_placements_total{{outcome="{o}"}} "#),
            )
        };
        assert_eq!(at("placed"), Some(4.0), "{text}");
        assert_eq!(at("already_inside"), Some(1.0));
        assert_eq!(at("elsewhere"), Some(0.0));
        assert_eq!(at("bad_signal"), Some(2.0));
        assert_eq!(at("gone"), Some(0.0));
        assert_eq!(
            sample(&text, "cpuplan_nri_placement_overruns_total "),
            Some(4.0)
        );
    }

    #[test]
    fn a_decision_s_labels() {
        use crate::config::HookConfig;
        use crate::decide::decide;
        use crate::read::testkit::inputs;
        let config = HookConfig::default();
        let auto = inputs(cpuplan::Setting::Auto, &["18"], "0-15", 4);
        let d = decide(&auto, &config);
        assert!(!d.plan.pinned().is_empty(), "{d:?}");
        assert_eq!(labels_of(&d), (Outcome::Pinned, None));
        let held = d.clone().after_claim(&ClaimResult::held("0000:18:00.0"));
        assert_eq!(labels_of(&held), (Outcome::Sized, None));
        assert_eq!(
            fallbacks_of(&held, &ClaimResult::held("0000:18:00.0")),
            [Fallback::ClaimHeld]
        );
        assert_eq!(
            fallbacks_of(
                &d,
                &ClaimResult::Failed(Problem::claim(std::io::Error::other("busy")))
            ),
            [Fallback::ClaimFailed]
        );
        assert!(fallbacks_of(&d, &ClaimResult::Claimed).is_empty());
        let over = inputs(cpuplan::Setting::Cpu(6), &["18"], "0-15", 4);
        let over = decide(&over, &config);
        assert!(over.over_mask, "{}", over.cpuset_why);
        assert_eq!(
            fallbacks_of(&over, &ClaimResult::Skipped),
            [Fallback::CpusetKept]
        );
        let off = inputs(cpuplan::Setting::Off, &["18"], "0-15", 4);
        assert_eq!(labels_of(&decide(&off, &config)), (Outcome::Off, None));
        let problem = Decision::off(&auto, Problem::spec(std::io::Error::other("bad quota")));
        assert_eq!(labels_of(&problem), (Outcome::Problem, Some("spec")));
    }

    #[test]
    fn label_values_come_from_fixed_lists() {
        let outcomes = [
            Outcome::Pinned,
            Outcome::Sized,
            Outcome::Off,
            Outcome::Problem,
            Outcome::Ignored,
        ]
        .map(Outcome::as_str);
        assert_eq!(outcomes, ["pinned", "sized", "off", "problem", "ignored"]);
        let fallbacks = [
            Fallback::CpusetKept,
            Fallback::ClaimHeld,
            Fallback::ClaimFailed,
            Fallback::EnvOnly,
        ]
        .map(Fallback::as_str);
        assert_eq!(
            fallbacks,
            ["cpuset_kept", "claim_held", "claim_failed", "env_only"]
        );
    }
}
