//! Which GPU a device or `NVIDIA_VISIBLE_DEVICES` names, through the vendor seam
//! ([`cpuplan::gpu::Inventory`]), against the fixture host `tests/fixtures/devices/host`.

use std::path::{Path, PathBuf};

use cpuplan::gpu::nvidia::{nvidia_gpus, parse_visible_devices, VisibleDevices};
use cpuplan::gpu::{char_device_pci, CharDevice, DeviceError, Inventory, Named, Resolved, Vendor};

/// The fixture host: 8 NVIDIA H100s, an AMD GPU and a few other char devices.
fn host() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/devices/host")
}

const ADDRS: [&str; 8] = [
    "0000:18:00.0",
    "0000:2a:00.0",
    "0000:3a:00.0",
    "0000:5d:00.0",
    "0000:9a:00.0",
    "0000:ab:00.0",
    "0000:ba:00.0",
    "0000:db:00.0",
];
const UUID_3A: &str = "GPU-9c41e2b7-5f08-4d1a-b6c3-e8a27d4f1033";
const AMD: &str = "0000:0a:00.0";

fn c(major: i64, minor: i64) -> CharDevice {
    CharDevice {
        major,
        minor,
        path: format!("/dev/char-{major}-{minor}"),
    }
}

/// The GPUs `devices` (as a spec's `linux.devices`, where an unlisted node is an error) and
/// `visible` name under `root`, in PCI address order, each once, as a reader asks the seam.
fn resolve(
    root: &Path,
    devices: &[CharDevice],
    visible: Option<&str>,
) -> Result<Vec<String>, DeviceError> {
    Ok(resolve_noting(root, devices, visible)?.gpus)
}

/// [`resolve`] with the notes of what names no GPU (the env's and the devices').
fn resolve_noting(
    root: &Path,
    devices: &[CharDevice],
    visible: Option<&str>,
) -> Result<Resolved, DeviceError> {
    let mut inventory = Inventory::new(root);
    let mut found = Resolved::default();
    let mut nvidia = false;
    for d in devices {
        match inventory.device(d)? {
            Named::Gpu { address, vendor }
            | Named::Part {
                address, vendor, ..
            } => {
                nvidia |= vendor == Vendor::Nvidia;
                found.gpus.push(address);
            }
            Named::Unlisted(e) => return Err(e),
            Named::Unplaced(why) => found.notes.push(why),
            Named::NotGpu { .. } | Named::Nothing => {}
        }
    }
    let env = inventory.visible(visible, nvidia)?;
    found.gpus.extend(env.gpus);
    found.notes.extend(env.notes);
    found.gpus.sort_by_key(|a| cpuplan::PciAddress::parse(a));
    found.gpus.dedup();
    Ok(found)
}

/// The notes `visible` gets on the fixture host with `devices`.
fn notes(devices: &[CharDevice], visible: Option<&str>) -> Vec<String> {
    resolve_noting(&host(), devices, visible).unwrap().notes
}

/// The GPUs of a container with these devices and this `NVIDIA_VISIBLE_DEVICES`.
fn gpus(devices: &[CharDevice], visible: Option<&str>) -> Vec<String> {
    resolve(&host(), devices, visible).unwrap()
}

fn err(devices: &[CharDevice], visible: Option<&str>) -> DeviceError {
    resolve(&host(), devices, visible).unwrap_err()
}

/// The one note `visible` gets with `devices`, which must resolve to no GPU.
fn one_note(devices: &[CharDevice], visible: &str) -> String {
    let found = resolve_noting(&host(), devices, Some(visible)).unwrap();
    assert_eq!(found.notes.len(), 1, "{visible}: {:?}", found.notes);
    found.notes[0].clone()
}

#[test]
fn the_driver_lists_eight_gpus_in_pci_order() {
    let list = nvidia_gpus(&host()).unwrap();
    let addrs: Vec<&str> = list.iter().map(|g| g.address.as_str()).collect();
    assert_eq!(addrs, ADDRS);
    let minors: Vec<u32> = list.iter().map(|g| g.minor.unwrap()).collect();
    assert_eq!(minors, [0, 1, 3, 2, 4, 5, 6, 7]);
    assert_eq!(list[2].uuid.as_deref(), Some(UUID_3A));
    assert!(list.iter().all(|g| g.uuid.is_some()));
}

#[test]
fn a_host_without_the_nvidia_driver_has_no_nvidia_gpus() {
    let empty = tempfile::tempdir().unwrap();
    assert!(nvidia_gpus(empty.path()).unwrap().is_empty());
    assert_eq!(
        resolve(empty.path(), &[], Some("all")).unwrap(),
        Vec::<String>::new()
    );
}

#[test]
fn char_devices_resolve_through_sysfs() {
    assert_eq!(
        char_device_pci(&host(), 226, 128).unwrap().as_deref(),
        Some(AMD)
    );
    assert_eq!(
        char_device_pci(&host(), 226, 0).unwrap().as_deref(),
        Some(AMD)
    );
    assert_eq!(
        char_device_pci(&host(), 226, 1).unwrap().as_deref(),
        Some("0000:18:00.0")
    );
    // A virtual device (no `device` link), a platform device, and one sysfs does not know.
    assert_eq!(char_device_pci(&host(), 10, 200).unwrap(), None);
    assert_eq!(char_device_pci(&host(), 4, 64).unwrap(), None);
    assert_eq!(char_device_pci(&host(), 1, 3).unwrap(), None);
    let e = char_device_pci(&host(), -1, 3).unwrap_err().to_string();
    assert!(e.contains("-1:3"), "{e}");
}

#[test]
fn nvidia_device_nodes_map_by_device_minor() {
    // /dev/nvidia2 is minor 2, which the driver gives 0000:5d:00.0 (index 3).
    assert_eq!(gpus(&[c(195, 2)], None), ["0000:5d:00.0"]);
    assert_eq!(
        gpus(&[c(195, 7), c(195, 0), c(195, 3)], None),
        ["0000:18:00.0", "0000:3a:00.0", "0000:db:00.0"]
    );
    // nvidiactl, nvidia-modeset, nvidia-uvm (dynamic major, virtual) and /dev/null name no GPU.
    assert_eq!(
        gpus(&[c(195, 255), c(195, 254), c(10, 200), c(1, 3)], None),
        Vec::<String>::new()
    );
}

#[test]
fn every_gpu_is_counted_once_in_address_order() {
    // The AMD render node and card, NVIDIA minor 0, its DRM card and the same GPU by index.
    let got = gpus(
        &[c(226, 128), c(195, 0), c(226, 1), c(226, 0), c(195, 5)],
        Some("0,0000:18:00.0,5:1"),
    );
    assert_eq!(got, [AMD, "0000:18:00.0", "0000:ab:00.0"]);
}

#[test]
fn the_keywords_of_nvidia_visible_devices() {
    assert_eq!(gpus(&[], Some("all")), ADDRS);
    for none in [None, Some(""), Some("none"), Some("void")] {
        assert_eq!(gpus(&[], none), Vec::<String>::new(), "{none:?}");
    }
    // `none` does not hide the GPUs the devices give.
    assert_eq!(gpus(&[c(226, 128)], Some("none")), [AMD]);
    assert_eq!(parse_visible_devices(None).unwrap(), VisibleDevices::Unset);
}

#[test]
fn indices_count_in_pci_order_not_minor_order() {
    assert_eq!(gpus(&[], Some("2")), ["0000:3a:00.0"]);
    assert_eq!(gpus(&[], Some("3")), ["0000:5d:00.0"]);
    assert_eq!(
        gpus(&[], Some("7,0,3,3")),
        ["0000:18:00.0", "0000:5d:00.0", "0000:db:00.0"]
    );
}

#[test]
fn uuids_and_pci_bus_ids_in_every_spelling() {
    assert_eq!(gpus(&[], Some(UUID_3A)), ["0000:3a:00.0"]);
    assert_eq!(gpus(&[], Some(&UUID_3A.to_uppercase())), ["0000:3a:00.0"]);
    for id in ["0000:9a:00.0", "00000000:9A:00.0", "9a:00.0", "9A:00.0"] {
        assert_eq!(gpus(&[], Some(id)), ["0000:9a:00.0"], "{id}");
    }
    assert_eq!(
        gpus(&[], Some(" 00000000:DB:00.0 , 2a:00.0 ")),
        ["0000:2a:00.0", "0000:db:00.0"]
    );
}

#[test]
fn mig_devices_count_as_their_parent_gpu() {
    assert_eq!(
        gpus(&[], Some(&format!("MIG-{UUID_3A}/1/0"))),
        ["0000:3a:00.0"]
    );
    assert_eq!(gpus(&[], Some("4:0,4:1")), ["0000:9a:00.0"]);
    assert_eq!(
        gpus(&[], Some(&format!("{UUID_3A}:2,1:0"))),
        ["0000:2a:00.0", "0000:3a:00.0"]
    );
    // A bare MIG uuid is placed by the /dev/nvidiaN the runtime gave with it (minor 6).
    assert_eq!(
        gpus(
            &[c(195, 6), c(195, 255)],
            Some("MIG-1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60718")
        ),
        ["0000:ba:00.0"]
    );
}

#[test]
fn a_bare_mig_uuid_without_an_nvidia_device_is_a_note_naming_it() {
    let mig = "MIG-1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60718";
    // The AMD render node is no NVIDIA device, so it cannot place the MIG device.
    let found = resolve_noting(&host(), &[c(226, 128), c(195, 255)], Some(mig)).unwrap();
    assert_eq!(found.gpus, [AMD], "the GPUs that do resolve are kept");
    assert_eq!(found.notes.len(), 1, "{:?}", found.notes);
    let text = &found.notes[0];
    assert!(
        text.contains(&format!("NVIDIA_VISIBLE_DEVICES={mig:?}"))
            && text.contains("is a MIG uuid")
            && text.ends_with("ignored"),
        "{text}"
    );
    // Beside a GPU that resolves, in one value: that GPU is kept.
    let found = resolve_noting(&host(), &[], Some(&format!("1,{mig}"))).unwrap();
    assert_eq!(
        (found.gpus, found.notes.len()),
        (vec![ADDRS[1].to_string()], 1)
    );
}

#[test]
fn ids_that_match_no_gpu_are_a_note_naming_the_variable_and_the_value() {
    for (value, entry) in [
        ("8", "8"),
        ("0,99999", "99999"),
        (
            "GPU-00000000-0000-0000-0000-000000000000",
            "GPU-00000000-0000-0000-0000-000000000000",
        ),
        ("0000:0a:00.0", "0000:0a:00.0"), // the AMD GPU is no NVIDIA GPU
        ("0000:19:00.0", "0000:19:00.0"),
        ("8:0", "8:0"),
        (
            "MIG-GPU-00000000-0000-0000-0000-000000000000/1/0",
            "MIG-GPU-00000000-0000-0000-0000-000000000000/1/0",
        ),
    ] {
        let found = resolve_noting(&host(), &[], Some(value)).unwrap();
        let want: Vec<String> = (value == "0,99999")
            .then(|| ADDRS[0].to_string())
            .into_iter()
            .collect();
        assert_eq!(found.gpus, want, "{value}: the others still resolve");
        assert_eq!(found.notes.len(), 1, "{value}: {:?}", found.notes);
        let text = &found.notes[0];
        assert!(
            text.contains(&format!("NVIDIA_VISIBLE_DEVICES={value:?}"))
                && text.contains(&format!("{entry:?} matches no GPU")),
            "{text}"
        );
    }
}

#[test]
fn junk_void_and_the_volume_mounts_path_are_notes_never_errors() {
    for value in [
        "-1",
        "0,-1",
        "gpu0",
        "0,,1",
        "4294967296",
        "all,0",
        "GPU-zz",
        "GPU-5d8a1b2c::1", // a time-slicing replica id, which the device plugin never passes on
    ] {
        let found = resolve_noting(&host(), &[], Some(value)).unwrap();
        assert!(
            found.notes.iter().any(|n| n.contains("is not a GPU index")
                && n.contains(&format!("NVIDIA_VISIBLE_DEVICES={value:?}"))),
            "{value}: {:?}",
            found.notes
        );
        // The parser still refuses it whole, for the callers that want a strict answer.
        assert!(matches!(
            parse_visible_devices(Some(value)),
            Err(DeviceError::VisibleJunk { .. })
        ));
    }
    assert_eq!(gpus(&[], Some("0,,1")), [ADDRS[0], ADDRS[1]]);
    for none in ["void", "none", ""] {
        assert!(one_note(&[], none).ends_with(": no GPU"), "{none}");
    }
    for path in [
        "/var/run/nvidia-container-devices",
        "/var/run/nvidia-container-devices/",
    ] {
        let note = one_note(&[], path);
        assert!(note.contains("volume-mounts strategy"), "{note}");
    }
    assert!(notes(&[], None).is_empty());
    assert!(notes(&[], Some("all")).is_empty());
}

#[test]
fn an_nvidia_minor_the_driver_does_not_list_is_a_problem() {
    let e = err(&[c(195, 9)], None).to_string();
    assert!(e.contains("195:9") && e.contains("Device Minor 9"), "{e}");
    let e = err(&[c(195, 256)], None).to_string();
    assert!(e.contains("195:256"), "{e}");
}

/// A topology root with one NVIDIA GPU whose information file is `info`.
fn one_gpu_host(info: &str) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("proc/driver/nvidia/gpus/0000:18:00.0");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("information"), info).unwrap();
    root
}

#[test]
fn a_missing_device_minor_names_the_information_file() {
    let good =
        std::fs::read_to_string(host().join("proc/driver/nvidia/gpus/0000:18:00.0/information"))
            .unwrap();
    let root = one_gpu_host(&good.replace("Device Minor: \t 0\n", ""));
    for result in [
        nvidia_gpus(root.path()).map(|_| ()),
        resolve(
            root.path(),
            &[],
            Some("GPU-00000000-0000-0000-0000-000000000000"),
        )
        .map(|_| ()),
        resolve(root.path(), &[c(195, 0)], None).map(|_| ()),
    ] {
        let e = result.unwrap_err();
        assert!(
            matches!(e, DeviceError::Host(cpuplan::Error::Malformed { .. })),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.contains("0000:18:00.0/information") && text.contains("Device Minor"),
            "{text}"
        );
    }
    // Indices need only the driver's directory names: the broken file is not read.
    assert_eq!(
        resolve(root.path(), &[], Some("all")).unwrap(),
        ["0000:18:00.0"]
    );
    assert_eq!(
        resolve(root.path(), &[], Some("0")).unwrap(),
        ["0000:18:00.0"]
    );
    // A GPU that is fine still resolves in a tree with the same file intact.
    let root = one_gpu_host(&good);
    assert_eq!(
        resolve(root.path(), &[c(195, 0)], Some("0")).unwrap(),
        ["0000:18:00.0"]
    );
}

#[test]
fn a_gpu_directory_not_named_by_a_pci_address_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("proc/driver/nvidia/gpus/not-a-gpu");
    std::fs::create_dir_all(&dir).unwrap();
    let e = nvidia_gpus(root.path()).unwrap_err().to_string();
    assert!(e.contains("\"not-a-gpu\""), "{e}");
}

#[test]
fn a_gpu_directory_without_its_information_file_names_it() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("proc/driver/nvidia/gpus/0000:18:00.0")).unwrap();
    let e = nvidia_gpus(root.path()).unwrap_err().to_string();
    assert!(e.contains("0000:18:00.0/information"), "{e}");
}

#[test]
fn nothing_names_a_gpu_when_nothing_is_given() {
    assert_eq!(gpus(&[], None), Vec::<String>::new());
}

#[test]
fn a_nics_rdma_device_beside_a_gpu_is_no_gpu() {
    // GPUDirect: the container gets GPU 0 and the RDMA device of the NIC on its PCIe switch.
    assert_eq!(gpus(&[c(195, 0), c(231, 192)], None), [ADDRS[0]]);
    match Inventory::new(&host()).device(&c(231, 192)).unwrap() {
        Named::NotGpu { address, class } => {
            assert_eq!((address.as_str(), class), ("0000:19:00.0", Some(0x02)))
        }
        other => panic!("{other:?}"),
    }
    // A display-class function behind a char device still counts (the AMD GPU's render node).
    assert_eq!(gpus(&[c(226, 128)], None), [AMD]);
}

#[test]
fn gpu_nodes_are_told_by_name_and_major() {
    for (name, major, yes) in [
        ("nvidia0", 195, true),
        ("nvidia127", 195, true),
        ("nvidia1000", 195, false),
        ("nvidia", 195, false),
        ("nvidiactl", 195, false),
        ("nvidia-uvm", 195, false),
        ("nvidia1", 226, false),
        ("card0", 226, false),
    ] {
        assert_eq!(
            Inventory::is_gpu_node(name, false, major),
            yes,
            "{name} {major}"
        );
        assert_eq!(
            Inventory::is_gpu_node_name(name, false),
            yes || major != 195 && name == "nvidia1",
            "{name}"
        );
    }
}

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
                    && note.contains(&format!("{}", drm(minor).path)),
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
