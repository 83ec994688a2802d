//! The inventory file's one format: a magic line with the version, a line with the body's
//! length and checksum, and the body (the inventory as JSON).
//!
//! ```text
//! cpuplan-inventory 1
//! 3012 9f1c0b2a77e4d1c3
//! {"boot_id":"…",…}
//! ```
//!
//! The length is the body's in bytes and the checksum its FNV-1a 64 in hex: a truncated,
//! padded or altered file, or one of another version, is refused whole ([`decode`]), never
//! half-used.

use super::stamp::fnv1a64;
use super::HostInventory;

/// The first line's word.
pub const MAGIC: &str = "cpuplan-inventory";

/// The format's version: a file of another version is read afresh and written again.
pub const FORMAT_VERSION: u32 = 1;

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
