//! End to end with real runc: a launcher that starts one process per GPU (as torchrun does:
//! the environment inherited, `OMP_NUM_THREADS=1` only where it is unset) gives its children
//! pools that sum to the quota's usable CPUs, after sourcing `plan.env` and through
//! `cpuplan-exec --worker N`; one GPU keeps `left`, and so does `cpuplan.pool-split: off`.
//!
//! Runs as root and needs `runc` and `busybox-static`; the fake host has two GPUs and 2 CPUs.

use std::path::PathBuf;

use common::runc::{line_value, two_gpu_host, Bundle};
use common::statics::static_bins;
use serde_json::{json, Value};

/// The launcher: sources `plan.env`, starts one child per GPU of `CPUPLAN_DEVICES` (with
/// `LOCAL_RANK`, and torchrun's default where the variable is unset), then again each through
/// `cpuplan-exec --worker N`, then the API server through `cpuplan-exec --result`.
const LAUNCHER: &str = r#"set -e
. /run/cpuplan/plan.env
echo "usable=$CPUPLAN_USABLE left=$CPUPLAN_LEFT split=$CPUPLAN_POOL_SPLIT"
n=0
IFS=';'
for d in $CPUPLAN_DEVICES; do
  ( export LOCAL_RANK=$n; [ -n "$OMP_NUM_THREADS" ] || export OMP_NUM_THREADS=1
    echo "sourced $LOCAL_RANK omp=$OMP_NUM_THREADS py=$PYTHON_CPU_COUNT" ) &
  n=$((n+1))
done
wait
unset IFS
i=0
while [ $i -lt $n ]; do
  env -i PATH=/bin /bin/cpuplan-exec --worker $i -- sh -c "echo \"exec $i omp=\$OMP_NUM_THREADS\"" &
  i=$((i+1))
done
wait
/bin/cpuplan-exec --result -- sh -c 'echo "result omp=$OMP_NUM_THREADS"'
"#;

/// A bundle running `cmd` with GPUs `minors` under a 2-CPU quota, the hook registered with
/// `extra` in its config, on the two-GPU host, `cpuplan-exec` in `/bin`; and the hook's log.
fn bundle(tag: &str, cmd: &str, minors: &[u32], extra: Value) -> (Bundle, PathBuf) {
    let mut b = Bundle::new(tag, cmd);
    let host = two_gpu_host(b.dir.path(), "0000:5e:00.0", ["0-1", "0-1"]);
    let mut cfg = json!({
        "topology_root": host,
        "claims_dir": b.scratch("claims"),
        "log": b.scratch("hook.log"),
    });
    for (k, v) in extra.as_object().unwrap() {
        cfg[k] = v.clone();
    }
    let cfg_path = b.hook_config(cfg);
    b.hook_with_config(&cfg_path);
    for &m in minors {
        b.gpu(m);
    }
    b.config["linux"]["resources"]["cpu"] = json!({"quota": 200000, "period": 100000});
    std::fs::copy(&static_bins().exec, b.rootfs().join("bin/cpuplan-exec")).unwrap();
    let log = b.scratch("hook.log");
    (b, log)
}

/// The `omp=` values of the lines starting with `prefix`.
fn threads(out: &str, prefix: &str) -> Vec<usize> {
    out.lines()
        .filter(|l| l.starts_with(prefix))
        .map(|l| {
            let v = l.split("omp=").nth(1).unwrap();
            v.split_whitespace().next().unwrap().parse().unwrap()
        })
        .collect()
}

#[test]
fn one_process_per_gpu_sums_to_the_usable_cpus() {
    let (b, _) = bundle("pools-split", LAUNCHER, &[0, 1], json!({}));
    let (rc, out, err) = b.run();
    assert_eq!(rc, 0, "runc failed: {err}\n{out}");
    assert!(out.contains("usable=2 left=2 split=per-process"), "{out}");
    let sourced = threads(&out, "sourced ");
    let exec = threads(&out, "exec ");
    assert_eq!(sourced.len(), 2, "{out}");
    assert_eq!(exec.len(), 2, "{out}");
    // Two children and the API server on 2 CPUs: more processes than CPUs, one thread each,
    // so the children's pools sum to the usable 2 (container-wide `left` would give 4).
    assert_eq!(sourced, [1, 1], "{out}");
    assert_eq!(exec, [1, 1], "{out}");
    assert!(sourced.iter().sum::<usize>() <= 2);
    assert!(out.contains("py=1"), "PYTHON_CPU_COUNT: {out}");
    assert_eq!(threads(&out, "result "), [1], "{out}");
}

#[test]
fn one_gpu_keeps_left() {
    let (b, _) = bundle("pools-one-gpu", LAUNCHER, &[0], json!({}));
    let (rc, out, err) = b.run();
    assert_eq!(rc, 0, "runc failed: {err}\n{out}");
    assert_eq!(threads(&out, "sourced "), [2], "{out}");
    assert_eq!(threads(&out, "exec "), [2], "{out}");
}

#[test]
fn one_process_driving_every_gpu_gets_all_of_left() {
    let (mut b, _) = bundle("pools-off", LAUNCHER, &[0, 1], json!({}));
    b.config["annotations"] = json!({"cpuplan.pool-split": "off"});
    let (rc, out, err) = b.run();
    assert_eq!(rc, 0, "runc failed: {err}\n{out}");
    assert!(out.contains("split=off"), "{out}");
    assert_eq!(threads(&out, "sourced "), [2, 2], "{out}");
    assert_eq!(threads(&out, "exec "), [2, 2], "{out}");
    // The hook config says the same for every container.
    let (b, _) = bundle(
        "pools-off-cfg",
        LAUNCHER,
        &[0, 1],
        json!({"pool_split": "off"}),
    );
    let (rc, out, err) = b.run();
    assert_eq!(rc, 0, "runc failed: {err}\n{out}");
    assert_eq!(threads(&out, "sourced "), [2, 2], "{out}");
}

#[test]
fn a_bad_split_annotation_starts_the_container_with_the_default_plan_and_one_line() {
    let (mut b, log) = bundle("pools-bad", "cat /run/cpuplan/plan.env", &[0, 1], json!({}));
    b.config["annotations"] = json!({"cpuplan.pool-split": "one"});
    let (rc, out, err) = b.run();
    assert_eq!(rc, 0, "the container must start under allow: {err}");
    assert_eq!(line_value(&out, "CPUPLAN_SETTING"), Some("'off'"), "{out}");
    assert_eq!(
        line_value(&out, "CPUPLAN_POOL_SPLIT"),
        Some("'per-process'"),
        "the default split: {out}"
    );
    let why = "annotation cpuplan.pool-split: pool_split \"one\" is not per-process or off";
    assert!(
        line_value(&out, "CPUPLAN_WHY").unwrap().contains(why),
        "{out}"
    );
    let log = std::fs::read_to_string(log).unwrap();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(why)).collect();
    assert!(!lines.is_empty(), "{log}");
}
