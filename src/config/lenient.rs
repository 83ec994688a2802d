//! What a hook config that is not JSON still says: the top-level keys read whole before the
//! fault (a trailing comma, a missing comma or quote, a comment), so that a broken file's `log`,
//! `on_error` and the other keys an unusable config keeps ([`super::KEPT_WHEN_UNUSABLE`]) hold
//! where they come before the fault.

use std::fmt;

use serde::de::{DeserializeSeed, MapAccess, Visitor};
use serde_json::{Map, Value};

/// The document in `bytes` where it is JSON; else, where it opens an object, the members read
/// whole before the first fault (a later one of a key read twice wins, as serde_json has it);
/// else `null`.
pub(super) fn leading_keys(bytes: &[u8]) -> Value {
    if let Ok(v) = serde_json::from_slice::<Value>(bytes) {
        return v;
    }
    let mut read = Map::new();
    let mut de = serde_json::Deserializer::from_slice(bytes);
    // The error is the file's fault, already reported by the parse that failed: what was read
    // before it is what is wanted.
    let _ = Leading(&mut read).deserialize(&mut de);
    if read.is_empty() {
        Value::Null
    } else {
        Value::Object(read)
    }
}

/// Reads a JSON object's members into the map it holds, one by one, so that those before a
/// fault stay there when the fault ends the read.
struct Leading<'a>(&'a mut Map<String, Value>);

impl<'de> DeserializeSeed<'de> for Leading<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Leading<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object of keys")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            let value: Value = map.next_value()?;
            self.0.insert(key, value);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_members_before_a_fault_are_read_and_none_after_it() {
        // The operator's usual slip: a trailing comma.
        assert_eq!(
            leading_keys(b"{\"log\": \"/var/log/x.log\", \"on_error\": \"deny\",\n}\n"),
            json!({"log": "/var/log/x.log", "on_error": "deny"})
        );
        // A missing comma: what comes before it.
        assert_eq!(
            leading_keys(br#"{"log": "/l", "log_level": "debug" "dir": "/run/x"}"#),
            json!({"log": "/l", "log_level": "debug"})
        );
        // A value cut off: the member is not read, those before it are.
        assert_eq!(
            leading_keys(br#"{"on_error": "deny", "log": "/var/lo"#),
            json!({"on_error": "deny"})
        );
        // A fault inside a nested value ends the read there.
        assert_eq!(
            leading_keys(br#"{"log": "/l", "gpu_sources": ["devices",], "on_error": "deny"}"#),
            json!({"log": "/l"})
        );
        // Nothing to read: a comment first, not an object, empty.
        for text in [&b"// cpuplan\n{\"log\": \"/l\"}"[..], b"[1,", b"", b"{"] {
            assert_eq!(leading_keys(text), Value::Null, "{text:?}");
        }
        // JSON is taken whole, whatever it holds.
        assert_eq!(leading_keys(b"[1]"), json!([1]));
    }
}
