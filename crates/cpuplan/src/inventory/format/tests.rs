//! The inventory file format's tests: round trips, and every damaged file refused.

use super::*;
use crate::cpuset::CpuSet;
use crate::inventory::{Cores, PciFunction, Stamp};

/// A small inventory with every field filled.
fn small() -> HostInventory {
    let set = |l: &str| crate::cpuset::parse_cpu_list(l).unwrap();
    let mut cores = Cores::default();
    cores.push(&set("0,2"));
    cores.push(&set("1,3"));
    HostInventory {
        boot_id: "boot".into(),
        root: "/".into(),
        topology_root: "/".into(),
        stamp: Stamp::default(),
        online: set("0-3"),
        running: set("0-3"),
        cores,
        core_of: vec![Some(0), Some(1), Some(0), None],
        nodes: vec![crate::topology::NumaNode {
            id: 0,
            cpus: set("0-3"),
        }],
        pci: vec![PciFunction {
            address: "0000:01:00.0".into(),
            class: Some(0x030200),
            vendor: Some(0x10de),
            node: Some(0),
            local: Some(set("0-3,8191")),
            cpu_node: None,
        }],
        nvidia: Vec::new(),
        caps_major: Some(-1),
        cgroup_mounts: None,
    }
}

#[test]
fn a_small_inventory_round_trips_and_starts_with_its_version() {
    let inv = small();
    let bytes = encode(&inv);
    assert!(bytes.starts_with(b"cpuplan-inventory 6\n"));
    assert_eq!(decode(&bytes).unwrap(), inv);
}

#[test]
fn sets_round_trip_as_words_and_past_the_highest_cpu_are_refused() {
    for list in [
        "",
        "0",
        "0-8191",
        "8191",
        "0,112",
        "1-3,5,7-63,64,127-128,4000-4100",
        "63-64",
    ] {
        let set = crate::cpuset::parse_cpu_list(list).unwrap();
        let bytes = postcard::to_allocvec(&set).unwrap();
        assert_eq!(
            postcard::from_bytes::<CpuSet>(&bytes).unwrap(),
            set,
            "{list}"
        );
    }
    let words = |n: usize| postcard::to_allocvec(&vec![1u64; n]).unwrap();
    assert!(postcard::from_bytes::<CpuSet>(&words(128)).is_ok());
    let e = postcard::from_bytes::<CpuSet>(&words(129)).unwrap_err();
    assert!(
        e.to_string().contains("highest CPU") || matches!(e, postcard::Error::SerdeDeCustom),
        "{e}"
    );
    // Trailing zero words are dropped: one set, one value.
    let two = postcard::to_allocvec(&vec![1u64, 0]).unwrap();
    assert_eq!(
        postcard::from_bytes::<CpuSet>(&two).unwrap(),
        CpuSet::range(0, 0).unwrap()
    );
}

#[test]
fn absurd_counts_and_lengths_are_refused_before_anything_is_reserved() {
    // A count of four billion PCI functions with no bytes behind it: refused at once (at 80
    // bytes a function, reserving it would be 320 GiB and the test would abort).
    let count = postcard::to_allocvec(&u32::MAX).unwrap();
    assert!(postcard::from_bytes::<Vec<PciFunction>>(&count).is_err());
    // The boot id's length made four billion in a whole file.
    let mut bytes = encode(&small());
    let at = header().len();
    assert_eq!(bytes[at], 4, "the boot id's length");
    bytes.splice(at..at + 1, count.iter().copied());
    let e = decode(&bytes).unwrap_err();
    assert!(e.contains("truncated or corrupt"), "{e}");
}

#[test]
fn what_is_not_a_whole_inventory_of_this_version_is_refused() {
    let inv = small();
    let bytes = encode(&inv);
    for len in 0..bytes.len() {
        assert!(decode(&bytes[..len]).is_err(), "truncated to {len} bytes");
    }
    let mut padded = bytes.clone();
    padded.push(0);
    let e = decode(&padded).unwrap_err();
    assert!(e.contains("1 bytes after its end"), "{e}");
    let body = &bytes[header().len()..];
    for head in [
        "cpuplan-inventory 5\n",
        "cpuplan-inventory 06\n",
        "cpuplan-inventory 6 \n",
        "cpuplan-inventory  6\n",
        "cpuplan-inventory 6\r\n",
        "{\"boot_id\"",
    ] {
        let e = decode(&[head.as_bytes(), body].concat()).unwrap_err();
        assert!(e.contains("not a version 6 inventory"), "{head:?}: {e}");
    }
    // A CPU's core past the cores.
    let mut odd = inv.clone();
    odd.core_of[3] = Some(2);
    let e = decode(&encode(&odd)).unwrap_err();
    assert!(e.contains("CPU 3's core past the 2 cores"), "{e}");
    // A core's CPUs out of order, and a text that is not UTF-8.
    let mut cores = bytes.clone();
    let at = find(&cores, &[4, 0, 2, 1, 3]).expect("the cores' ids 0,2,1,3");
    cores[at + 2] = 0;
    assert!(decode(&cores).is_err(), "a core 0,0");
    let mut text = bytes;
    let at = find(&text, b"boot").unwrap();
    text[at] = 0xff;
    assert!(decode(&text).unwrap_err().contains("truncated or corrupt"));
}

/// Where `needle` first occurs in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[test]
fn no_change_of_one_byte_makes_decoding_panic() {
    // No checksum: a changed byte may still be a valid inventory, but never a panic, and what
    // decodes is whole (it encodes and decodes to itself).
    let bytes = encode(&small());
    for i in 0..bytes.len() {
        for bit in [0x01, 0x80] {
            let mut flipped = bytes.clone();
            flipped[i] ^= bit;
            if let Ok(inv) = decode(&flipped) {
                assert_eq!(decode(&encode(&inv)).unwrap(), inv, "byte {i} ^ {bit:#x}");
            }
        }
    }
}
