//! The inventory file format's tests: round trips, and every damaged file refused.

use super::*;

/// `body` framed as a file: the header, its length and its true checksum.
fn framed(body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "{MAGIC} {FORMAT_VERSION}\n{} {:016x}\n",
        body.len(),
        checksum(body)
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// The body of an inventory up to its cores: three texts, a stamp, two sets.
fn start() -> Writer {
    let mut w = Writer(Vec::new());
    for s in [&b"boot"[..], b"/", b"/"] {
        w.str(s);
    }
    w.stamp(&Stamp::default());
    w.set(&CpuSet::range(0, 3).unwrap());
    w.set(&CpuSet::range(0, 3).unwrap());
    w
}

/// The rest of a small valid body after its cores.
fn finish(mut w: Writer) -> Vec<u8> {
    w.0.push(0); // core_of, from the cores
    w.count(0); // nodes
    w.count(0); // pci
    w.count(0); // nvidia
    w.opt(None::<u32>, Writer::u32);
    w.opt(None::<u32>, Writer::u32);
    w.0
}

fn refused(body: &[u8]) -> String {
    decode(&framed(body)).unwrap_err()
}

#[test]
fn a_hand_made_body_decodes() {
    let mut w = start();
    w.count(0);
    let inv = decode(&framed(&finish(w))).unwrap();
    assert_eq!(inv.boot_id, "boot");
    assert_eq!(inv.online, CpuSet::range(0, 3).unwrap());
    assert!(inv.cores.is_empty() && inv.cgroup_mounts.is_none());
}

#[test]
fn sets_round_trip_as_ranges() {
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
        let mut w = Writer(Vec::new());
        w.set(&set);
        let mut r = Reader { b: &w.0, at: 0 };
        assert_eq!(r.set().unwrap(), set, "{list}");
        assert_eq!(r.at, w.0.len());
    }
}

#[test]
fn absurd_counts_and_lengths_are_refused_before_anything_is_reserved() {
    // Counts of four billion items: the count is refused before any list is reserved (at
    // 80 bytes a PCI function that would be 320 GiB, and the test would abort).
    let mut w = start();
    w.u32(u32::MAX);
    let e = refused(&finish(w));
    assert!(e.contains("a count larger than the bytes left"), "{e}");
    let mut w = start();
    w.count(0); // cores
    w.0.push(0); // core_of from the cores
    w.count(0); // nodes
    w.u32(u32::MAX); // PCI functions
    assert!(refused(&w.0).contains("a count larger than the bytes left"));
    // One more item than there are bytes for, each item at its smallest.
    let mut w = start();
    w.u32(3);
    w.0.extend_from_slice(&[0; 5]);
    assert!(refused(&w.0).contains("a count larger than the bytes left"));
    // A text longer than the body.
    let mut w = Writer(Vec::new());
    w.u32(u32::MAX);
    assert!(refused(&w.0).contains("a count larger than the bytes left"));
    let mut w = Writer(Vec::new());
    w.u32(2);
    w.0.push(b'x');
    assert!(refused(&w.0).contains("a count larger than the bytes left"));
}

#[test]
fn sets_texts_tags_and_leftovers_out_of_place_are_refused() {
    // Sets with a range past CPU 8191, reversed, overlapping, touching, out of order.
    for (ranges, why) in [
        (&[(0u16, 8192u16)][..], "past the highest CPU"),
        (&[(8192, 8192)], "past the highest CPU"),
        (&[(0, 1), (u16::MAX, u16::MAX)], "past the highest CPU"),
        (&[(3, 2)], "out of order"),
        (&[(0, 4), (4, 6)], "out of order"),
        (&[(0, 4), (5, 6)], "out of order"),
        (&[(8, 9), (0, 1)], "out of order"),
        (&[(0, 9), (2, 3)], "out of order"),
    ] {
        let mut w = Writer(Vec::new());
        w.u16(ranges.len() as u16);
        for (lo, hi) in ranges {
            w.u16(*lo);
            w.u16(*hi);
        }
        let e = Reader { b: &w.0, at: 0 }.set().unwrap_err();
        assert!(e.contains(why), "{ranges:?}: {e}");
    }
    // A set of 65535 ranges whose bytes are not there.
    let mut w = Writer(Vec::new());
    w.u16(u16::MAX);
    w.u16(0);
    let e = Reader { b: &w.0, at: 0 }.set().unwrap_err();
    assert!(e.contains("runs past the end"), "{e}");
    // The same in a whole body: the host's online CPUs.
    let mut w = Writer(Vec::new());
    for s in [&b"boot"[..], b"/", b"/"] {
        w.str(s);
    }
    w.stamp(&Stamp::default());
    w.u16(1);
    w.u16(9);
    w.u16(8);
    assert!(refused(&w.0).contains("out of order"));
    // Cores with more CPUs than bytes, and a core's CPUs twice.
    let mut w = start();
    w.count(1);
    w.u16(u16::MAX);
    assert!(refused(&w.0).contains("a count larger than the bytes left"));
    let mut w = start();
    w.count(1);
    w.u16(2);
    w.u16(5);
    w.u16(5);
    assert!(refused(&finish(w)).contains("a core's CPUs out of order"));
    // A text that is not UTF-8.
    let mut w = Writer(Vec::new());
    w.str(b"\xff\xfe");
    assert!(refused(&w.0).contains("not UTF-8"));
    // A tag of 2.
    let mut w = start();
    w.count(0);
    let mut body = finish(w);
    let tag = body.len() - 1;
    body[tag] = 2;
    assert!(refused(&body).contains("neither 0 nor 1"));
    // A CPU whose core index is past the cores.
    let mut w = start();
    w.count(1);
    w.u16(2);
    w.u16(0);
    w.u16(1);
    w.0.push(1);
    w.count(1);
    w.u16(1);
    w.count(0);
    w.count(0);
    w.count(0);
    w.opt(None::<u32>, Writer::u32);
    w.opt(None::<u32>, Writer::u32);
    assert!(refused(&w.0).contains("core past the cores"));
    // Bytes after a whole body.
    let mut w = start();
    w.count(0);
    let mut body = finish(w);
    body.push(0);
    assert!(refused(&body).contains("1 bytes after its end"));
}

#[test]
fn the_frame_lines_are_strict() {
    let mut w = start();
    w.count(0);
    let body = finish(w);
    let good = framed(&body);
    assert!(decode(&good).is_ok());
    let text = |head: &str| [head.as_bytes(), &body].concat();
    let sum = checksum(&body);
    let hex = format!("{sum:016x}");
    assert!(
        hex.bytes().any(|b| b.is_ascii_lowercase()),
        "the upper case is another spelling"
    );
    for head in [
        format!("cpuplan-inventory 05\n{} {sum:016x}\n", body.len()),
        format!("cpuplan-inventory 5 \n{} {sum:016x}\n", body.len()),
        format!("cpuplan-inventory 5\n{} {sum:016X}\n", body.len()),
        format!("cpuplan-inventory 5\n{} {}\n", body.len(), &hex[1..]),
        format!("cpuplan-inventory 5\n0{} {sum:016x}\n", body.len()),
        format!("cpuplan-inventory 5\n+{} {sum:016x}\n", body.len()),
        format!("cpuplan-inventory 5\n{}  {sum:016x}\n", body.len()),
        format!("cpuplan-inventory 5\n{} {sum:016x}\n", body.len() + 1),
    ] {
        assert!(decode(&text(&head)).is_err(), "{head:?}");
    }
}

#[test]
fn the_checksum_sees_every_bit_and_the_length() {
    // Zero bytes of each length up to two words and a bit: the padding alone would make the
    // first eight the same.
    let sums: std::collections::HashSet<u64> = (0..=17).map(|n| checksum(&vec![0u8; n])).collect();
    assert_eq!(sums.len(), 18);
    let body: Vec<u8> = (0..29u8).collect();
    let sum = checksum(&body);
    for i in 0..body.len() {
        for bit in 0..8 {
            let mut flipped = body.clone();
            flipped[i] ^= 1 << bit;
            assert_ne!(checksum(&flipped), sum, "byte {i} bit {bit}");
        }
    }
    // The same body framed as version 3 (byte-wise FNV-1a 64) is another version's file.
    let mut w = start();
    w.count(0);
    let body = finish(w);
    let v3 = [
        format!(
            "cpuplan-inventory 3\n{} {:016x}\n",
            body.len(),
            crate::inventory::stamp::fnv1a64(&body)
        )
        .as_bytes(),
        &body,
    ]
    .concat();
    assert!(decode(&framed(&body)).is_ok());
    let e = decode(&v3).unwrap_err();
    assert!(e.contains("not a version 5 inventory"), "{e}");
}
