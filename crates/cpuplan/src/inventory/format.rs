//! The inventory file's one format: a header line with the version, then the [`HostInventory`]
//! as serde writes it in postcard's encoding.
//!
//! ```text
//! cpuplan-inventory 6
//! <postcard body>
//! ```
//!
//! Why postcard: the hook loads this file at every container start, and postcard is serde's
//! compact binary encoding, with a stable, documented wire format (1.x) and bounded decoding (a
//! length is checked against the bytes left before anything is allocated for it). Read from a
//! tmpfs and decoded, the 224-CPU host's file took 0.07–0.30× the time of serde_json on the
//! same `HostInventory`, interleaved in one run at load 17 (`cargo bench -p cpuplan --bench
//! inventory_codec`: about 9 µs against 104–133 µs), at half its size, and as long as the
//! hand-written format it replaced (0.3–1.2× in the same run). JSON would have made the file
//! readable as it lies; `cpuplan inventory --json` shows the same inventory instead.
//!
//! The body is the inventory's serde form in a binary format: CPU sets as their bit words,
//! the cores as their CPU ids and sizes (in a human-readable format, `inventory --json`, both
//! are cpu-list text). A file of another version, truncated, with bytes after its end, or whose
//! fields do not parse (a CPU set past [`crate::cpuset::MAX_CPU`], a core's CPUs out of order,
//! a core index past the cores, a text that is not UTF-8) is refused whole ([`decode`]), never
//! half-used; the store then reads the host afresh and writes the file again. The store bounds
//! the read at [`MAX_FILE`] and trusts only root's files ([`super::store`]). No checksum: the
//! file is root's own on a tmpfs, written whole and renamed into place.

use super::HostInventory;

/// The header line's first word.
pub const MAGIC: &str = "cpuplan-inventory";

/// The format's version: a file of another version is read afresh and written again.
pub const FORMAT_VERSION: u32 = 6;

/// The most bytes an inventory file may have (a host with 8192 CPUs and 1000 PCI functions fits).
pub const MAX_FILE: usize = 1 << 20;

/// The header line, newline included.
fn header() -> String {
    format!("{MAGIC} {FORMAT_VERSION}\n")
}

/// The inventory as the file holds it.
pub fn encode(inv: &HostInventory) -> Vec<u8> {
    // Serializing into a Vec fails only where a type's Serialize does, and none of the
    // inventory's does; were one to, the empty file is refused at the next load and written
    // again.
    postcard::to_extend(inv, header().into_bytes()).unwrap_or_default()
}

/// The inventory a file's bytes hold, or why they hold none (in words).
pub fn decode(bytes: &[u8]) -> Result<HostInventory, String> {
    let head = header();
    let Some(body) = bytes.strip_prefix(head.as_bytes()) else {
        let line = bytes.split(|b| *b == b'\n').next().unwrap_or_default();
        return Err(format!(
            "not a version {FORMAT_VERSION} inventory (header {:?})",
            String::from_utf8_lossy(&line[..line.len().min(40)])
        ));
    };
    let (inv, rest): (HostInventory, _) = postcard::take_from_bytes(body)
        .map_err(|e| format!("the body does not parse (truncated or corrupt): {e}"))?;
    if !rest.is_empty() {
        return Err(format!(
            "the body does not parse: {} bytes after its end",
            rest.len()
        ));
    }
    let cores = inv.cores.len();
    if let Some(cpu) = inv
        .core_of
        .iter()
        .position(|c| c.is_some_and(|i| i as usize >= cores))
    {
        return Err(format!(
            "the body does not parse: CPU {cpu}'s core past the {cores} cores"
        ));
    }
    Ok(inv)
}

#[cfg(test)]
mod tests;
