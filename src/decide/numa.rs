//! The `numa` cpuset rule: narrow the container to its GPUs' local CPUs when they hold enough.

use cpuplan::{CpuSet, HostGpu};

use crate::read::gpus::Gpu;

/// The cpuset the `numa` rule picks for the container's `gpus` within `mask`, or `None` with why not.
pub fn numa_cpuset(
    gpus: &[Gpu],
    host: &[HostGpu],
    mask: &CpuSet,
    usable: usize,
) -> (Option<CpuSet>, String) {
    if gpus.is_empty() {
        return (None, "cpuset kept: no GPU assigned".into());
    }
    let mut local = CpuSet::new();
    for address in gpus.iter().map(|g| &g.address) {
        let gpu = host.iter().find(|g| &g.address == address);
        match gpu.and_then(HostGpu::placement_cpus) {
            Some(l) => local.extend_from(l),
            None => {
                return (
                    None,
                    match gpu.and_then(HostGpu::unplaced_why) {
                        Some(why) => format!("cpuset kept: GPU {address}: {why}"),
                        None => format!("cpuset kept: sysfs gives no local CPUs for GPU {address}"),
                    },
                )
            }
        }
    }
    let candidate = local.intersection(mask);
    if candidate.len() < usable {
        return (
            None,
            format!(
                "cpuset kept: the GPUs' local CPUs in the mask ({}) hold {} CPUs, fewer than the {usable} usable",
                candidate,
                candidate.len()
            ),
        );
    }
    if &candidate == mask {
        return (
            None,
            format!("cpuset kept: the mask {mask} is already the GPUs' local CPUs"),
        );
    }
    let why = format!("cpuset {candidate}: the GPUs' local CPUs within the mask {mask}");
    (Some(candidate), why)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(a: &str, local: Option<&str>) -> HostGpu {
        HostGpu {
            address: a.into(),
            node: Some(0),
            local: local.map(|l| l.parse().unwrap()),
            cpu_node: None,
        }
    }

    fn g(addresses: &[&str]) -> Vec<Gpu> {
        addresses
            .iter()
            .map(|a| Gpu {
                address: a.to_string(),
                sources: vec![crate::config::GpuSource::Devices],
            })
            .collect()
    }

    #[test]
    fn narrows_only_when_enough() {
        let host = [
            gpu("0000:18:00.0", Some("0-3,8-11")),
            gpu("0000:9a:00.0", Some("4-7,12-15")),
            gpu("0000:aa:00.0", None),
        ];
        let mask: CpuSet = "0-15".parse().unwrap();
        let (set, why) = numa_cpuset(&g(&["0000:18:00.0"]), &host, &mask, 8);
        assert_eq!(set.unwrap().to_string(), "0-3,8-11", "{why}");
        let (set, why) = numa_cpuset(&g(&["0000:18:00.0"]), &host, &mask, 9);
        assert!(set.is_none() && why.contains("fewer than the 9"), "{why}");
        let (set, _) = numa_cpuset(&g(&["0000:18:00.0", "0000:9a:00.0"]), &host, &mask, 9);
        assert!(set.is_none(), "already the whole mask");
        let (set, why) = numa_cpuset(&g(&["0000:aa:00.0"]), &host, &mask, 1);
        assert!(set.is_none() && why.contains("no local CPUs"));
        let (set, why) = numa_cpuset(&[], &host, &mask, 1);
        assert!(set.is_none() && why.contains("no GPU"));
    }
}
