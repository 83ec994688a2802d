//! Parts of GPUs and other vendors through the vendor seam: MIG instances' capability nodes
//! (the fixture host's `/proc/driver/nvidia/capabilities`), AMD MI300 partitions
//! (`tests/fixtures/synthetic/host-mi300-xcp`, placed through the kfd topology) and Intel
//! SR-IOV VFs (`host-intel-vf`).

use crate::gpufx;

use std::path::{Path, PathBuf};

use cpuplan::gpu::{CharDevice, Inventory, Named, Vendor};
use gpufx::*;

#[test]
fn dri_nodes_are_told_by_name_and_major() {
    for (name, major, yes) in [
        ("card0", 226, true),
        ("renderD128", 226, true),
        ("renderD128", 195, false),
        ("by-path", 226, false),
        ("nvidia0", 226, false),
    ] {
        assert_eq!(
            Inventory::is_gpu_node(name, true, major),
            yes,
            "{name} {major}"
        );
    }
    assert!(
        !Inventory::is_gpu_node_name("card0", false),
        "only in /dev/dri"
    );
}

/// A capability node of the fixture host (`nvidia-caps` is major 237 there).
fn cap(minor: i64) -> CharDevice {
    CharDevice {
        major: 237,
        minor,
        path: format!("/dev/nvidia-caps/nvidia-cap{minor}"),
    }
}

#[test]
fn a_mig_instance_s_capability_nodes_name_its_parent_gpu() {
    // gpu3/gi1 (30) and its ci0 (31): the GPU of device minor 3, 0000:3a:00.0.
    let mut inventory = Inventory::new(&host());
    for (minor, part) in [
        (30, "MIG instance gpu3/gi1"),
        (31, "MIG instance gpu3/gi1/ci0"),
    ] {
        match inventory.device(&cap(minor)).unwrap() {
            Named::Part {
                address,
                vendor,
                part: p,
            } => assert_eq!(
                (address.as_str(), vendor, p.as_str()),
                ("0000:3a:00.0", Vendor::Nvidia, part)
            ),
            other => panic!("{minor}: {other:?}"),
        }
    }
    // As CDI and DRA give a MIG instance: its parent's node and its two capability nodes, one GPU.
    assert_eq!(gpus(&[c(195, 3), cap(39), cap(40)], None), ["0000:3a:00.0"]);
    // The caps alone place the parent, and so a bare MIG uuid beside them counts through it.
    let mig = "MIG-1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60718";
    let found = resolve_noting(&host(), &[cap(30), cap(31)], Some(mig)).unwrap();
    assert_eq!(found.gpus, ["0000:3a:00.0"]);
    assert!(found.notes.is_empty(), "{:?}", found.notes);
    // The node-wide config and monitor capabilities name no GPU.
    for minor in [1, 2] {
        assert!(matches!(
            inventory.device(&cap(minor)).unwrap(),
            Named::Nothing
        ));
    }
}

#[test]
fn a_capability_node_the_driver_does_not_place_is_a_note_naming_it() {
    let mut inventory = Inventory::new(&host());
    // No MIG instance has minor 77; gpu9's instance is of a device minor no GPU has.
    for (minor, why) in [
        (77, "whose minor no MIG instance"),
        (111, "is MIG instance gpu9/gi1, but no GPU"),
    ] {
        match inventory.device(&cap(minor)).unwrap() {
            Named::Unplaced(note) => assert!(
                note.contains(&format!("nvidia-cap{minor}")) && note.contains(why),
                "{note}"
            ),
            other => panic!("{minor}: {other:?}"),
        }
    }
    // A host without nvidia-caps in /proc/devices: major 237 is no capability node there.
    let empty = tempfile::tempdir().unwrap();
    assert!(matches!(
        Inventory::new(empty.path()).device(&cap(30)).unwrap(),
        Named::Nothing
    ));
}

/// The MI300-style host: GPU A whole, GPU B in 4 partitions.
fn mi300() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/synthetic/host-mi300-xcp")
}

const MI_A: &str = "0000:1b:00.0";
const MI_B: &str = "0000:9d:00.0";

fn drm(minor: i64) -> CharDevice {
    let name = if minor >= 128 { "renderD" } else { "card" };
    CharDevice {
        major: 226,
        minor,
        path: format!("/dev/dri/{name}{minor}"),
    }
}

#[test]
fn amd_partitions_map_to_their_pci_gpu_through_the_kfd_topology() {
    let mut inventory = Inventory::new(&mi300());
    // GPU A and GPU B's partition 0: render and card nodes on the PCI functions themselves.
    for (minor, want) in [(128, MI_A), (0, MI_A), (129, MI_B), (1, MI_B)] {
        match inventory.device(&drm(minor)).unwrap() {
            Named::Gpu { address, .. } => assert_eq!(address, want, "{minor}"),
            other => panic!("{minor}: {other:?}"),
        }
    }
    // Partitions 1-3 (amdgpu_xcp_0..2): render nodes by their own minor, card nodes through
    // the render node beside them, whatever partition bits location_id carries.
    for (minor, xcp) in [(130, 0), (131, 1), (132, 2), (2, 0), (3, 1), (4, 2)] {
        match inventory.device(&drm(minor)).unwrap() {
            Named::Part {
                address,
                vendor,
                part,
            } => assert_eq!(
                (address.as_str(), vendor, part),
                (MI_B, Vendor::Drm, format!("partition amdgpu_xcp_{xcp}"))
            ),
            other => panic!("{minor}: {other:?}"),
        }
    }
    // A container given two partitions of GPU B and GPU A counts two GPUs; /dev/kfd names none.
    let kfd = CharDevice {
        major: 235,
        minor: 0,
        path: "/dev/kfd".into(),
    };
    assert_eq!(
        resolve(&mi300(), &[kfd, drm(130), drm(2), drm(131), drm(128)], None).unwrap(),
        [MI_A, MI_B]
    );
}

#[test]
fn an_amd_partition_no_kfd_node_lists_is_a_note_naming_it() {
    // amdgpu_xcp_3 (card5, renderD133): no kfd topology node has render minor 133.
    for minor in [133, 5] {
        match Inventory::new(&mi300()).device(&drm(minor)).unwrap() {
            Named::Unplaced(note) => assert!(
                note.contains("partition amdgpu_xcp_3")
                    && note.contains("drm_render_minor 133")
                    && note.contains(&drm(minor).path),
                "{note}"
            ),
            other => panic!("{minor}: {other:?}"),
        }
    }
    // A topology whose node points at a PCI address sysfs does not have.
    let t = tempfile::tempdir().unwrap();
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(mi300())
        .arg(t.path().join("h"))
        .status()
        .unwrap();
    assert!(copied.success());
    let root = t.path().join("h");
    let props = root.join("sys/class/kfd/kfd/topology/nodes/4/properties");
    let text = std::fs::read_to_string(&props).unwrap();
    std::fs::write(
        &props,
        text.replace("location_id 268475648", "location_id 61184"),
    )
    .unwrap();
    match Inventory::new(&root).device(&drm(130)).unwrap() {
        Named::Unplaced(note) => assert!(note.contains("PCI 0000:ef:00.0"), "{note}"),
        other => panic!("{other:?}"),
    }
}

/// The Intel host: PFs 0000:4d:00.0 and 0000:9a:00.0, each with VFs .1 and .2.
fn intel() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/synthetic/host-intel-vf")
}

#[test]
fn intel_vfs_are_gpus_of_their_own() {
    // renderD129 is the first VF of the node-0 PF, renderD133 the second VF of the node-1 PF.
    assert_eq!(gpus_at(&intel(), &[drm(129)]), ["0000:4d:00.1"]);
    assert_eq!(gpus_at(&intel(), &[drm(133), drm(5)]), ["0000:9a:00.2"]);
    // The plugin's by-path nodes are the same devices under another path: counted once.
    let by_path = CharDevice {
        path: "/dev/dri/by-path/pci-0000:4d:00.1-render".into(),
        ..drm(129)
    };
    assert_eq!(
        gpus_at(&intel(), &[drm(129), by_path, drm(1)]),
        ["0000:4d:00.1"]
    );
    // Each VF has its own NUMA node and CPUs in sysfs, as the planner reads them.
    let vf = intel().join("sys/bus/pci/devices/0000:9a:00.2");
    assert_eq!(
        std::fs::read_to_string(vf.join("numa_node")).unwrap(),
        "1\n"
    );
    assert!(vf.join("physfn").exists());
}

fn gpus_at(root: &Path, devices: &[CharDevice]) -> Vec<String> {
    resolve(root, devices, None).unwrap()
}
