//! `plan.env`: the plan as shell-sourceable `KEY='value'` lines that never run anything when sourced.

use cpuplan::{format_cpu_list, PlanFile};

/// The variables of `plan.env`, in file order.
pub fn plan_env_vars(plan: &PlanFile, devices: &[Option<String>]) -> Vec<(&'static str, String)> {
    let workers = plan
        .workers
        .iter()
        .map(|w| {
            w.as_ref()
                .map(|w| format_cpu_list(&w.cpus))
                .unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join(";");
    let devices = devices
        .iter()
        .map(|d| d.clone().unwrap_or_default())
        .collect::<Vec<_>>()
        .join(";");
    let left = plan.left.to_string();
    let mut vars = vec![
        ("CPUPLAN_SETTING", plan.setting.clone()),
        ("CPUPLAN_MASK", format_cpu_list(&plan.mask)),
        ("CPUPLAN_USABLE", plan.usable.to_string()),
        ("CPUPLAN_LEFT", left.clone()),
        ("CPUPLAN_PINNED", format_cpu_list(&plan.pinned)),
        ("CPUPLAN_WORKERS", workers),
        ("CPUPLAN_DEVICES", devices),
        (
            "CPUPLAN_RESULT",
            plan.result
                .as_ref()
                .map(|r| format_cpu_list(&r.cpus))
                .unwrap_or_default(),
        ),
        (
            "CPUPLAN_PREPROCESS_THREADS",
            plan.pools.preprocess_threads.to_string(),
        ),
        ("CPUPLAN_PNG_THREADS", plan.pools.png_threads.to_string()),
        (
            "CPUPLAN_ENCODE_WORKERS",
            plan.pools.encode_workers.to_string(),
        ),
        ("CPUPLAN_COPY_WORKERS", plan.pools.copy_workers.to_string()),
        ("CPUPLAN_WHY", plan.why.clone()),
    ];
    for key in [
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "BLIS_NUM_THREADS",
        "NUMEXPR_NUM_THREADS",
        "RAYON_NUM_THREADS",
    ] {
        vars.push((key, left.clone()));
    }
    vars.push(("GOMAXPROCS", plan.usable.to_string()));
    vars
}

/// `value` in single quotes, each `'` written as `'\''`; newlines are kept literally inside the quotes.
pub fn shell_quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('\'');
    for c in value.chars() {
        match c {
            '\'' => out.push_str("'\\''"),
            '\0' => {}
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// The text of `plan.env`.
pub fn plan_env(plan: &PlanFile, devices: &[Option<String>]) -> String {
    let mut out = String::from(
        "# Written by cpuplan-hook: the container's CPU plan. Source it: . /run/cpuplan/plan.env\n",
    );
    for (k, v) in plan_env_vars(plan, devices) {
        out.push_str(k);
        out.push('=');
        out.push_str(&shell_quote(&v));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_is_inert() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote("$(touch x)`y`\"z\""), "'$(touch x)`y`\"z\"'");
    }

    #[test]
    fn sourced_by_sh_gives_back_the_values() {
        let nasty = "line1\nline2 $(echo pwned >&2) `id` 'q' \"dq\" \\ ;";
        let mut plan = PlanFile::new(
            &cpuplan::CpuPlan::unpinned("0-3".parse().unwrap(), 2, 1, nasty),
            "off",
            &[None],
        );
        plan.setting = "off".into();
        let text = plan_env(&plan, &[Some("0000:2a:00.0".into())]);
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("plan.env");
        std::fs::write(&f, &text).unwrap();
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(r#". "$1" && printf '%s' "$CPUPLAN_WHY" && printf '|%s|%s|%s' "$OMP_NUM_THREADS" "$GOMAXPROCS" "$CPUPLAN_DEVICES""#)
            .arg("sh")
            .arg(&f)
            .output()
            .unwrap();
        assert!(out.status.success());
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{nasty}|2|2|0000:2a:00.0")
        );
        assert!(
            out.stderr.is_empty(),
            "sourcing ran something: {:?}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
