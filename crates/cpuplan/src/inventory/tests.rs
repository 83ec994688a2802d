use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::format::{decode, encode};
use super::store::{check_dir, file_in, load_file, obtain, save, Came};
use super::*;

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A small host: 4 CPUs in 2 cores, two NVIDIA GPUs and a NIC, the driver's listing.
fn host(root: &Path) {
    write(root, "sys/devices/system/cpu/online", "0-3\n");
    for (c, s) in [(0, "0,2"), (1, "1,3"), (2, "0,2"), (3, "1,3")] {
        write(
            root,
            &format!("sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list"),
            s,
        );
    }
    write(root, "sys/devices/system/node/node0/cpulist", "0-3\n");
    for (a, minor) in [("0000:01:00.0", 0), ("0000:02:00.0", 1)] {
        let d = format!("sys/bus/pci/devices/{a}");
        write(root, &format!("{d}/class"), "0x030200\n");
        write(root, &format!("{d}/vendor"), "0x10de\n");
        write(root, &format!("{d}/numa_node"), "0\n");
        write(root, &format!("{d}/local_cpulist"), "0-3\n");
        write(
            root,
            &format!("proc/driver/nvidia/gpus/{a}/information"),
            &format!("Model: x\nDevice Minor: {minor}\nGPU UUID: GPU-0000000{minor}-0000-0000-0000-000000000000\n"),
        );
    }
    write(root, "sys/bus/pci/devices/0000:03:00.0/class", "0x020000\n");
}

fn inventory_of(root: &Path) -> HostInventory {
    HostInventory::read(root, root).unwrap()
}

#[test]
fn it_answers_what_sysfs_answers() {
    let t = tempfile::tempdir().unwrap();
    host(t.path());
    let inv = inventory_of(t.path());
    for cpu in 0..4 {
        assert_eq!(
            inv.siblings(cpu).unwrap(),
            crate::smt::smt_siblings(t.path(), cpu).unwrap()
        );
    }
    assert_eq!(inv.siblings(4), None);
    assert_eq!(
        inv.host_gpus("0000:02:00.0").unwrap(),
        crate::gpus::host_gpus(t.path(), "0000:02:00.0").unwrap()
    );
    assert_eq!(inv.host_gpus("0000:03:00.0"), None, "a NIC: ask sysfs");
    assert_eq!(inv.host_gpus("0000:09:00.0"), None, "not there: ask sysfs");
    assert_eq!(inv.nvidia.len(), 2);
    assert_eq!(inv.nvidia[1].minor, Some(1));
    assert_eq!(inv.cores.len(), 2);
}

/// The fixture hosts under `tests/fixtures` and `examples/host` as (root, topology root)
/// pairs: each topology, and each cgroup tree (its mount table) over the 224-CPU host.
pub(crate) fn fixture_hosts() -> Vec<(PathBuf, PathBuf)> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let example = repo.join("examples/host");
    let mut hosts = vec![(example.clone(), example.clone())];
    let fixtures = repo.join("tests/fixtures");
    hosts.push((fixtures.join("e2e-host"), fixtures.join("e2e-host")));
    for group in ["topologies", "synthetic", "grace"] {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(fixtures.join(group))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        hosts.extend(dirs.into_iter().map(|d| (d.clone(), d)));
    }
    for cg in ["v1", "v2", "hybrid", "escaped"] {
        hosts.push((fixtures.join("cgroup").join(cg), example.clone()));
    }
    hosts
}

#[test]
fn the_format_round_trips_every_fixture_host() {
    let mut mounts = 0;
    for (root, topo) in fixture_hosts() {
        let inv = HostInventory::read(&root, &topo)
            .unwrap_or_else(|e| panic!("{} over {}: {e}", root.display(), topo.display()));
        let bytes = encode(&inv);
        assert_eq!(decode(&bytes).unwrap(), inv, "{}", root.display());
        mounts += inv.cgroup_mounts.as_ref().map_or(0, Vec::len);
    }
    assert!(
        mounts >= 4,
        "the cgroup trees' mounts are in the round trip"
    );
    let t = tempfile::tempdir().unwrap();
    host(t.path());
    let mut inv = inventory_of(t.path());
    assert_eq!(decode(&encode(&inv)).unwrap(), inv);
    // A CPU not in the core that lists it (a fixture's odd sibling lists).
    inv.core_of[2] = None;
    assert_eq!(decode(&encode(&inv)).unwrap(), inv);
}

#[test]
fn the_format_refuses_what_is_not_whole() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/host");
    let inv = inventory_of(&root);
    let bytes = encode(&inv);
    assert!(bytes.starts_with(b"cpuplan-inventory 6\n"));
    assert_eq!(decode(&bytes).unwrap(), inv);
    for len in 0..bytes.len() {
        assert!(decode(&bytes[..len]).is_err(), "truncated to {len} bytes");
    }
    let e = decode(&bytes[..bytes.len() - 1]).unwrap_err();
    assert!(e.contains("truncated"), "{e}");
    let mut padded = bytes.clone();
    padded.push(b' ');
    assert!(decode(&padded).unwrap_err().contains("after its end"));
    assert!(decode(b"").is_err());
}

#[test]
fn a_version_5_file_is_another_version_read_again_and_rewritten() {
    assert!(nix::unistd::geteuid().is_root(), "run the tests as root");
    let t = tempfile::tempdir().unwrap();
    let r = t.path().join("host");
    host(&r);
    let dir = store_dir(t.path());
    let path = file_in(&dir, &r, &r);
    // What version 5 wrote: its header, a length and checksum line, a binary body.
    let v5 = b"cpuplan-inventory 5\n3 0123456789abcdef\n\x01\x02\x03";
    let e = decode(v5).unwrap_err();
    assert!(e.contains("not a version 6 inventory"), "{e}");
    std::fs::write(&path, v5).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let o = obtain(&dir, &r, &r, false);
    assert!(
        matches!(&o.came, Came::Written(Some(w)) if w.contains("not a version 6")),
        "{}",
        o.describe()
    );
    let now = std::fs::read(&path).unwrap();
    assert!(now.starts_with(b"cpuplan-inventory 6\n"));
    assert_eq!(decode(&now).unwrap(), inventory_of(&r));
    assert_eq!(obtain(&dir, &r, &r, false).came, Came::File);
}

#[test]
fn the_stamp_sees_cpus_pci_functions_and_the_driver() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    host(r);
    let first = Stamp::read(r, r);
    assert_eq!(first.changed(&Stamp::read(r, r)), None);
    write(r, "sys/devices/system/cpu/online", "0-2\n");
    let why = first.changed(&Stamp::read(r, r)).unwrap();
    assert!(why.contains("online CPUs 0-3 -> 0-2"), "{why}");
    write(r, "sys/devices/system/cpu/online", "0-3\n");
    write(r, "sys/bus/pci/devices/0000:04:00.0/class", "0x030200\n");
    assert!(first
        .changed(&Stamp::read(r, r))
        .unwrap()
        .contains("PCI devices"));
    std::fs::remove_dir_all(r.join("sys/bus/pci/devices/0000:04:00.0")).unwrap();
    let second = Stamp::read(r, r);
    let gpus = r.join("proc/driver/nvidia/gpus");
    let new = r.join("proc/driver/nvidia/gpus.new");
    std::process::Command::new("cp")
        .arg("-a")
        .arg(&gpus)
        .arg(&new)
        .status()
        .unwrap();
    std::fs::remove_dir_all(&gpus).unwrap();
    std::fs::rename(&new, &gpus).unwrap();
    assert!(second
        .changed(&Stamp::read(r, r))
        .unwrap()
        .contains("NVIDIA driver"));
}

#[test]
fn the_stamp_lists_a_directory_longer_than_its_buffer() {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    host(r);
    let devices = r.join("sys/bus/pci/devices");
    for i in 0..700 {
        write(
            r,
            &format!(
                "sys/bus/pci/devices/0000:{:02x}:{:02x}.1/class",
                i / 32,
                i % 32
            ),
            "0x020000\n",
        );
    }
    let listed = std::fs::read_dir(&devices).unwrap().count();
    assert_eq!(listed, 703);
    let first = Stamp::read(r, r);
    assert_eq!(first.pci.entries, 703);
    assert!(first.pci.present && first.driver.present);
    assert_eq!(first.driver.entries, 2);
    assert_eq!(Stamp::read(r, r), first);
    std::fs::remove_dir_all(devices.join("0000:15:1b.1")).unwrap();
    let fewer = Stamp::read(r, r);
    assert_eq!(fewer.pci.entries, 702);
    assert_ne!(fewer.pci.names, first.pci.names);
    assert!(first
        .changed(&fewer)
        .unwrap()
        .contains("703 -> 702 entries"));
    // A directory that is not there, and one that is a file.
    std::fs::remove_dir_all(r.join("proc/driver/nvidia/gpus")).unwrap();
    assert!(!Stamp::read(r, r).driver.present);
    write(r, "proc/driver/nvidia/gpus", "not a directory");
    assert!(!Stamp::read(r, r).driver.present);
}

/// A root-owned 0700 inventory directory in a temp dir.
fn store_dir(t: &Path) -> PathBuf {
    let d = t.join("inventory");
    std::fs::create_dir(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(t, std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

#[test]
fn the_store_uses_a_trusted_file_and_refuses_the_rest() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the store's owner checks need root (the tests run as root)"
    );
    let t = tempfile::tempdir().unwrap();
    let r = t.path().join("host");
    host(&r);
    let dir = store_dir(t.path());
    let first = obtain(&dir, &r, &r, false);
    assert_eq!(first.came, Came::Written(None), "{}", first.describe());
    let path = file_in(&dir, &r, &r);
    assert_eq!(first.path, path);
    let again = obtain(&dir, &r, &r, false);
    assert_eq!(again.came, Came::File, "{}", again.describe());
    assert_eq!(again.inventory, first.inventory);
    let good = std::fs::read(&path).unwrap();
    // Mode 0666: never used, read again and replaced.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let e = load_file(&path).unwrap_err();
    assert!(e.to_string().contains("group or others may write"), "{e}");
    let o = obtain(&dir, &r, &r, false);
    assert!(
        matches!(&o.came, Came::Written(Some(w)) if w.contains("0666")),
        "{}",
        o.describe()
    );
    assert_eq!(o.inventory, first.inventory);
    // Another owner.
    nix::unistd::chown(&path, Some(nix::unistd::Uid::from_raw(1000)), None).unwrap();
    assert!(load_file(&path)
        .unwrap_err()
        .to_string()
        .contains("uid 1000"));
    // A symlink to a good copy, a FIFO.
    let copy = t.path().join("copy");
    std::fs::write(&copy, &good).unwrap();
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink(&copy, &path).unwrap();
    assert!(load_file(&path)
        .unwrap_err()
        .to_string()
        .contains("symbolic link"));
    std::fs::remove_file(&path).unwrap();
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    assert!(load_file(&path)
        .unwrap_err()
        .to_string()
        .contains("not a regular file"));
    // Truncated, and 16 MiB.
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, &good[..good.len() / 2]).unwrap();
    assert!(load_file(&path)
        .unwrap_err()
        .to_string()
        .contains("truncated"));
    std::fs::write(&path, vec![b'x'; 16 << 20]).unwrap();
    assert!(load_file(&path).unwrap_err().to_string().contains("limit"));
    let o = obtain(&dir, &r, &r, false);
    assert!(matches!(o.came, Came::Written(Some(_))), "{}", o.describe());
    assert_eq!(std::fs::read(&path).unwrap().len(), good.len());
    // A directory others may enter is not trusted, and nothing is written into it.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(check_dir(&dir).unwrap_err().to_string().contains("0755"));
    let o = obtain(&dir, &r, &r, false);
    assert!(
        matches!(&o.came, Came::NotKept(w) if w.contains("0755")),
        "{}",
        o.describe()
    );
    assert_eq!(o.inventory, first.inventory);
    // --refresh reads again whatever the file.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let o = obtain(&dir, &r, &r, true);
    assert_eq!(o.came, Came::Written(Some("--refresh".into())));
}

#[test]
fn a_missing_directory_is_made_root_only() {
    assert!(nix::unistd::geteuid().is_root(), "run the tests as root");
    let t = tempfile::tempdir().unwrap();
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let r = t.path().join("host");
    host(&r);
    let dir = t.path().join("run/cpuplan/inventory");
    let inv = inventory_of(&r);
    save(&dir, &file_in(&dir, &r, &r), &inv).unwrap();
    check_dir(&dir).unwrap();
    assert_eq!(load_file(&file_in(&dir, &r, &r)).unwrap(), inv);
}
