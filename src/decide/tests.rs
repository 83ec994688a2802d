//! `decide` on inputs built in memory: no file is read or written.
//!
//! The host: 16 CPUs, SMT pairs (c, c+8), node 0 = 0-3,8-11 with GPUs 18 and 2a, node 1 =
//! 4-7,12-15 with GPU 9a.

use cpuplan::Setting;

use super::*;
use crate::config::GpuSource;
use crate::read::testkit::{inputs, set};

fn config() -> HookConfig {
    HookConfig::default()
}

fn workers(d: &Decision) -> Vec<Option<String>> {
    d.plan
        .workers
        .iter()
        .map(|w| w.as_ref().map(|w| w.cpus.to_string()))
        .collect()
}

#[test]
fn no_gpu_keeps_the_cpuset_and_claims_nothing() {
    let d = decide(&inputs(Setting::Auto, &[], "0-15", 4), &config());
    assert_eq!(d.cpuset, None);
    assert!(d.cpuset_why.contains("no GPU"), "{}", d.cpuset_why);
    assert!(d.claims.is_empty());
    assert!(d.plan.pinned().is_empty());
    assert_eq!(d.problem, None);
}

#[test]
fn a_gpu_narrows_to_its_node_and_auto_pins_by_rank() {
    let d = decide(&inputs(Setting::Auto, &["2a"], "0-15", 4), &config());
    assert_eq!(d.cpuset, Some(set("0-3,8-11")), "{}", d.cpuset_why);
    assert_eq!(d.plan.mask, set("0-3,8-11"), "the plan is over the cpuset");
    // 2a is rank 1 of node 0's two GPUs: the second core from the bottom, the API server the second from the top.
    assert_eq!(workers(&d), vec![Some("1,9".to_string())]);
    assert_eq!(d.plan.result.as_ref().unwrap().cpus, set("2,10"));
    assert_eq!(d.claims, vec!["0000:2a:00.0".to_string()]);
    assert_eq!(d.plan.devices, vec![Some("0000:2a:00.0".to_string())]);
}

#[test]
fn too_few_local_cpus_for_the_quota_keep_the_cpuset() {
    let d = decide(&inputs(Setting::Auto, &["18"], "0-15", 10), &config());
    assert_eq!(d.cpuset, None);
    assert!(
        d.cpuset_why.contains("fewer than the 10 usable"),
        "{}",
        d.cpuset_why
    );
    assert_eq!(d.plan.mask, set("0-15"));
    assert!(!d.over_mask, "no narrowed set was tried: not a fallback");
}

#[test]
fn a_cpu_the_narrowed_cpus_lack_keeps_the_cpuset_before_anything_is_written() {
    let d = decide(&inputs(Setting::Cpu(6), &["18"], "0-15", 4), &config());
    assert_eq!(d.cpuset, None, "cpu 6 is on node 1, outside GPU 18's CPUs");
    assert!(
        d.cpuset_why
            .starts_with("cpuset kept: on the GPUs' local CPUs 0-3,8-11")
            && d.cpuset_why.contains("cpu 6 is not in the mask"),
        "{}",
        d.cpuset_why
    );
    assert_eq!(workers(&d), vec![Some("6,14".to_string())]);
    assert_eq!(d.plan.mask, set("0-15"), "the plan says what is in force");
    assert!(d.over_mask, "the narrowed set could not hold the plan");
    assert!(d.claims.is_empty(), "a CPU number claims nothing");
}

#[test]
fn a_setting_no_mask_can_honour_falls_back_to_off_with_the_cause() {
    let d = decide(&inputs(Setting::Cpu(7), &["18"], "0-15", 4), &config());
    assert_eq!(d.cpuset, None);
    assert_eq!(d.plan.setting, Setting::Off);
    assert!(d.plan.pinned().is_empty());
    assert_eq!(
        d.plan.devices.len(),
        1,
        "the off plan still lists the worker"
    );
    let p = d.problem.as_ref().unwrap();
    assert!(p.to_string().contains("step_thread_core 7"), "{p}");
    assert_eq!(p.cause(), "plan");
    assert!(
        d.plan.why.starts_with("step_thread_core off: "),
        "{}",
        d.plan.why
    );
    assert!(d.claims.is_empty());
}

#[test]
fn a_read_problem_is_the_off_plan_over_what_was_read() {
    let mut i = inputs(Setting::Auto, &["18"], "0-7", 4);
    i.problem = Some(std::sync::Arc::new(crate::read::ReadError::EmptyMask));
    let d = decide(&i, &config());
    assert_eq!(d.cpuset, None);
    assert_eq!(d.plan.mask, set("0-7"));
    assert_eq!(d.plan.usable, 4);
    let p = d.problem.unwrap();
    assert!(p.to_string().contains("mask is empty"));
    assert_eq!(p.cause(), "empty_mask");
}

#[test]
fn off_narrows_but_pins_and_claims_nothing() {
    let d = decide(&inputs(Setting::Off, &["9a"], "0-15", 2), &config());
    assert_eq!(d.cpuset, Some(set("4-7,12-15")));
    assert!(d.plan.pinned().is_empty());
    assert!(d.claims.is_empty());
}

#[test]
fn the_keep_rule_never_narrows() {
    let keep = HookConfig {
        cpuset: crate::config::CpusetRule::Keep,
        ..config()
    };
    let d = decide(&inputs(Setting::Auto, &["18"], "0-15", 4), &keep);
    assert_eq!(d.cpuset, None);
    assert_eq!(d.cpuset_why, "cpuset kept (cpuset: keep)");
    assert_eq!(workers(&d), vec![Some("0,8".to_string())]);
}

#[test]
fn claim_outcomes_change_only_the_pinning() {
    let i = inputs(Setting::Auto, &["18"], "0-15", 4);
    let d = decide(&i, &config());
    assert_eq!(d.clone().after_claim(&ClaimResult::Claimed), d);
    assert_eq!(d.clone().after_claim(&ClaimResult::Skipped), d);
    let held = d.clone().after_claim(&ClaimResult::held("0000:18:00.0"));
    assert!(held.plan.pinned().is_empty());
    assert_eq!(held.cpuset, d.cpuset, "the cpuset stays");
    assert!(held
        .plan
        .why
        .contains("pins nothing: GPU 0000:18:00.0 is held"));
    let failed =
        d.clone().after_claim(&ClaimResult::Failed(Problem::claim(
            Why("lock busy".into()),
        )));
    assert_eq!(failed.plan.workers, d.plan.workers);
    assert!(failed
        .plan
        .why
        .ends_with("(planned without a GPU claim: lock busy)"));
}

#[test]
fn keeping_the_cpuset_replans_over_the_mask() {
    let i = inputs(Setting::Auto, &["18"], "0-15", 4);
    let d = Decision::keeping_cpuset(&i, &config(), "cpuset kept: EPERM".into());
    assert_eq!(d.cpuset, None);
    assert_eq!(d.plan.mask, set("0-15"));
    assert_eq!(d.cpuset_why, "cpuset kept: EPERM");
    assert_eq!(d.notes.last().unwrap(), "cpuset kept: EPERM");
    assert_eq!(workers(&d), vec![Some("0,8".to_string())]);
}

#[test]
fn gpus_named_only_by_an_untrusted_source_are_planned_for_but_not_claimed() {
    let mut i = inputs(Setting::Auto, &["18", "2a"], "0-15", 4);
    i.gpus[0].sources = vec![GpuSource::Env];
    i.gpus[1].sources = vec![GpuSource::Nodes, GpuSource::Env];
    let d = decide(&i, &config());
    assert_eq!(
        d.claims,
        vec!["0000:2a:00.0".to_string()],
        "only the trusted GPU"
    );
    assert_eq!(
        workers(&d),
        vec![Some("0,8".to_string()), Some("1,9".to_string())]
    );
    assert!(
        d.plan.why.contains(
            "not claimed, as no source gpu_sources trusts names them: 0000:18:00.0 (named by NVIDIA_VISIBLE_DEVICES)"
        ),
        "{}",
        d.plan.why
    );
    let trusting = HookConfig {
        gpu_sources: vec![GpuSource::Devices, GpuSource::Nodes, GpuSource::Env],
        ..config()
    };
    let d = decide(&i, &trusting);
    assert_eq!(d.claims.len(), 2);
    assert!(!d.plan.why.contains("not claimed"));
}

#[test]
fn a_course_makes_each_next_decision_and_the_verdict() {
    let i = inputs(Setting::Auto, &["18"], "0-15", 4);
    let c = config();
    let mut course = Course::new(&i, &c, Ask::Create);
    assert_eq!(course.decision(), &decide(&i, &c));
    assert_eq!(course.verdict(), Ok(()));
    // A GPU held elsewhere, then a cpuset the host refuses: the replanned decision still pins
    // nothing, as the claim said.
    course.claimed(ClaimResult::held("0000:18:00.0"));
    course.keep_cpuset("cpuset kept: EPERM".into());
    let d = course.decision().clone();
    assert_eq!(
        (d.cpuset.as_ref(), d.plan.mask.clone()),
        (None, set("0-15"))
    );
    assert!(d.plan.pinned().is_empty(), "{}", d.plan.why);
    assert!(!course.is_off());
    // A failure under allow: the off plan carrying it; under deny: the refusal, and no change.
    course.fail(erofs()).unwrap();
    assert!(course.is_off());
    assert_eq!(course.decision().problem, Some(erofs()));
    assert_eq!(course.verdict(), Ok(()), "allow starts it");
    let deny = HookConfig {
        on_error: crate::config::OnError::Deny,
        ..config()
    };
    let mut course = Course::new(&i, &deny, Ask::Create);
    let r = course.fail(erofs()).unwrap_err();
    assert_eq!(r.problem.to_string(), "the files: EROFS");
    assert_eq!(r.problem.cause(), "files");
    assert!(!course.is_off());
    let mut bad = inputs(Setting::Auto, &["18"], "0-15", 4);
    bad.problem = Some(std::sync::Arc::new(crate::read::ReadError::EmptyMask));
    let refused = Course::new(&bad, &deny, Ask::Create).verdict().unwrap_err();
    assert!(
        refused.problem.to_string().contains("mask is empty"),
        "{refused}"
    );
}

#[test]
fn the_summary_of_an_off_plan_after_a_problem_names_where_off_came_from() {
    // A bad annotation fails the read before any input gave a setting: no source yet.
    let mut i = inputs(Setting::Auto, &["2a"], "0-15", 4);
    i.setting_from = String::new();
    let cause = "annotation cpuplan.step-thread-core: \"fast\" is not off, auto or a cpu number";
    let d = Decision::off(&i, Problem::spec(Why(cause.into())));
    let line = d.summary(&i);
    assert!(
        line.contains(&format!(
            "setting off (off after a planning problem): step_thread_core off: {cause}"
        )),
        "{line}"
    );
    assert!(!line.contains("()"), "{line}");
    // plan.json's inputs say the same: one rule.
    assert_eq!(d.setting_from(&i), "off after a planning problem");
    let fine = inputs(Setting::Auto, &[], "0-15", 4);
    assert_eq!(decide(&fine, &config()).setting_from(&fine), "hook config");
}

fn erofs() -> Problem {
    Problem::files(Why("the files: EROFS".into()))
}

#[test]
fn explain_notes_that_no_claim_was_checked() {
    let i = inputs(Setting::Auto, &["18"], "0-15", 4);
    let c = config();
    let d = Course::new(&i, &c, Ask::Explain).into_decision();
    assert_eq!(d.claims, vec!["0000:18:00.0".to_string()]);
    assert_eq!(
        d.notes.last().map(String::as_str),
        Some("no pid: GPU claims were not checked")
    );
    let none = inputs(Setting::Auto, &[], "0-15", 4);
    let d = Course::new(&none, &c, Ask::Explain).into_decision();
    assert!(!d.notes.iter().any(|n| n.contains("not checked")));
}

/// Inputs as an update reads them: kubelet's set `cpus` and quota `quota` in the spec.
fn update_inputs(gpus: &[&str], cpus: &str, quota: f64) -> crate::read::Inputs {
    let mut i = inputs(Setting::Auto, gpus, cpus, (quota.floor() as usize).max(1));
    i.spec.cpus = Some(set(cpus));
    i.spec.quota = Some(quota);
    i
}

#[test]
fn an_exclusive_set_from_kubelet_stays_as_it_is() {
    // Two CPUs for a quota of two: kubelet's static policy gave them to this container alone.
    let i = update_inputs(&["9a"], "4-5", 2.0);
    let d = update::update(&i, &config());
    assert_eq!(d.cpuset, None, "{}", d.cpuset_why);
    assert_eq!(
        d.cpuset_why,
        "cpuset kept: kubelet's 4-5 is exclusive (no larger than the quota's usable CPUs)"
    );
    assert_eq!(d.plan.mask, set("4-5"));
    assert_eq!(d.problem, None);
    // A quota below one CPU still leaves one usable CPU: a one-CPU set is exclusive.
    let i = update_inputs(&["9a"], "4", 0.5);
    assert_eq!(update::update(&i, &config()).cpuset, None);
}

#[test]
fn a_shared_set_from_kubelet_is_narrowed_inside_it() {
    // The shared pool, larger than the quota: the numa rule runs again inside it.
    let i = update_inputs(&["9a"], "0-15", 4.0);
    let d = update::update(&i, &config());
    assert_eq!(d, decide(&i, &config()));
    assert_eq!(d.cpuset, Some(set("4-7,12-15")));
    // No quota: nothing is exclusive.
    let mut i = update_inputs(&["9a"], "4-5", 2.0);
    i.spec.quota = None;
    assert_eq!(update::update(&i, &config()), decide(&i, &config()));
}

#[test]
fn claims_never_change_on_an_update() {
    let gpu = vec!["0000:18:00.0".to_string()];
    let claimed = Created::of(&ClaimResult::Claimed, &gpu);
    assert_eq!(claimed.claims, gpu);
    assert_eq!(claimed.claim_at_update(&gpu), ClaimResult::Claimed);
    let held = Created::of(&ClaimResult::Held("GPU x is held".into()), &gpu);
    assert_eq!(
        (held.claims.is_empty(), held.held.as_deref()),
        (true, Some("GPU x is held"))
    );
    assert_eq!(
        held.claim_at_update(&gpu),
        ClaimResult::Held("GPU x is held".into())
    );
    let failed = Created::of(&ClaimResult::Failed(erofs()), &gpu);
    assert_eq!(failed, Created::default());
    match failed.claim_at_update(&gpu) {
        ClaimResult::Failed(p) => assert_eq!(p.cause(), "claim"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        Created::default().claim_at_update(&[]),
        ClaimResult::Skipped
    );
}

#[test]
fn an_update_s_course_carries_the_claim_of_the_creation() {
    let i = update_inputs(&["9a"], "0-15", 4.0);
    let c = config();
    let gpu = vec!["0000:9a:00.0".to_string()];
    let held = Created {
        claims: Vec::new(),
        held: Some("GPU 0000:9a:00.0 is held by another container".into()),
    };
    let course = Course::new(&i, &c, Ask::Update(held));
    assert!(course.decision().plan.pinned().is_empty());
    assert!(matches!(course.claim(), ClaimResult::Held(_)));
    let claimed = Created::of(&ClaimResult::Claimed, &gpu);
    let course = Course::new(&i, &c, Ask::Update(claimed));
    assert_eq!(course.decision(), &decide(&i, &c));
    // A problem is the off plan, whatever was claimed.
    let mut bad = i;
    bad.problem = Some(std::sync::Arc::new(crate::read::ReadError::EmptyMask));
    let course = Course::new(&bad, &c, Ask::Update(Created::default()));
    assert!(course.is_off());
    assert!(course
        .decision()
        .plan
        .why
        .starts_with("step_thread_core off: "));
}
