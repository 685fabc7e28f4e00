//! Paths are bytes: a file name need not be UTF-8, and a checkpoint must
//! cover it all the same. The journal writes a path as a JSON string when it
//! is UTF-8 (so journals written before stay readable) and as
//! `{"hex": "…"}` of its bytes when it is not; messages show it with
//! [`shown`], which escapes what would break a line.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Wire {
    Text(String),
    Bytes { hex: String },
}

fn to_wire(path: &Path) -> Wire {
    match path.to_str() {
        Some(s) => Wire::Text(s.to_string()),
        None => Wire::Bytes {
            hex: path.as_os_str().as_bytes().iter().map(|b| format!("{b:02x}")).collect(),
        },
    }
}

fn from_wire<E: serde::de::Error>(wire: Wire) -> Result<PathBuf, E> {
    match wire {
        Wire::Text(s) => Ok(PathBuf::from(s)),
        Wire::Bytes { hex } => {
            if hex.len() % 2 != 0 {
                return Err(E::custom("a hex path has an odd length"));
            }
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(hex.get(i..i + 2).unwrap_or("zz"), 16))
                .collect::<Result<Vec<u8>, _>>()
                .map_err(E::custom)?;
            Ok(PathBuf::from(OsString::from_vec(bytes)))
        }
    }
}

/// `#[serde(with = "bytes_path")]` for a `PathBuf`.
pub fn serialize<S: Serializer>(path: &Path, s: S) -> Result<S::Ok, S::Error> {
    to_wire(path).serialize(s)
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
    from_wire(Wire::deserialize(d)?)
}

/// `#[serde(with = "bytes_path::option")]` for an `Option<PathBuf>`.
pub mod option {
    use super::*;

    pub fn serialize<S: Serializer>(path: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
        path.as_deref().map(to_wire).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
        Option::<Wire>::deserialize(d)?.map(from_wire).transpose()
    }
}

/// `path` as one line of text: bytes that are not UTF-8 as `\xNN`, control
/// characters (a newline in a name) as `\n`, `\t`, `\u{…}`, a backslash
/// doubled, so a message naming it cannot be split or forged.
pub fn shown(path: &Path) -> String {
    let mut out = String::new();
    for chunk in path.as_os_str().as_bytes().utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                c if c.is_control() => out.extend(c.escape_default()),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// Serializes a path for Lua as [`shown`] text (Lua gets names to show, the
/// journal keeps the bytes).
pub fn serialize_shown<S: Serializer>(path: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&shown(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct P {
        #[serde(with = "super")]
        p: PathBuf,
    }

    #[test]
    fn a_name_that_is_not_utf8_goes_through_the_journal_unchanged_and_shows_escaped() {
        let raw = PathBuf::from(OsString::from_vec(b"/p/caf\xe9\nx".to_vec()));
        let line = serde_json::to_string(&P { p: raw.clone() }).unwrap();
        assert_eq!(line, r#"{"p":{"hex":"2f702f636166e90a78"}}"#);
        assert_eq!(serde_json::from_str::<P>(&line).unwrap().p, raw);
        assert_eq!(
            serde_json::from_str::<P>(r#"{"p":"/old/journal.txt"}"#).unwrap().p,
            PathBuf::from("/old/journal.txt")
        );
        assert_eq!(shown(&raw), "/p/caf\\xe9\\nx");
    }

    proptest::proptest! {
        /// Any name, whatever its bytes: the journal gives it back as it was,
        /// and its shown form is one line.
        #[test]
        fn every_name_goes_through_the_journal_and_shows_on_one_line(
            bytes in proptest::collection::vec(1u8..=255, 1..64)
        ) {
            let raw = PathBuf::from(OsString::from_vec(bytes));
            let line = serde_json::to_string(&P { p: raw.clone() }).unwrap();
            proptest::prop_assert_eq!(serde_json::from_str::<P>(&line).unwrap().p, raw.clone());
            let text = shown(&raw);
            proptest::prop_assert!(!text.chars().any(char::is_control), "{}", text);
        }
    }
}
