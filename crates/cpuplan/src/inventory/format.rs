//! The inventory file's one format: a magic line with the version, a line with the body's
//! length and checksum, and the body (the inventory as JSON).
//!
//! ```text
//! cpuplan-inventory 2
//! 3012 9f1c0b2a77e4d1c3
//! {"boot_id":"…",…}
//! ```
//!
//! The length is the body's in bytes and the checksum its FNV-1a 64 in hex: a truncated,
//! padded or altered file, or one of another version, is refused whole ([`decode`]), never
//! half-used.
//!
//! Version 2 keeps the cores' sibling sets as one string of their bit words in hex
//! ([`core_lists`]: `"1.1000000000000;2.2000000000000;…"`, CPU 0 and 112, then 1 and 113)
//! rather than a cpu-list string each: one string scanned, no cpu-list parse per core.

use super::stamp::fnv1a64;
use super::HostInventory;

/// The first line's word.
pub const MAGIC: &str = "cpuplan-inventory";

/// The format's version: a file of another version is read afresh and written again.
pub const FORMAT_VERSION: u32 = 2;

/// The most bytes an inventory file may have (a host with 8192 CPUs and 1000 PCI functions fits).
pub const MAX_FILE: usize = 1 << 20;

/// The inventory as the file holds it.
pub fn encode(inv: &HostInventory) -> Vec<u8> {
    let body = serde_json::to_vec(inv).unwrap_or_default();
    let mut out = format!(
        "{MAGIC} {FORMAT_VERSION}\n{} {:016x}\n",
        body.len(),
        fnv1a64(&body)
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
}

/// The inventory a file's bytes hold, or why they hold none (in words).
pub fn decode(bytes: &[u8]) -> Result<HostInventory, String> {
    let (magic, rest) = split_line(bytes).ok_or("no header line")?;
    let want = format!("{MAGIC} {FORMAT_VERSION}");
    if magic != want.as_bytes() {
        return Err(format!(
            "not a version {FORMAT_VERSION} inventory (header {:?})",
            String::from_utf8_lossy(&magic[..magic.len().min(40)])
        ));
    }
    let (frame, body) = split_line(rest).ok_or("no length line")?;
    let frame = std::str::from_utf8(frame).map_err(|_| "the length line is not text")?;
    let (len, sum) = frame
        .split_once(' ')
        .ok_or("the length line has no checksum")?;
    let len: usize = len.parse().map_err(|_| "the length is not a number")?;
    let sum = u64::from_str_radix(sum, 16).map_err(|_| "the checksum is not hex")?;
    if body.len() != len {
        return Err(format!(
            "the body has {} bytes, the header says {len} (truncated or padded)",
            body.len()
        ));
    }
    if fnv1a64(body) != sum {
        return Err("the body's checksum does not match".into());
    }
    serde_json::from_slice(body).map_err(|e| format!("the body does not parse: {e}"))
}

fn split_line(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let nl = bytes.iter().take(128).position(|b| *b == b'\n')?;
    Some((&bytes[..nl], &bytes[nl + 1..]))
}

/// `cores` as one string: each core's bit words in hex (low word first, `.` between them), `;`
/// between cores; an empty string is no cores.
pub mod core_lists {
    use std::fmt::Write;

    use serde::de::{Deserializer, Error, Visitor};
    use serde::Serializer;

    use crate::cpuset::CpuSet;

    /// Writes `cores` as `"1.1000000000000;2.2000000000000"`.
    pub fn serialize<S: Serializer>(cores: &[CpuSet], s: S) -> Result<S::Ok, S::Error> {
        let mut text = String::new();
        for (i, core) in cores.iter().enumerate() {
            if i > 0 {
                text.push(';');
            }
            for (j, w) in core.words().iter().enumerate() {
                if j > 0 {
                    text.push('.');
                }
                let _ = write!(text, "{w:x}");
            }
        }
        s.serialize_str(&text)
    }

    /// The cores in `text` as [`serialize`] writes them, in one pass over its bytes (this is
    /// most of an inventory's parse); `None` at the first byte or word out of place.
    fn cores(text: &str) -> Option<Vec<CpuSet>> {
        if text.is_empty() {
            return Some(Vec::new());
        }
        let mut cores = Vec::with_capacity(text.bytes().filter(|b| *b == b';').count() + 1);
        let mut words: Vec<u64> = Vec::with_capacity(2);
        let (mut word, mut digits) = (0u64, 0u32);
        for &b in text.as_bytes().iter().chain(b";") {
            match b {
                b'0'..=b'9' | b'a'..=b'f' if digits < 16 => {
                    let v = if b <= b'9' { b - b'0' } else { b - b'a' + 10 };
                    word = word << 4 | u64::from(v);
                    digits += 1;
                }
                b'.' | b';' if digits > 0 => {
                    words.push(word);
                    (word, digits) = (0, 0);
                    if b == b';' {
                        cores.push(CpuSet::from_words(std::mem::replace(
                            &mut words,
                            Vec::with_capacity(2),
                        ))?);
                    }
                }
                _ => return None,
            }
        }
        Some(cores)
    }

    /// Reads what [`serialize`] writes.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<CpuSet>, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Vec<CpuSet>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("cores as hex bit words")
            }
            fn visit_str<E: Error>(self, v: &str) -> Result<Vec<CpuSet>, E> {
                cores(v).ok_or_else(|| {
                    E::custom(format!(
                        "cores {:?}: not hex bit words",
                        v.chars().take(40).collect::<String>()
                    ))
                })
            }
        }
        d.deserialize_str(V)
    }

    #[cfg(test)]
    mod tests {
        use crate::cpuset::parse_cpu_list;

        #[test]
        fn cores_round_trip_and_bad_words_are_refused() {
            #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
            struct C(#[serde(with = "super")] Vec<crate::CpuSet>);
            let cores = C(["0,112", "1,113", "8191", "64-127"]
                .iter()
                .map(|l| parse_cpu_list(l).unwrap())
                .collect());
            let text = serde_json::to_string(&cores).unwrap();
            let high = format!("{}8000000000000000", "0.".repeat(127));
            assert_eq!(
                text,
                format!("\"1.1000000000000;2.2000000000000;{high};0.ffffffffffffffff\"")
            );
            assert_eq!(serde_json::from_str::<C>(&text).unwrap(), cores);
            assert_eq!(serde_json::from_str::<C>(r#""""#).unwrap(), C(vec![]));
            for bad in [
                r#""1;;2""#,
                r#""x""#,
                r#""1.""#,
                r#""11111111111111111""#,
                "3",
            ] {
                assert!(serde_json::from_str::<C>(bad).is_err(), "{bad}");
            }
        }
    }
}
