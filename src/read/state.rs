//! The OCI state a runtime gives a hook on stdin.

use std::io::Read;
use std::path::PathBuf;

use std::collections::BTreeMap;

use oci_spec::runtime::{ContainerState, State};
use serde::de::IgnoredAny;
use serde::Deserialize;

/// The most state JSON the hook reads (1 MiB).
pub const MAX_STATE: usize = 1 << 20;

/// A state the hook cannot use; always fatal, whatever `on_error` says.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Reading stdin failed.
    #[error("cannot read the OCI state from stdin: {0}")]
    Read(#[from] std::io::Error),
    /// More than [`MAX_STATE`] bytes.
    #[error("the OCI state on stdin is over {MAX_STATE} bytes")]
    TooLarge,
    /// Not the state JSON.
    #[error("malformed OCI state on stdin: {message} (starts {head:?})")]
    Malformed {
        /// serde's message.
        message: String,
        /// The first bytes, quoted.
        head: String,
    },
    /// A field the hook needs is missing or wrong.
    #[error("OCI state on stdin: {0}")]
    Field(String),
}

/// Which of the members the hook needs the state has, before it is read as oci-spec's
/// [`State`] (which defaults a missing one: an empty id, the status `stopped`).
#[derive(Deserialize)]
struct Present {
    id: Option<IgnoredAny>,
    status: Option<IgnoredAny>,
    bundle: Option<IgnoredAny>,
}

/// The state, checked: a non-empty id, a known status and an absolute bundle path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookState {
    id: String,
    status: ContainerState,
    pid: Option<u32>,
    bundle: PathBuf,
    annotations: BTreeMap<String, String>,
}

impl HookState {
    /// The container id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The container init's host pid, if the state has one.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// The bundle directory.
    pub fn bundle(&self) -> &PathBuf {
        &self.bundle
    }

    /// Whether the runtime says the container has stopped.
    pub fn stopped(&self) -> bool {
        self.status == ContainerState::Stopped
    }

    /// An annotation of the state.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key).map(String::as_str)
    }

    /// The state's annotations.
    pub fn annotations(&self) -> &BTreeMap<String, String> {
        &self.annotations
    }
}

/// The state read from `input` to EOF, at most [`MAX_STATE`] bytes.
pub fn read_state(input: impl Read) -> Result<HookState, StateError> {
    // A state is a few hundred bytes (more with annotations): a page takes it in one read.
    let mut buf = Vec::with_capacity(4096);
    input.take(MAX_STATE as u64 + 1).read_to_end(&mut buf)?;
    if buf.len() > MAX_STATE {
        return Err(StateError::TooLarge);
    }
    parse_state(&buf)
}

/// The state in `bytes`.
pub fn parse_state(bytes: &[u8]) -> Result<HookState, StateError> {
    let head = || String::from_utf8_lossy(&bytes[..bytes.len().min(80)]).into_owned();
    let malformed = |message: String| StateError::Malformed {
        message,
        head: head(),
    };
    let trimmed = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if trimmed.is_some() && trimmed != Some(&b'{') {
        serde_json::from_slice::<serde::de::IgnoredAny>(bytes)
            .map_err(|e| malformed(e.to_string()))?;
        return Err(malformed("not a JSON object".into()));
    }
    let present: Present = serde_json::from_slice(bytes).map_err(|e| malformed(e.to_string()))?;
    for (member, there) in [
        ("id", present.id.is_some()),
        ("status", present.status.is_some()),
        ("bundle", present.bundle.is_some()),
    ] {
        if !there {
            return Err(StateError::Field(format!("no {member:?}")));
        }
    }
    let state: State = serde_json::from_slice(bytes).map_err(|e| malformed(e.to_string()))?;
    if state.id().is_empty() {
        return Err(StateError::Field("empty \"id\"".into()));
    }
    if !state.bundle().is_absolute() {
        return Err(StateError::Field(format!(
            "bundle {:?} is not an absolute path",
            state.bundle().display().to_string()
        )));
    }
    Ok(HookState {
        id: state.id().clone(),
        status: *state.status(),
        pid: state
            .pid()
            .and_then(|p| u32::try_from(p).ok())
            .filter(|p| *p > 0),
        bundle: state.bundle().clone(),
        annotations: state
            .annotations()
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"ociVersion":"1.0.2","id":"c1","status":"creating","pid":42,"bundle":"/b","annotations":{"a":"b"}}"#;

    #[test]
    fn reads_a_runc_state() {
        let s = read_state(GOOD.as_bytes()).unwrap();
        assert_eq!(s.id(), "c1");
        assert_eq!(s.pid(), Some(42));
        assert_eq!(s.bundle(), &PathBuf::from("/b"));
        assert!(!s.stopped());
        assert_eq!(s.annotation("a"), Some("b"));
        let stopped =
            parse_state(br#"{"ociVersion":"1.0.2","id":"c1","status":"stopped","bundle":"/b"}"#)
                .unwrap();
        assert!(stopped.stopped());
        assert_eq!(stopped.pid(), None);
    }

    #[test]
    fn rejects_bad_states() {
        for (bad, needle) in [
            ("", "malformed"),
            ("{\"id\":", "malformed"),
            ("[]", "not a JSON object"),
            (r#"{"id":"c","status":"creating"}"#, "bundle"),
            (r#"{"id":"","status":"creating","bundle":"/b"}"#, "empty"),
            (
                r#"{"id":"c","status":"creating","bundle":"rel/b"}"#,
                "rel/b",
            ),
            (r#"{"id":"c","status":"bogus","bundle":"/b"}"#, "bogus"),
            (
                r#"{"id":"c","status":"creating","bundle":"/b","pid":"x"}"#,
                "malformed",
            ),
        ] {
            let e = parse_state(bad.as_bytes()).unwrap_err().to_string();
            assert!(e.contains(needle), "{bad}: {e}");
        }
    }

    #[test]
    fn refuses_more_than_a_mebibyte() {
        let mut big =
            String::from(r#"{"id":"c","status":"creating","bundle":"/b","annotations":{"x":""#);
        big.push_str(&"a".repeat(MAX_STATE));
        big.push_str("\"}}");
        assert!(matches!(
            read_state(big.as_bytes()),
            Err(StateError::TooLarge)
        ));
    }
}
