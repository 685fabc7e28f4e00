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

/// The reply to `session/request_permission`: ACP's
/// `RequestPermissionResponse`, `{ outcome = { outcome = "selected",
/// optionId } }` or `{ outcome = { outcome = "cancelled" } }`, with what a
/// review adds in `_meta.mia`. Anything that is not a selected option with
/// a string id (a cancel, a dismissed picker, a malformed answer) is no
/// choice, which every consumer treats as a refusal.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PermissionReply {
    /// The chosen option's `optionId`.
    pub option: Option<String>,
    /// `_meta.mia.content`: the file as the user edited it in the review.
    pub content: Option<String>,
    /// `_meta.mia.reason`: why the user rejected an edit, cut to
    /// [`MAX_REASON_CHARS`] characters.
    pub reason: Option<String>,
}

/// Most characters of a rejection's reason that reach the model.
pub const MAX_REASON_CHARS: usize = 2_000;

impl Reply for PermissionReply {
    fn from_reply(answer: Value) -> Self {
        let outcome = answer.get("outcome");
        let selected = outcome.and_then(|o| o.get("outcome")).and_then(Value::as_str) == Some("selected");
        let option = outcome
            .and_then(|o| o.get("optionId"))
            .and_then(Value::as_str)
            .filter(|_| selected)
            .map(str::to_string);
        let meta = answer.pointer("/_meta/mia");
        let field = |k: &str| meta.and_then(|m| m.get(k)).and_then(Value::as_str);
        PermissionReply {
            option,
            content: field("content").map(str::to_string),
            reason: field("reason").map(|r| r.chars().take(MAX_REASON_CHARS).collect()),
        }
    }
}

/// The reply to `tool`: what a Lua tool returned, as the editor hands it
/// over (`{ content, is_error?, metadata? }`, or `{ proposal = { content,
/// message? } }` from a tool that edits its subject).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolReply {
    /// `content`: a string as it is, any other value as its JSON text,
    /// missing as "".
    pub content: String,
    /// `is_error`: only `true` is an error.
    pub is_error: bool,
    /// `metadata`, whatever the tool put there (`null` when missing).
    pub metadata: Value,
    /// `proposal.content`, when it is a string: the subject file's new text.
    pub proposal: Option<String>,
    /// `proposal.message`, when it is a string.
    pub proposal_message: Option<String>,
}

impl Reply for ToolReply {
    fn from_reply(answer: Value) -> Self {
        let text = |p: &str| answer.pointer(p).and_then(Value::as_str).map(str::to_string);
        ToolReply {
            content: match answer.get("content") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            },
            is_error: answer.get("is_error").and_then(Value::as_bool).unwrap_or(false),
            metadata: answer.get("metadata").cloned().unwrap_or(Value::Null),
            proposal: text("/proposal/content"),
            proposal_message: text("/proposal/message"),
        }
    }
}

/// The reply to `subject`: what a Lua tool's subject function returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubjectReply {
    /// `nil`: the call has no subject.
    None,
    /// A string, or `{ path = … }`.
    Path(String),
    /// `{ command = … }`.
    Command(String),
    /// `{ text = … }`.
    Text(String),
    /// Anything else, shown (cut to [`MAX_SHOWN_CHARS`] characters) in the
    /// refusal.
    Invalid(String),
}

/// Most characters of an invalid reply shown back in an error.
pub const MAX_SHOWN_CHARS: usize = 200;

impl Reply for SubjectReply {
    fn from_reply(answer: Value) -> Self {
        let one = |key: &str| answer.get(key).and_then(Value::as_str).map(str::to_string);
        match &answer {
            Value::Null => SubjectReply::None,
            Value::String(path) => SubjectReply::Path(path.clone()),
            Value::Object(_) => one("path")
                .map(SubjectReply::Path)
                .or_else(|| one("command").map(SubjectReply::Command))
                .or_else(|| one("text").map(SubjectReply::Text))
                .unwrap_or_else(|| SubjectReply::Invalid(shown(&answer))),
            other => SubjectReply::Invalid(shown(other)),
        }
    }
}

/// `v` as JSON text, cut to [`MAX_SHOWN_CHARS`] characters.
fn shown(v: &Value) -> String {
    let text = v.to_string();
    match text.char_indices().nth(MAX_SHOWN_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
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

    #[test]
    fn a_permission_is_a_choice_only_when_an_option_was_selected() {
        let r = PermissionReply::from_reply(json!({
            "outcome": { "outcome": "selected", "optionId": "allow_once" },
            "_meta": { "mia": { "content": "new text", "reason": "r".repeat(5_000) } },
        }));
        assert_eq!(r.option.as_deref(), Some("allow_once"));
        assert_eq!(r.content.as_deref(), Some("new text"));
        assert_eq!(r.reason.map(|r| r.chars().count()), Some(MAX_REASON_CHARS));
        for none in [
            json!({ "outcome": { "outcome": "cancelled" } }),
            json!({ "outcome": { "outcome": "cancelled", "optionId": "allow_once" } }),
            json!({ "outcome": { "outcome": "selected", "optionId": 3 } }),
            json!({ "outcome": { "outcome": "selected" } }),
            json!({ "outcome": "selected", "optionId": "allow_once" }),
            json!("allow_once"),
            Value::Null,
        ] {
            assert_eq!(PermissionReply::from_reply(none.clone()).option, None, "{none}");
        }
        let r = PermissionReply::from_reply(json!({
            "outcome": { "outcome": "selected", "optionId": "reject_once" },
            "_meta": { "mia": { "content": 3, "reason": ["no"] } },
        }));
        assert_eq!((r.content, r.reason), (None, None));
    }

    #[test]
    fn a_tool_reply_reads_its_fields_as_the_core_always_did() {
        let r = ToolReply::from_reply(json!({ "content": "out", "is_error": true, "metadata": { "n": 1 } }));
        assert_eq!(
            (r.content.as_str(), r.is_error, r.metadata),
            ("out", true, json!({ "n": 1 }))
        );
        let r = ToolReply::from_reply(json!({ "content": { "rows": [1] }, "is_error": "yes" }));
        assert_eq!((r.content.as_str(), r.is_error), (r#"{"rows":[1]}"#, false));
        assert_eq!(r.metadata, Value::Null);
        let r = ToolReply::from_reply(json!({ "proposal": { "content": "new", "message": "Did it." } }));
        assert_eq!(
            (r.proposal.as_deref(), r.proposal_message.as_deref()),
            (Some("new"), Some("Did it."))
        );
        let r = ToolReply::from_reply(json!({ "proposal": { "content": 1, "message": false } }));
        assert_eq!((r.proposal, r.proposal_message), (None, None));
        assert_eq!(ToolReply::from_reply(json!("text")).content, "");
    }

    #[test]
    fn a_subject_is_a_path_a_command_or_a_text_and_anything_else_is_shown_cut() {
        assert_eq!(SubjectReply::from_reply(Value::Null), SubjectReply::None);
        assert_eq!(
            SubjectReply::from_reply(json!("a.txt")),
            SubjectReply::Path("a.txt".into())
        );
        assert_eq!(
            SubjectReply::from_reply(json!({ "path": "b", "command": "c" })),
            SubjectReply::Path("b".into())
        );
        assert_eq!(
            SubjectReply::from_reply(json!({ "command": "make" })),
            SubjectReply::Command("make".into())
        );
        assert_eq!(
            SubjectReply::from_reply(json!({ "text": "t" })),
            SubjectReply::Text("t".into())
        );
        assert_eq!(SubjectReply::from_reply(json!(3)), SubjectReply::Invalid("3".into()));
        assert_eq!(
            SubjectReply::from_reply(json!({ "path": 3 })),
            SubjectReply::Invalid(r#"{"path":3}"#.into())
        );
        let SubjectReply::Invalid(shown) = SubjectReply::from_reply(json!(["é".repeat(1_000)])) else {
            panic!("a list is not a subject");
        };
        assert_eq!(shown.chars().count(), MAX_SHOWN_CHARS + 1);
        assert!(shown.ends_with('…'));
    }
}
