//! A JSON object kept as its members' original text, in order: members cpuplan edits are
//! replaced by typed values, every other member passes through byte for byte.

use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// A JSON object whose members are their original text.
#[derive(Debug, Default)]
pub struct RawObject(Vec<(String, Box<RawValue>)>);

/// A member that is not what an edit needs (not an object, not a list of strings…).
#[derive(Debug, thiserror::Error)]
#[error("{member}: {message}")]
pub struct MemberError {
    /// The member, in JSON path form.
    pub member: String,
    /// What is wrong.
    pub message: String,
}

impl RawObject {
    /// The object in `json`.
    pub fn parse(json: &str) -> Result<RawObject, serde_json::Error> {
        serde_json::from_str(json)
    }

    /// The member `key`, if present.
    pub fn get(&self, key: &str) -> Option<&RawValue> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| &**v)
    }

    /// The member `key` read as `T` (`None` when absent or `null`); `path` names it in errors.
    pub fn typed<T: for<'a> Deserialize<'a>>(
        &self,
        key: &str,
        path: &str,
    ) -> Result<Option<T>, MemberError> {
        match self.get(key) {
            None => Ok(None),
            Some(raw) if raw.get() == "null" => Ok(None),
            Some(raw) => serde_json::from_str(raw.get())
                .map(Some)
                .map_err(|e| MemberError {
                    member: format!("{path}.{key}"),
                    message: e.to_string(),
                }),
        }
    }

    /// The member `key` as an object (empty when absent or `null`); `path` names it in errors.
    pub fn object(&self, key: &str, path: &str) -> Result<RawObject, MemberError> {
        Ok(self.typed(key, path)?.unwrap_or_default())
    }

    /// Sets `key` to `value`, in place of its first member, else last; every other member
    /// named `key` is dropped (JSON parsers disagree on which duplicate wins: Go's and Python's
    /// keep the last, so a forged duplicate kept after the edited one would win there).
    pub fn set(&mut self, key: &str, value: &impl Serialize) {
        let raw = serde_json::value::to_raw_value(value).expect("serializable");
        match self.0.iter().position(|(k, _)| k == key) {
            Some(i) => {
                self.0[i].1 = raw;
                let mut seen = 0;
                self.0.retain(|(k, _)| {
                    if k != key {
                        return true;
                    }
                    seen += 1;
                    seen == 1
                });
            }
            None => self.0.push((key.to_string(), raw)),
        }
    }

    /// The object as JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("serializable")
    }
}

impl Serialize for RawObject {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawObject;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawObject, A::Error> {
                let mut members = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Box<RawValue>>()? {
                    members.push((k, v));
                }
                Ok(RawObject(members))
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untouched_members_keep_their_text_and_order() {
        let mut o =
            RawObject::parse(r#"{"z": [1, 2.50, "\u00e9"], "a": {"b": 1}, "n": null}"#).unwrap();
        o.set("a", &serde_json::json!({"c": 2}));
        o.set("new", &"x");
        assert_eq!(
            o.to_json(),
            r#"{"z":[1, 2.50, "\u00e9"],"a":{"c":2},"n":null,"new":"x"}"#
        );
        assert!(o.object("n", "$").unwrap().0.is_empty());
        let e = o.object("z", "$").unwrap_err().to_string();
        assert!(e.starts_with("$.z: "), "{e}");
        assert!(RawObject::parse("[1]").is_err());
    }

    #[test]
    fn setting_a_key_drops_its_duplicates() {
        let mut o = RawObject::parse(r#"{"k": 1, "a": 2, "k": 3, "k": 4}"#).unwrap();
        o.set("k", &"real");
        assert_eq!(o.to_json(), r#"{"k":"real","a":2}"#);
    }
}
