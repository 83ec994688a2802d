//! Which GPUs a container has, over the example host's driver files and a tree with an AMD render node.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use cpuplan_hook::devices::{container_gpus, nvidia_gpus, CharDevice};

fn host() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/host")
}

const ALL: [&str; 8] = [
    "0000:18:00.0",
    "0000:2a:00.0",
    "0000:3a:00.0",
    "0000:5d:00.0",
    "0000:9a:00.0",
    "0000:ab:00.0",
    "0000:ba:00.0",
    "0000:db:00.0",
];

fn gpus(devices: &[CharDevice], visible: Option<&str>) -> Vec<String> {
    container_gpus(&host(), devices, visible).unwrap()
}

fn err(devices: &[CharDevice], visible: Option<&str>) -> String {
    container_gpus(&host(), devices, visible)
        .unwrap_err()
        .to_string()
}

fn nv(minor: i64) -> CharDevice {
    CharDevice { major: 195, minor }
}

#[test]
fn the_driver_lists_eight_gpus_in_address_order() {
    let list = nvidia_gpus(&host()).unwrap();
    assert_eq!(
        list.iter().map(|g| g.address.as_str()).collect::<Vec<_>>(),
        ALL
    );
    assert_eq!(
        list.iter().map(|g| g.minor.unwrap()).collect::<Vec<_>>(),
        (0..8).collect::<Vec<u32>>()
    );
}

#[test]
fn visible_devices_forms() {
    assert!(gpus(&[], None).is_empty());
    assert!(gpus(&[], Some("none")).is_empty());
    assert!(gpus(&[], Some("void")).is_empty());
    assert!(gpus(&[], Some("")).is_empty());
    assert_eq!(gpus(&[], Some("all")), ALL);
    assert_eq!(
        gpus(&[], Some("5,1")),
        ["0000:2a:00.0", "0000:ab:00.0"],
        "worker order is address order"
    );
    assert_eq!(
        gpus(&[], Some("1,1,0000:2a:00.0")),
        ["0000:2a:00.0"],
        "counted once"
    );
    let uuid = nvidia_gpus(&host()).unwrap()[3].uuid.clone().unwrap();
    assert_eq!(gpus(&[], Some(&uuid)), ["0000:5d:00.0"]);
    assert_eq!(gpus(&[], Some(&uuid.to_uppercase())), ["0000:5d:00.0"]);
    assert_eq!(gpus(&[], Some("00000000:9A:00.0")), ["0000:9a:00.0"]);
    assert_eq!(
        gpus(&[], Some("2:0")),
        ["0000:3a:00.0"],
        "<gpu>:<mig> is the parent"
    );
    assert_eq!(
        gpus(&[], Some(&format!("MIG-{}/1/0", uuid))),
        ["0000:5d:00.0"]
    );
}

#[test]
fn linux_devices_name_gpus_by_minor() {
    assert_eq!(
        gpus(&[nv(7), nv(0), nv(255)], None),
        ["0000:18:00.0", "0000:db:00.0"],
        "nvidiactl is no GPU"
    );
    assert_eq!(gpus(&[nv(2)], Some("2")), ["0000:3a:00.0"]);
    // A bare MIG UUID is the parent the devices give.
    assert_eq!(
        gpus(&[nv(4)], Some("MIG-1a2b3c4d-0000-1111-2222-333344445555")),
        ["0000:9a:00.0"]
    );
}

#[test]
fn unknown_ids_are_planning_problems_naming_them() {
    for (devs, vis, needle) in [
        (vec![], Some("8"), "\"8\""),
        (
            vec![],
            Some("GPU-00000000-dead-beef-0000-000000000000"),
            "00000000-dead-beef",
        ),
        (vec![], Some("0000:77:00.0"), "0000:77:00.0"),
        (
            vec![],
            Some("MIG-1a2b3c4d-0000-1111-2222-333344445555"),
            "MIG-1a2b3c4d",
        ),
        (vec![nv(9)], None, "195:9"),
        (vec![], Some("junk"), "\"junk\""),
        (vec![], Some("-1"), "\"-1\""),
        (vec![], Some("99999999"), "99999999"),
    ] {
        let e = err(&devs, vis);
        assert!(e.contains(needle), "{vis:?}: {e}");
        assert!(
            e.contains("NVIDIA_VISIBLE_DEVICES") || e.contains("linux.devices"),
            "{e}"
        );
    }
}

#[test]
fn a_missing_device_minor_names_the_file() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("proc/driver/nvidia/gpus/0000:18:00.0");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("information"),
        "Model: \t\t NVIDIA H100\nBus Location: \t 0000:18:00.0\n",
    )
    .unwrap();
    let e = container_gpus(t.path(), &[], Some("0"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("0000:18:00.0/information") && e.contains("Device Minor"),
        "{e}"
    );
}

#[test]
fn other_accelerators_through_sys_dev_char() {
    let t = tempfile::tempdir().unwrap();
    let pci = t
        .path()
        .join("sys/devices/pci0000:00/0000:00:03.1/0000:0a:00.0");
    std::fs::create_dir_all(pci.join("drm/renderD128")).unwrap();
    symlink("../../../0000:0a:00.0", pci.join("drm/renderD128/device")).unwrap();
    std::fs::create_dir_all(t.path().join("sys/dev/char")).unwrap();
    symlink(
        "../../devices/pci0000:00/0000:00:03.1/0000:0a:00.0/drm/renderD128",
        t.path().join("sys/dev/char/226:128"),
    )
    .unwrap();
    // A char device that is no PCI function (a tty) gives nothing.
    std::fs::create_dir_all(t.path().join("sys/devices/virtual/tty/tty0")).unwrap();
    symlink(
        "../../devices/virtual/tty/tty0",
        t.path().join("sys/dev/char/4:0"),
    )
    .unwrap();
    let devs = [
        CharDevice {
            major: 226,
            minor: 128,
        },
        CharDevice { major: 4, minor: 0 },
        CharDevice { major: 1, minor: 3 },
    ];
    assert_eq!(
        container_gpus(t.path(), &devs, None).unwrap(),
        ["0000:0a:00.0"]
    );
}
