//! The fixture containers of `tests/host/pipeline.rs` (GPU and CPU-only, every setting, quota and
//! cpuset cases, planning errors), each on its fake host: shared with `tests/host/inventory.rs`,
//! which plans them with and without the host inventory.
#![allow(dead_code)]

use serde_json::{json, Value};

use super::fakehost::FakeHost;

/// One fixture container: its name, the spec edits and the hook config edits.
pub struct Case {
    pub name: &'static str,
    pub annotation: Option<&'static str>,
    /// The `cpuplan.pool-split` annotation.
    pub split: Option<&'static str>,
    pub env: &'static [&'static str],
    pub devices: &'static [i64],
    pub quota: Option<(i64, u64)>,
    pub cpus: Option<&'static str>,
    pub config: Value,
}

pub const fn case(name: &'static str) -> Case {
    Case {
        name,
        annotation: None,
        split: None,
        env: &[],
        devices: &[],
        quota: None,
        cpus: None,
        config: Value::Null,
    }
}

pub fn cases() -> Vec<Case> {
    let quota16 = Some((1_600_000, 100_000));
    vec![
        Case {
            quota: Some((800_000, 100_000)),
            ..case("cpu-only auto")
        },
        Case {
            annotation: Some("off"),
            quota: Some((400_000, 100_000)),
            ..case("cpu-only off")
        },
        Case {
            annotation: Some("5"),
            quota: quota16,
            ..case("cpu-only cpu 5")
        },
        Case {
            annotation: Some("0"),
            cpus: Some("0-7,112-119"),
            ..case("cpu-only cpu 0 in a cpuset")
        },
        Case {
            devices: &[0],
            quota: quota16,
            ..case("gpu 0 auto")
        },
        Case {
            devices: &[1],
            quota: quota16,
            ..case("gpu 1 auto")
        },
        Case {
            devices: &[0, 1],
            quota: quota16,
            ..case("gpus 0,1 auto")
        },
        Case {
            devices: &[4, 7],
            quota: Some((2_400_000, 100_000)),
            ..case("gpus on node 1")
        },
        Case {
            devices: &[0, 4],
            quota: Some((3_200_000, 100_000)),
            ..case("gpus on both nodes")
        },
        Case {
            devices: &[2],
            quota: Some((12_000_000, 100_000)),
            ..case("quota over the gpu's cpus")
        },
        Case {
            devices: &[0],
            annotation: Some("off"),
            quota: quota16,
            ..case("gpu off narrows")
        },
        Case {
            devices: &[0],
            annotation: Some("3"),
            quota: quota16,
            ..case("gpu cpu 3")
        },
        Case {
            devices: &[0],
            annotation: Some("60"),
            quota: quota16,
            ..case("cpu the narrowed cpus lack")
        },
        Case {
            env: &["NVIDIA_VISIBLE_DEVICES=2,3"],
            quota: quota16,
            ..case("gpus from the environment")
        },
        Case {
            env: &["NVIDIA_VISIBLE_DEVICES=all"],
            quota: Some((6_400_000, 100_000)),
            ..case("all gpus")
        },
        Case {
            devices: &[5],
            cpus: Some("56-63,168-175"),
            ..case("gpu in an exclusive cpuset")
        },
        Case {
            devices: &[0],
            cpus: Some("0-3"),
            ..case("gpu with too few cpus")
        },
        Case {
            devices: &[0],
            quota: quota16,
            config: json!({"cpuset": "keep"}),
            ..case("gpu, cpuset keep")
        },
        Case {
            env: &["CPUPLAN_STEP_THREAD_CORE=off", "OMP_NUM_THREADS=3"],
            devices: &[0],
            quota: quota16,
            ..case("setting and a thread variable from the env")
        },
        Case {
            annotation: Some("223"),
            devices: &[0],
            ..case("error: cpu at the top of the mask")
        },
        Case {
            annotation: Some("fast"),
            devices: &[0],
            ..case("error: setting that does not parse")
        },
        Case {
            devices: &[0],
            cpus: Some("300-310"),
            ..case("error: cpus outside the host")
        },
        Case {
            devices: &[9],
            ..case("error: a spec device the host lacks")
        },
        Case {
            env: &["NVIDIA_VISIBLE_DEVICES=9,2"],
            ..case("an env gpu id the host lacks: a note")
        },
        Case {
            quota: Some((50_000, 100_000)),
            annotation: Some("auto"),
            devices: &[3],
            ..case("half a cpu")
        },
        // The one quota/period rule: 0 and -1 are no quota, a period of 0 is 100000 µs.
        Case {
            quota: Some((0, 100_000)),
            devices: &[0],
            ..case("quota 0 is unset")
        },
        Case {
            quota: Some((-1, 100_000)),
            devices: &[0],
            ..case("quota -1 is no limit")
        },
        Case {
            quota: Some((250_000, 0)),
            devices: &[1],
            ..case("a period of 0 is the default")
        },
        Case {
            quota: Some((0, 0)),
            ..case("quota and period 0")
        },
        // A GB200 tray whose GPUs sit on NUMA nodes without CPUs: placed on the nearest Grace.
        Case {
            devices: &[2, 3],
            quota: quota16,
            cpus: Some("0-143"),
            config: json!({"topology_root": super::fakehost::fixtures().join("grace/gb200-cdmm-off")}),
            ..case("gb200 gpus on memory nodes near grace node 1")
        },
        Case {
            devices: &[1, 2],
            annotation: Some("4"),
            quota: quota16,
            cpus: Some("0-143"),
            config: json!({"topology_root": super::fakehost::fixtures().join("grace/gb200-cdmm-off")}),
            ..case("gb200 gpus near both graces, cpu 4")
        },
        // The pools shared among one process per GPU, or not.
        Case {
            devices: &[0, 1, 2, 3],
            quota: Some((2_200_000, 100_000)),
            ..case("four gpus, a process each")
        },
        Case {
            devices: &[0, 1],
            split: Some("off"),
            quota: quota16,
            ..case("two gpus, one process (annotation)")
        },
        Case {
            devices: &[0, 1, 2],
            config: json!({"pool_split": "off"}),
            quota: quota16,
            ..case("three gpus, one process (config)")
        },
        Case {
            devices: &[0, 1],
            split: Some("per-process"),
            config: json!({"pool_split": "off"}),
            quota: Some((200_000, 100_000)),
            ..case("two gpus under 2 cpus, a process each (annotation over config)")
        },
        Case {
            devices: &[0, 1],
            split: Some("one"),
            quota: quota16,
            ..case("error: pool split that does not parse")
        },
    ]
}

/// The fake host with `c` applied: no live quota, so the three front ends see the same inputs.
pub fn host(c: &Case) -> FakeHost {
    let mut h = FakeHost::new();
    std::fs::write(
        h.file("sys/fs/cgroup/cpu,cpuacct/ctr/cpu.cfs_quota_us"),
        "-1\n",
    )
    .unwrap();
    h.hook["step_thread_core"] = json!("auto");
    if let Value::Object(m) = &c.config {
        for (k, v) in m {
            h.hook[k] = v.clone();
        }
    }
    for kv in c.env {
        h.env(kv);
    }
    if let Some(a) = c.annotation {
        h.spec["annotations"] = json!({"cpuplan.step-thread-core": a});
    }
    if let Some(a) = c.split {
        h.spec["annotations"]["cpuplan.pool-split"] = json!(a);
    }
    let mut cpu = json!({});
    if let Some((q, p)) = c.quota {
        cpu["quota"] = json!(q);
        cpu["period"] = json!(p);
    }
    if let Some(cpus) = c.cpus {
        cpu["cpus"] = json!(cpus);
    }
    h.spec["linux"]["resources"] = json!({ "cpu": cpu });
    let devices: Vec<Value> = c
        .devices
        .iter()
        .map(|m| json!({"path": format!("/dev/nvidia{m}"), "type": "c", "major": 195, "minor": m}))
        .collect();
    h.spec["linux"]["devices"] = json!(devices);
    h
}
