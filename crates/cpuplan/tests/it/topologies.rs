//! The facts `tests/fixtures/topologies/README.md` lists for each real sysfs dump, read through the public API.

use std::path::PathBuf;

use cpuplan::{
    host_gpus, online_cpus, parse_cpu_list, smt_siblings, CpuSet, HostGpu, StaticTopology,
};

/// A cpu-list file of a dump, parsed as the planner parses one (a trailing NUL is tolerated).
fn cpu_list_file(path: &std::path::Path) -> Option<CpuSet> {
    std::fs::read_to_string(path).ok().map(|t| set(&t))
}

fn root(machine: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/topologies")
        .join(machine)
}

fn set(s: &str) -> CpuSet {
    parse_cpu_list(s).unwrap()
}

fn addresses(gpus: &[HostGpu]) -> Vec<&str> {
    gpus.iter().map(|g| g.address.as_str()).collect()
}

const POWER9: &str = "hwloc-power9-ac922-6xv100";
const RYZEN: &str = "ghw-ryzen5-1600-radeon";
const KVM: &str = "ghw-kvm-xeon-e5-2695v4-tesla-p100";
const SILVER: &str = "hwloc-xeon-silver-4108-2s-8ve";
const ASPEED: &str = "hwloc-xeon-e5-2680-2s-aspeed-mic";
const HASWELL: &str = "hwloc-haswell-offline-cpu0-node0";

#[test]
fn power9_cpus_and_smt4() {
    let r = root(POWER9);
    assert_eq!(online_cpus(&r).unwrap(), set("0-15,88-103"));
    assert_eq!(smt_siblings(&r, 5).unwrap(), set("4-7"));
    assert_eq!(smt_siblings(&r, 100).unwrap(), set("100-103"));
    let t = StaticTopology::from_sysfs(&r, "0004:05:00.0");
    // The snapshot needs the GPUs too, and the like device has no vendor file.
    assert!(t.unwrap_err().is_not_found());
}

/// Decision: the device at `like` must have a `vendor` file. On the POWER9 dump none has,
/// so `host_gpus` is a `NotFound` error naming the missing file (and `deployment_plan`
/// under `auto` pins nothing, saying so; see plan.rs).
#[test]
fn power9_like_without_vendor_is_an_error_naming_it() {
    let e = host_gpus(&root(POWER9), "0004:05:00.0").unwrap_err();
    assert!(e.is_not_found());
    let msg = e.to_string();
    assert!(msg.contains("0004:05:00.0/vendor"), "{msg}");
}

#[test]
fn ryzen_amd_gpu_without_numa_node() {
    let r = root(RYZEN);
    // No cpu/online file: the cpuN directories count.
    assert_eq!(online_cpus(&r).unwrap(), set("0-11"));
    for (a, b) in [(0, 6), (1, 7), (2, 8), (3, 9), (4, 10), (5, 11)] {
        let want: CpuSet = [a, b].into_iter().collect();
        assert_eq!(smt_siblings(&r, a).unwrap(), want);
        assert_eq!(smt_siblings(&r, b).unwrap(), want);
    }
    let gpus = host_gpus(&r, "0000:0a:00.0").unwrap();
    // The same-vendor HD audio function 0000:0a:00.1 is another class.
    assert_eq!(
        gpus,
        vec![HostGpu {
            address: "0000:0a:00.0".into(),
            node: None,
            local: Some(set("0-11")),
            cpu_node: None,
        }]
    );
}

#[test]
fn kvm_p100_3d_controller_class_and_virtio_vga_skipped() {
    let r = root(KVM);
    assert_eq!(online_cpus(&r).unwrap(), set("0-7"));
    for c in 0..8 {
        assert_eq!(smt_siblings(&r, c).unwrap(), [c].into_iter().collect());
    }
    let gpus = host_gpus(&r, "0000:06:00.0").unwrap();
    assert_eq!(
        gpus,
        vec![HostGpu {
            address: "0000:06:00.0".into(),
            node: None,
            local: Some(set("0-7")),
            cpu_node: None,
        }]
    );
    // The virtio VGA is a display of another vendor and class: only like itself matches it.
    assert_eq!(
        addresses(&host_gpus(&r, "0000:04:00.0").unwrap()),
        ["0000:04:00.0"]
    );
}

#[test]
fn silver_two_sockets_smt_and_vector_engines() {
    let r = root(SILVER);
    assert_eq!(online_cpus(&r).unwrap(), set("0-31"));
    assert_eq!(smt_siblings(&r, 0).unwrap(), set("0,16"));
    assert_eq!(smt_siblings(&r, 24).unwrap(), set("8,24"));
    let node = |n: u32| {
        cpu_list_file(&r.join(format!("sys/devices/system/node/node{n}/cpulist"))).unwrap()
    };
    assert_eq!(node(0), set("0-7,16-23"));
    assert_eq!(node(1), set("8-15,24-31"));
    // host_gpus matches the class of `like`: like a Vector Engine gives the eight of them.
    let ves = host_gpus(&r, "0000:3f:00.0").unwrap();
    assert_eq!(
        addresses(&ves),
        [
            "0000:1b:00.0",
            "0000:1c:00.0",
            "0000:1d:00.0",
            "0000:1e:00.0",
            "0000:3d:00.0",
            "0000:3f:00.0",
            "0000:40:00.0",
            "0000:41:00.0"
        ]
    );
    assert!(ves
        .iter()
        .all(|g| g.node == Some(0) && g.local == Some(set("0-7,16-23"))));
}

#[test]
fn aspeed_mic_trailing_nul_and_mixed_nodes() {
    let r = root(ASPEED);
    assert_eq!(online_cpus(&r).unwrap(), set("0-15"));
    assert_eq!(smt_siblings(&r, 9).unwrap(), set("9"));
    let online = r.join("sys/devices/system/node/online");
    assert_eq!(std::fs::read_to_string(&online).unwrap(), "0-1\n\0");
    assert_eq!(cpu_list_file(&online), Some(set("0-1")));
    assert_eq!(
        host_gpus(&r, "0000:05:00.0").unwrap(),
        vec![HostGpu {
            address: "0000:05:00.0".into(),
            node: Some(0),
            local: Some(set("0-7")),
            cpu_node: None,
        }]
    );
    assert_eq!(
        host_gpus(&r, "0000:83:00.0").unwrap(),
        vec![HostGpu {
            address: "0000:83:00.0".into(),
            node: Some(1),
            local: Some(set("8-15")),
            cpu_node: None,
        }]
    );
    // The NVMe quirk: numa_node -1 with a local_cpulist.
    let nvme = host_gpus(&r, "0000:00:02.0").unwrap();
    let nvme = nvme.iter().find(|g| g.address == "0000:00:02.0").unwrap();
    assert_eq!(nvme.node, None);
    assert_eq!(nvme.local, Some(set("0-3")));
}

#[test]
fn haswell_offline_cpus_and_no_pci() {
    let r = root(HASWELL);
    assert_eq!(online_cpus(&r).unwrap(), set("4-20"));
    assert_eq!(smt_siblings(&r, 4).unwrap(), set("4"));
    // cpu0 is offline and has no topology directory: its own core.
    assert_eq!(smt_siblings(&r, 0).unwrap(), set("0"));
    let node1 = cpu_list_file(&r.join("sys/devices/system/node/node1/cpulist")).unwrap();
    assert_eq!(
        node1.intersection(&online_cpus(&r).unwrap()),
        set("5,7,9,11,13,15,17,19")
    );
    let e = host_gpus(&r, "0000:00:00.0").unwrap_err();
    assert!(e.is_not_found(), "{e}");
}

#[test]
fn every_dump_is_present() {
    for m in [POWER9, RYZEN, KVM, SILVER, ASPEED, HASWELL] {
        assert!(root(m).join("sys/devices/system/cpu").is_dir(), "{m}");
    }
}
