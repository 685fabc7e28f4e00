//! Typed replies to [`crate::EditorCall`]s: what the editor answered, read
//! into the type its consumer needs. Each is read leniently, as the core
//! always read the raw JSON: a reply of the wrong shape, or with a field of
//! the wrong type, is what that field's absence means (the doc of each type
//! says what), never an error, so an older or odd Lua side degrades the way
//! it did before these types existed.

use serde_json::Value;

/// A reply read from the editor's JSON answer.
pub trait Reply: Sized {
    /// Reads `answer`; never fails (see the module doc).
    fn from_reply(answer: Value) -> Self;
}

/// The reply to `confirm`: go on only on `true`; anything else is no.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfirmReply {
    pub go_on: bool,
}

impl Reply for ConfirmReply {
    fn from_reply(answer: Value) -> Self {
        ConfirmReply {
            go_on: answer == Value::Bool(true),
        }
    }
}

/// The reply to `ask`: the answer string; anything else is no answer
/// (dismissed), and the question's default applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AskReply(pub Option<String>);

impl Reply for AskReply {
    fn from_reply(answer: Value) -> Self {
        match answer {
            Value::String(s) => AskReply(Some(s)),
            _ => AskReply(None),
        }
    }
}

/// An open buffer's text, from `fs/read_text_file`'s
/// `{ content, _meta.mia = { modified, fileformat, bomb, fileencoding } }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferRead {
    pub content: String,
    /// Unsaved changes. Missing or not a boolean (an older answer): `true`,
    /// so nothing is compared with the disk.
    pub modified: bool,
    /// Missing or not a string: "unix".
    pub fileformat: String,
    /// Missing or not a boolean: `false`.
    pub bomb: bool,
    /// Missing or not a string: "" (the buffer's encoding is unknown).
    pub encoding: String,
}

/// The reply to `fs/read_text_file`: the buffer, or `None` when no buffer
/// holds the file (`nil`, or anything without a string `content`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadReply(pub Option<BufferRead>);

impl Reply for ReadReply {
    fn from_reply(answer: Value) -> Self {
        let Value::Object(m) = answer else {
            return ReadReply(None);
        };
        let Some(Value::String(content)) = m.get("content") else {
            return ReadReply(None);
        };
        let meta = m.get("_meta").and_then(|v| v.get("mia"));
        let field = |k: &str| meta.and_then(|v| v.get(k));
        ReadReply(Some(BufferRead {
            content: content.clone(),
            modified: field("modified").and_then(Value::as_bool).unwrap_or(true),
            fileformat: field("fileformat")
                .and_then(Value::as_str)
                .unwrap_or("unix")
                .to_string(),
            bomb: field("bomb").and_then(Value::as_bool).unwrap_or(false),
            encoding: field("fileencoding").and_then(Value::as_str).unwrap_or("").to_string(),
        }))
    }
}

/// The reply to `fs/write_text_file`: `{ written = true }`,
/// `{ rejected = true, reason? }`, or anything else (`nil`): no buffer holds
/// the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteReply {
    Written,
    /// The user refused; the reason when the editor gave a string.
    Rejected {
        reason: Option<String>,
    },
    NoBuffer,
}

impl Reply for WriteReply {
    fn from_reply(answer: Value) -> Self {
        let flag = |k: &str| answer.get(k).and_then(Value::as_bool).unwrap_or(false);
        if !answer.is_object() {
            WriteReply::NoBuffer
        } else if flag("written") {
            WriteReply::Written
        } else if flag("rejected") {
            WriteReply::Rejected {
                reason: answer.get("reason").and_then(Value::as_str).map(str::to_string),
            }
        } else {
            WriteReply::NoBuffer
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn confirm_goes_on_only_on_true() {
        assert!(ConfirmReply::from_reply(json!(true)).go_on);
        for no in [
            json!(false),
            json!("true"),
            json!(1),
            Value::Null,
            json!({ "ok": true }),
        ] {
            assert!(!ConfirmReply::from_reply(no.clone()).go_on, "{no}");
        }
    }

    #[test]
    fn ask_takes_only_a_string() {
        assert_eq!(AskReply::from_reply(json!("yes")), AskReply(Some("yes".into())));
        for none in [Value::Null, json!(3), json!(["yes"]), json!({ "answer": "yes" })] {
            assert_eq!(AskReply::from_reply(none), AskReply(None));
        }
    }

    #[test]
    fn a_read_with_a_bad_field_keeps_the_safe_default() {
        let r = ReadReply::from_reply(json!({
            "content": "x",
            "_meta": { "mia": { "modified": "no", "fileformat": 3, "bomb": "yes", "fileencoding": false } },
        }));
        let b = r.0.unwrap();
        assert_eq!(b.content, "x");
        assert!(
            b.modified,
            "a modified flag that is not a boolean: assume unsaved changes"
        );
        assert_eq!(
            (b.fileformat.as_str(), b.bomb, b.encoding.as_str()),
            ("unix", false, "")
        );
        let r = ReadReply::from_reply(json!({
            "content": "y",
            "_meta": { "mia": { "modified": false, "fileformat": "dos", "bomb": true, "fileencoding": "latin1" } },
        }));
        assert_eq!(
            r.0.unwrap(),
            BufferRead {
                content: "y".into(),
                modified: false,
                fileformat: "dos".into(),
                bomb: true,
                encoding: "latin1".into()
            }
        );
        for none in [
            Value::Null,
            json!({ "content": 3 }),
            json!({}),
            json!("text"),
            json!({ "_error": "e" }),
        ] {
            assert_eq!(ReadReply::from_reply(none), ReadReply(None));
        }
    }

    #[test]
    fn a_write_is_written_only_when_it_says_so() {
        assert_eq!(WriteReply::from_reply(json!({ "written": true })), WriteReply::Written);
        assert_eq!(
            WriteReply::from_reply(json!({ "rejected": true, "reason": "no" })),
            WriteReply::Rejected {
                reason: Some("no".into())
            }
        );
        assert_eq!(
            WriteReply::from_reply(json!({ "rejected": true, "reason": 3 })),
            WriteReply::Rejected { reason: None }
        );
        for none in [
            Value::Null,
            json!({ "written": "yes" }),
            json!(true),
            json!({ "rejected": 1 }),
        ] {
            assert_eq!(WriteReply::from_reply(none), WriteReply::NoBuffer);
        }
    }
}
