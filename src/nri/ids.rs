//! The one check of every id the plugin builds a path from. A container id reaches the plugin
//! in every message (CreateContainer, StopContainer, RemoveContainer, Synchronize's lists), and
//! names `<nri_dir>/<id>/` and `<nri_dir>/<id>.claims.json`; a [`ContainerId`] can only be made
//! by [`ContainerId::parse`], and the plan directory takes nothing else. Pod ids name no path.

use std::fmt;

/// The longest id taken (containerd's and CRI-O's are 64 hex digits).
pub const MAX_ID: usize = 128;

/// A container id that is a safe file name: `[A-Za-z0-9_.-]`, 1 to [`MAX_ID`] bytes, not
/// starting with a dot (so never `.`, `..` or a hidden name, never a path).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ContainerId(String);

/// An id that is not a safe file name, quoted (escaped, and cut at 80 bytes) for messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the container id {0} is not a file name")]
pub struct BadId(String);

impl ContainerId {
    /// `id` as a container id, or why not.
    pub fn parse(id: &str) -> Result<ContainerId, BadId> {
        let ok = !id.is_empty()
            && id.len() <= MAX_ID
            && !id.starts_with('.')
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
        if ok {
            return Ok(ContainerId(id.to_string()));
        }
        let cut: String = id.chars().take(80).collect();
        let more = if cut.len() < id.len() { "..." } else { "" };
        Err(BadId(format!("{cut:?}{more}")))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ContainerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_file_names_or_refused() {
        let hex = "0123456789abcdef".repeat(4);
        for ok in ["c1", hex.as_str(), "a_b-c.d"] {
            assert_eq!(ContainerId::parse(ok).unwrap().as_str(), ok);
        }
        for bad in [
            "",
            ".",
            "..",
            "../victim",
            "/etc",
            ".hidden",
            "a/b",
            "a b",
            "a\nb",
            "a\0b",
            &"x".repeat(MAX_ID + 1),
        ] {
            let e = ContainerId::parse(bad).unwrap_err();
            assert!(e.to_string().contains("is not a file name"), "{e}");
            assert!(e.to_string().len() < 130, "quoted short: {e}");
        }
    }
}
