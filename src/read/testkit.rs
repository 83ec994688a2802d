//! Inputs built in memory, for the unit tests of the pure stages (decide, edit, the NRI mapping).
//!
//! The host: 16 CPUs, SMT pairs (c, c+8), node 0 = 0-3,8-11 with GPUs 18 and 2a, node 1 =
//! 4-7,12-15 with GPU 9a.

use cpuplan::{Cgroups, CpuSet, HostGpu, Setting, StaticTopology};

use super::gpus::Gpu;
use super::spec::ContainerSpec;
use super::{Container, Inputs};
use crate::config::GpuSource;

pub fn set(s: &str) -> CpuSet {
    s.parse().unwrap()
}

pub fn host_gpu(address: &str, node: u32, local: &str) -> HostGpu {
    HostGpu {
        address: address.into(),
        node: Some(node),
        local: Some(set(local)),
        cpu_node: None,
    }
}

pub fn topology() -> StaticTopology {
    StaticTopology {
        siblings: (0..16)
            .map(|c| [c % 8, c % 8 + 8].into_iter().collect())
            .collect(),
        gpus: vec![
            host_gpu("0000:18:00.0", 0, "0-3,8-11"),
            host_gpu("0000:2a:00.0", 0, "0-3,8-11"),
            host_gpu("0000:9a:00.0", 1, "4-7,12-15"),
        ],
    }
}

pub fn inputs(setting: Setting, gpus: &[&str], mask: &str, usable: usize) -> Inputs {
    Inputs {
        container: Container {
            id: "c1".into(),
            pid: Some(42),
            bundle: None,
        },
        spec: ContainerSpec::default(),
        cgroups: Cgroups::default(),
        cgroup_quota: Some(usable as f64),
        mask: set(mask),
        usable,
        gpus: gpus
            .iter()
            .map(|g| Gpu {
                address: format!("0000:{g}:00.0"),
                sources: vec![GpuSource::Devices],
            })
            .collect(),
        setting,
        setting_from: "hook config".into(),
        split: cpuplan::PoolSplit::PerProcess,
        split_from: "hook config".into(),
        topology: topology(),
        notes: Vec::new(),
        gpu_notes: Vec::new(),
        problem: None,
    }
}
