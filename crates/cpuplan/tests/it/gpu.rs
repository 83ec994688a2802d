//! Which GPU a device or `NVIDIA_VISIBLE_DEVICES` names, through the vendor seam
//! ([`cpuplan::gpu::Inventory`]), against the fixture host `tests/fixtures/devices/host`.

use crate::gpufx;

use cpuplan::gpu::nvidia::{nvidia_gpus, parse_visible_devices, VisibleDevices};
use cpuplan::gpu::{char_device_pci, DeviceError, Inventory, Named};
use gpufx::*;

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
