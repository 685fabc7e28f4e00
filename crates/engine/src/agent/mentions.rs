//! What a prompt's @-mentions attach: files, folders, text gathered by the
//! editor (a buffer, a selection, diagnostics) and images, turned into the
//! user message's parts.
//!
//! The chat sends `attachments` next to what the user typed; this module
//! reads them (blocking: the caller runs it off the async threads), checks
//! each file against the project root and the deny rules on `read_file` in
//! every spelling (the same check the tools use), and bounds what is sent.
//!
//! A file mentioned again in the same session is sent as a unified diff
//! against what the model last saw of it, or as a short note when it is
//! unchanged. What the model saw is kept in the user message's
//! `meta.mentions[].seen`, so it is derived from the stored messages and
//! survives a resume; a compaction drops it with the messages it covers.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::tools::paths::canonicalize;
use crate::tools::permissions::{Action, Checked, PermissionConfig};
use crate::tools::{OutsidePolicy, ToolEffect};
use mia_llm::message::Part;

/// At most this many attachments per prompt: they are picked by hand, so
/// more is a mistake, and each one costs a file read and a chat line.
pub const MAX_ATTACHMENTS: usize = 32;
/// A text file or text attachment is cut after this many bytes (about 64k
/// tokens): one mention should not fill a model's context window.
pub const MAX_TEXT_BYTES: usize = 256 * 1024;
/// All of a prompt's text attachments together: about 256k tokens, past
/// every common context window, so the request would fail anyway.
pub const MAX_TOTAL_BYTES: usize = 1024 * 1024;
/// An image larger than this is refused: 5 MB is the per-image limit of
/// Anthropic's API, the strictest of the providers mia speaks.
pub const MAX_IMAGE_BYTES: usize = 5 * 1024 * 1024;
/// A folder mention lists at most this many entries, at most this deep:
/// enough to show a folder's shape without sending a whole tree.
pub const MAX_FOLDER_ENTRIES: usize = 500;
const MAX_FOLDER_DEPTH: usize = 3;

/// One attachment as the chat sends it (`attachments = { … }` of a prompt).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Attachment {
    /// A project file: text, or an image by its magic bytes (png, jpeg, gif, webp).
    File { path: String },
    /// A project directory: a bounded listing of what it holds.
    Folder { path: String },
    /// Text the editor gathered (unsaved buffer, selection, diagnostics).
    Text { uri: String, name: String, text: String },
    /// Base64 image data (e.g. from the clipboard).
    Image {
        media_type: String,
        data: String,
        #[serde(default)]
        name: Option<String>,
    },
}

/// Why an attachment is not sent. Each message names the mention, the
/// cause and what to do; nothing of the prompt is sent when one fails.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MentionError {
    #[error("mia: @{0} cannot be attached: {1}. Nothing was sent.")]
    Unreadable(String, String),
    #[error("mia: @{0} is not sent: reading it is {1}. Nothing was sent; remove the mention or change the rule.")]
    Denied(String, String),
    #[error("mia: @{0} is outside the project root {1}; only project files can be mentioned. Nothing was sent.")]
    Outside(String, String),
    #[error("mia: @{0} holds a configured API key, so it is not sent. Nothing was sent.")]
    Secret(String),
    #[error("mia: @{name} is {size} bytes; images up to {max} bytes can be sent. Nothing was sent.")]
    ImageTooLarge { name: String, size: usize, max: usize },
    #[error("mia: a message can carry at most {0} attachments. Nothing was sent; mention fewer.")]
    TooMany(usize),
    #[error("mia: the attachments add up to more than {0} bytes. Nothing was sent; mention fewer or smaller files.")]
    TooLarge(usize),
    #[error("mia: {model} does not take images, and this message carries {name}. Nothing was sent; remove the image or pick a model that takes images (:Mia model).")]
    NoImages { model: String, name: String },
}

/// What one file looked like to the model, and at which user turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    pub text: String,
    pub turn: usize,
}

/// What the checks need: where the project is, the rules in force.
pub struct Context<'a> {
    pub root: &'a Path,
    pub permissions: &'a PermissionConfig,
    pub mode: &'a str,
    pub secrets: &'a [String],
    /// What the model has seen of each file (relative path), from earlier turns.
    pub seen: &'a HashMap<String, Seen>,
    /// This prompt's user turn number (1 for the first).
    pub turn: usize,
}

/// The resolved attachments: the parts to add after the typed text, and
/// one record each for `meta.mentions` (what the chat shows and replays).
#[derive(Debug, Default)]
pub struct Resolved {
    pub parts: Vec<Part>,
    pub records: Vec<Value>,
}

impl Resolved {
    /// True when a part is an image (the model must take images).
    pub fn image_names(&self) -> Vec<String> {
        self.records
            .iter()
            .filter(|r| r["kind"] == "image")
            .filter_map(|r| r["label"].as_str().map(str::to_string))
            .collect()
    }
}

/// Reads every attachment. Blocking (file reads): run it off the async threads.
pub fn resolve(attachments: &[Attachment], cx: &Context) -> Result<Resolved, MentionError> {
    if attachments.len() > MAX_ATTACHMENTS {
        return Err(MentionError::TooMany(MAX_ATTACHMENTS));
    }
    let mut out = Resolved::default();
    let mut total = 0usize;
    for a in attachments {
        let (part, record) = match a {
            Attachment::File { path } => file(path, cx)?,
            Attachment::Folder { path } => folder(path, cx)?,
            Attachment::Text { uri, name, text } => {
                if holds_secret(cx, text.as_bytes()) {
                    return Err(MentionError::Secret(name.clone()));
                }
                text_part(uri, name, text)
            }
            Attachment::Image { media_type, data, name } => {
                let name = name.clone().unwrap_or_else(|| "image".to_string());
                let known = ["image/png", "image/jpeg", "image/gif", "image/webp"].contains(&media_type.as_str());
                let base64 = !data.is_empty()
                    && data
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'=');
                if !known || !base64 {
                    return Err(MentionError::Unreadable(
                        name,
                        "an image must be base64 data of type image/png, image/jpeg, image/gif or image/webp"
                            .to_string(),
                    ));
                }
                let padding = data.bytes().rev().take_while(|&b| b == b'=').count();
                let size = (data.len() / 4 * 3).saturating_sub(padding);
                if size > MAX_IMAGE_BYTES {
                    return Err(MentionError::ImageTooLarge {
                        name,
                        size,
                        max: MAX_IMAGE_BYTES,
                    });
                }
                let record = json!({ "kind": "image", "label": name, "uri": format!("mia:{name}"),
                    "summary": format!("{media_type}, {}", human_size(size)), "mime": media_type });
                (
                    Part::Image {
                        media_type: media_type.clone(),
                        data: data.clone(),
                    },
                    record,
                )
            }
        };
        if let Part::Text { text } = &part {
            total += text.len();
            if total > MAX_TOTAL_BYTES {
                return Err(MentionError::TooLarge(MAX_TOTAL_BYTES));
            }
        }
        out.parts.push(part);
        out.records.push(record);
    }
    Ok(out)
}

/// The checked physical path of a mentioned project path and its path relative to the root.
fn checked(path: &str, cx: &Context) -> Result<(std::path::PathBuf, String), MentionError> {
    let canonical =
        canonicalize(cx.root, path).map_err(|e| MentionError::Unreadable(path.to_string(), e.to_string()))?;
    let decision = cx.permissions.decide(
        cx.mode,
        "read_file",
        ToolEffect::Read,
        &Checked::Path(canonical.clone()),
        &[],
        OutsidePolicy::Refuse,
    );
    if !canonical.inside {
        return Err(MentionError::Outside(path.to_string(), cx.root.display().to_string()));
    }
    if decision.action == Action::Deny {
        return Err(MentionError::Denied(path.to_string(), decision.because));
    }
    Ok((canonical.physical, canonical.subject))
}

fn holds_secret(cx: &Context, bytes: &[u8]) -> bool {
    cx.secrets
        .iter()
        .any(|s| !s.is_empty() && memchr::memmem::find(bytes, s.as_bytes()).is_some())
}

/// An image's media type by its magic bytes.
pub fn image_type(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(b"\xff\xd8\xff") {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

fn file(path: &str, cx: &Context) -> Result<(Part, Value), MentionError> {
    let (physical, rel) = checked(path, cx)?;
    let unreadable = |e: std::io::Error| MentionError::Unreadable(path.to_string(), e.to_string());
    let meta = std::fs::metadata(&physical).map_err(unreadable)?;
    if meta.is_dir() {
        return folder(path, cx);
    }
    if !meta.is_file() {
        return Err(not_a_file(path));
    }
    // Opened without blocking and checked again on the open file: a FIFO
    // put here after the check above would otherwise wait for a writer.
    let (f, size) = crate::tools::paths::open_regular(&physical).map_err(|e| {
        if e.kind() == std::io::ErrorKind::Other {
            not_a_file(path)
        } else {
            unreadable(e)
        }
    })?;
    let size = size as usize;
    let mut bytes = Vec::new();
    f.take((MAX_IMAGE_BYTES.max(MAX_TEXT_BYTES) + 1) as u64)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    let uri = format!("file://{}", physical.display());
    if let Some(media_type) = image_type(&bytes) {
        if size > MAX_IMAGE_BYTES {
            return Err(MentionError::ImageTooLarge {
                name: rel,
                size,
                max: MAX_IMAGE_BYTES,
            });
        }
        use base64_lite::encode;
        let record = json!({ "kind": "image", "label": rel, "path": rel, "uri": uri,
            "summary": format!("{media_type}, {}", human_size(size)), "mime": media_type });
        return Ok((
            Part::Image {
                media_type: media_type.to_string(),
                data: encode(&bytes),
            },
            record,
        ));
    }
    if holds_secret(cx, &bytes) {
        return Err(MentionError::Secret(path.to_string()));
    }
    if bytes.contains(&0) {
        return Err(MentionError::Unreadable(
            path.to_string(),
            "it is a binary file (only text files and png, jpeg, gif or webp images can be mentioned)".to_string(),
        ));
    }
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    let mut note = String::new();
    if text.len() > MAX_TEXT_BYTES {
        crate::mcp::cut(&mut text, MAX_TEXT_BYTES);
        note = format!("\n[mia: cut here: {MAX_TEXT_BYTES} of its {size} bytes are sent]");
    }
    let lines = text.lines().count();
    // An unchanged file keeps the turn it was last shown at (a later diff names that turn).
    let mut shown_at = cx.turn;
    let (body, how) = match cx.seen.get(&rel) {
        Some(seen) if seen.text == text => (
            format!(
                "<file path=\"{rel}\" unchanged_since_turn=\"{}\">(unchanged since turn {}: its content is above)</file>",
                seen.turn, seen.turn
            ),
            {
                shown_at = seen.turn;
                format!("unchanged since turn {}", seen.turn)
            },
        ),
        Some(seen) => match diff(&rel, &seen.text, &text) {
            Some(d) => (
                format!("<file path=\"{rel}\" changed_since_turn=\"{}\" format=\"unified diff\">\n{d}</file>", seen.turn),
                format!("diff since turn {}", seen.turn),
            ),
            None => (whole(&rel, lines, &text, &note), format!("{lines} lines")),
        },
        None => (whole(&rel, lines, &text, &note), format!("{lines} lines")),
    };
    let record = json!({ "kind": "file", "label": rel, "path": rel, "uri": uri, "summary": how,
        "lines": lines, "seen": text, "turn": shown_at });
    Ok((Part::Text { text: body }, record))
}

/// A mention of something that is not a file or a folder (a pipe, a device,
/// a socket): reading it could wait forever or never end.
fn not_a_file(path: &str) -> MentionError {
    MentionError::Unreadable(
        path.to_string(),
        "it is not a regular file (a pipe, device or socket); only files and folders can be mentioned".to_string(),
    )
}

fn whole(rel: &str, lines: usize, text: &str, note: &str) -> String {
    let nl = if text.ends_with('\n') || text.is_empty() {
        ""
    } else {
        "\n"
    };
    format!("<file path=\"{rel}\" lines=\"{lines}\">\n{text}{nl}{note}</file>")
}

/// A unified diff from `old` to `new`, or `None` when it would be larger than `new` itself.
pub fn diff(rel: &str, old: &str, new: &str) -> Option<String> {
    let d = similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{rel}"), &format!("b/{rel}"))
        .to_string();
    (d.len() < new.len()).then_some(d)
}

fn folder(path: &str, cx: &Context) -> Result<(Part, Value), MentionError> {
    let (physical, rel) = checked(path, cx)?;
    if !physical.is_dir() {
        return Err(MentionError::Unreadable(
            path.to_string(),
            "it is not a directory".to_string(),
        ));
    }
    let hidden = cx.permissions.hidden_paths(cx.mode, "list_dir");
    let root = cx.root.canonicalize().unwrap_or_else(|_| cx.root.to_path_buf());
    let mut entries = Vec::new();
    let mut cut = false;
    let walk = ignore::WalkBuilder::new(&physical)
        .max_depth(Some(MAX_FOLDER_DEPTH))
        .sort_by_file_path(|a, b| a.cmp(b))
        .build();
    for entry in walk.flatten() {
        if entry.depth() == 0 {
            continue;
        }
        let p = entry.path();
        let shown = p.strip_prefix(&root).unwrap_or(p).to_string_lossy().into_owned();
        if hidden(&shown) {
            continue;
        }
        if entries.len() >= MAX_FOLDER_ENTRIES {
            cut = true;
            break;
        }
        let dir = entry.file_type().is_some_and(|t| t.is_dir());
        entries.push(if dir { format!("{shown}/") } else { shown });
    }
    let n = entries.len();
    let mut body = format!("<folder path=\"{rel}\" entries=\"{n}\">\n{}\n", entries.join("\n"));
    if cut {
        body.push_str(&format!("[mia: listing cut at {MAX_FOLDER_ENTRIES} entries]\n"));
    }
    body.push_str("</folder>");
    let record = json!({ "kind": "folder", "label": format!("{rel}/"), "path": rel,
        "uri": format!("file://{}", physical.display()), "summary": format!("{n} entries") });
    Ok((Part::Text { text: body }, record))
}

fn text_part(uri: &str, name: &str, text: &str) -> (Part, Value) {
    let mut text = text.to_string();
    let mut note = String::new();
    if text.len() > MAX_TEXT_BYTES {
        let size = text.len();
        crate::mcp::cut(&mut text, MAX_TEXT_BYTES);
        note = format!("\n[mia: cut here: {MAX_TEXT_BYTES} of its {size} bytes are sent]");
    }
    let lines = text.lines().count();
    let nl = if text.ends_with('\n') || text.is_empty() {
        ""
    } else {
        "\n"
    };
    let body = format!("<context name=\"{name}\" uri=\"{uri}\" lines=\"{lines}\">\n{text}{nl}{note}</context>");
    let record = json!({ "kind": "text", "label": name, "uri": uri, "summary": format!("{lines} lines") });
    (Part::Text { text: body }, record)
}

fn human_size(bytes: usize) -> String {
    if bytes >= 1024 * 1024 {
        format!("{:.1} MB", bytes as f64 / (1024.0 * 1024.0))
    } else if bytes >= 1024 {
        format!("{} KB", bytes / 1024)
    } else {
        format!("{bytes} bytes")
    }
}

/// What the model has seen of each mentioned file, from the user messages
/// a request sends (`meta.mentions[].seen`), and how many user turns they hold.
pub fn seen_in(rows: &[&mia_store::MessageRow], all_user_turns: usize) -> HashMap<String, Seen> {
    let mut seen = HashMap::new();
    for row in rows {
        let Some(list) = row.meta.get("mentions").and_then(Value::as_array) else {
            continue;
        };
        for m in list {
            if let (Some(path), Some(text)) = (m["path"].as_str(), m["seen"].as_str()) {
                let turn = m["turn"].as_u64().map(|t| t as usize).unwrap_or(all_user_turns);
                seen.insert(
                    path.to_string(),
                    Seen {
                        text: text.to_string(),
                        turn,
                    },
                );
            }
        }
    }
    seen
}

/// Minimal standard base64 (RFC 4648, with padding) for image files.
mod base64_lite {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    pub fn encode(bytes: &[u8]) -> String {
        let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
        for chunk in bytes.chunks(3) {
            let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cx<'a>(root: &'a Path, perms: &'a PermissionConfig, seen: &'a HashMap<String, Seen>) -> Context<'a> {
        Context {
            root,
            permissions: perms,
            mode: "code",
            secrets: &[],
            seen,
            turn: 2,
        }
    }

    #[test]
    fn base64_matches_the_standard_alphabet() {
        assert_eq!(base64_lite::encode(b""), "");
        assert_eq!(base64_lite::encode(b"f"), "Zg==");
        assert_eq!(base64_lite::encode(b"fo"), "Zm8=");
        assert_eq!(base64_lite::encode(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn a_mentioned_file_is_sent_whole_then_as_a_diff_then_as_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let text: String = (1..=50).map(|i| format!("line {i}\n")).collect();
        std::fs::write(dir.path().join("a.txt"), &text).unwrap();
        let perms = PermissionConfig::default();
        let none = HashMap::new();
        let r = resolve(
            &[Attachment::File { path: "a.txt".into() }],
            &cx(dir.path(), &perms, &none),
        )
        .unwrap();
        let Part::Text { text: body } = &r.parts[0] else {
            panic!()
        };
        assert!(body.contains("line 50\n") && body.starts_with("<file path=\"a.txt\" lines=\"50\">"));
        let mut seen = HashMap::new();
        seen.insert(
            "a.txt".to_string(),
            Seen {
                text: text.clone(),
                turn: 1,
            },
        );
        let r = resolve(
            &[Attachment::File { path: "a.txt".into() }],
            &cx(dir.path(), &perms, &seen),
        )
        .unwrap();
        assert_eq!(r.records[0]["summary"], "unchanged since turn 1");
        std::fs::write(
            dir.path().join("a.txt"),
            text.replace("line 25\n", "line twenty-five\n"),
        )
        .unwrap();
        let r = resolve(
            &[Attachment::File { path: "a.txt".into() }],
            &cx(dir.path(), &perms, &seen),
        )
        .unwrap();
        let Part::Text { text: body } = &r.parts[0] else {
            panic!()
        };
        assert!(
            body.contains("@@") && body.contains("+line twenty-five") && !body.contains("line 1\n"),
            "{body}"
        );
    }

    #[test]
    fn a_denied_file_is_refused_in_every_spelling() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".env"), "KEY=1\n").unwrap();
        std::fs::create_dir(dir.path().join("a")).unwrap();
        std::os::unix::fs::symlink(dir.path().join(".env"), dir.path().join("link")).unwrap();
        let perms: PermissionConfig = serde_json::from_value(json!({
            "rules": [{ "tool": "read_file", "pattern": ".env", "action": "deny" }]
        }))
        .unwrap();
        let none = HashMap::new();
        let abs = dir.path().join(".env").display().to_string();
        for spelling in ["./.env", "a/../.env", abs.as_str(), "link", ".env"] {
            let err = resolve(
                &[Attachment::File { path: spelling.into() }],
                &cx(dir.path(), &perms, &none),
            )
            .unwrap_err();
            assert!(matches!(err, MentionError::Denied(..)), "{spelling}: {err}");
        }
        let err = resolve(
            &[Attachment::File {
                path: "/etc/hostname".into(),
            }],
            &cx(dir.path(), &perms, &none),
        )
        .unwrap_err();
        assert!(matches!(err, MentionError::Outside(..)), "{err}");
    }

    #[test]
    fn an_image_file_becomes_an_image_part() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("i.png"), b"\x89PNG\r\n\x1a\nrest").unwrap();
        let perms = PermissionConfig::default();
        let none = HashMap::new();
        let r = resolve(
            &[Attachment::File { path: "i.png".into() }],
            &cx(dir.path(), &perms, &none),
        )
        .unwrap();
        assert!(matches!(&r.parts[0], Part::Image { media_type, .. } if media_type == "image/png"));
        assert_eq!(r.image_names(), vec!["i.png".to_string()]);
    }

    #[test]
    fn editor_text_with_a_key_and_an_image_that_is_not_base64_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let perms = PermissionConfig::default();
        let none = HashMap::new();
        let secrets = vec!["sk-secret-123".to_string()];
        let mut c = cx(dir.path(), &perms, &none);
        c.secrets = &secrets;
        let text = Attachment::Text {
            uri: "mia://buffer/1".into(),
            name: "notes".into(),
            text: "key = sk-secret-123".into(),
        };
        assert!(matches!(resolve(&[text], &c), Err(MentionError::Secret(_))));
        let image = Attachment::Image {
            media_type: "image/png".into(),
            data: "not base64!".into(),
            name: None,
        };
        assert!(matches!(resolve(&[image], &c), Err(MentionError::Unreadable(..))));
        let many = vec![Attachment::Folder { path: ".".into() }; MAX_ATTACHMENTS + 1];
        assert!(matches!(resolve(&many, &c), Err(MentionError::TooMany(_))));
    }

    #[test]
    fn a_pipe_or_a_socket_is_refused_without_waiting_for_a_writer() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let _socket = std::os::unix::net::UnixListener::bind(dir.path().join("sock")).unwrap();
        let perms = PermissionConfig::default();
        let none = HashMap::new();
        // No writer ever opens the FIFO: a blocking open would hang here.
        for name in ["fifo", "sock"] {
            let err = resolve(
                &[Attachment::File { path: name.into() }],
                &cx(dir.path(), &perms, &none),
            )
            .unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "mia: @{name} cannot be attached: it is not a regular file (a pipe, device or socket); only \
                     files and folders can be mentioned. Nothing was sent."
                )
            );
        }
    }

    #[test]
    fn a_diff_larger_than_the_file_is_not_used() {
        assert!(diff("a", "x\n", "y\n").is_none());
    }
}
