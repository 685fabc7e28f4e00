//! `:Mia edit`: one request that rewrites a range of lines of a buffer.
//!
//! The editor sends what it knows (the instruction, the selected lines,
//! some lines around them, the diagnostics in the range, the `@`-mentions'
//! attachments); this module makes the request the model gets, with the
//! project's rules files in its system prompt, and refuses before anything
//! is sent when a deny rule covers the file or the text holds a configured
//! API key. Blocking (file reads): run [`prepare`] off the async threads.

use std::collections::HashMap;
use std::path::PathBuf;

use serde::Deserialize;

use crate::agent::mentions::{self, Attachment, MentionError};
use crate::agent::rules;
use crate::agent::AgentSettings;
use crate::tools::paths::canonicalize;
use mia_llm::message::{ChatRequest, Message, Part, Role};

/// Most lines of context on each side of the selection that reach the
/// model (the editor sends at most these; more is cut here too).
pub const MAX_CONTEXT_LINES: usize = 50;
/// Most bytes of context on each side (long lines count).
pub const MAX_CONTEXT_BYTES: usize = 8 * 1024;
/// Largest selection an edit takes: the answer is as long again, and the
/// pending hunks show all of it.
pub const MAX_SELECTION_BYTES: usize = 256 * 1024;
/// Most diagnostics sent (those inside the range, first first).
pub const MAX_DIAGNOSTICS: usize = 50;

/// Tools whose deny rules keep a file out of `:Mia edit`: its text is read
/// (sent to the model) and written (if the user accepts).
const GUARDED_TOOLS: [&str; 3] = ["read_file", "edit_file", "write_file"];

/// What the model is told, before the project's rules.
pub const EDIT_SYSTEM: &str = "You rewrite part of a file as the user asks. \
The user message gives the instruction, the file's path and type, the selected lines \
(between <selection> and </selection>) and some lines around them for context. \
Answer with the replacement for the selected lines only: complete lines, in the file's \
indentation, style and language, and nothing else — no explanation, no Markdown code \
fence, not the lines around the selection. If the instruction cannot be carried out, \
answer with nothing.";

/// One edit as the editor sends it (`edit_stream(spec, opts)`).
#[derive(Debug, Clone, Deserialize)]
pub struct EditSpec {
    pub instruction: String,
    /// `"provider/model"`.
    pub model: String,
    /// The project root (the editor's working directory).
    pub cwd: PathBuf,
    /// The buffer's file; none for a buffer without a name.
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub filetype: String,
    /// 1-based number of the first selected line.
    pub first_line: u64,
    /// Buffer lines are bytes: one that is not UTF-8 comes as
    /// [`Line::Bytes`] (refused in the selection, sent lossily around it).
    pub selection: Vec<Line>,
    #[serde(default)]
    pub before: Vec<Line>,
    #[serde(default)]
    pub after: Vec<Line>,
    /// The diagnostics inside the range, one line each.
    #[serde(default)]
    pub diagnostics: Vec<Line>,
    /// Text the editor's mentions resolved (an MCP resource).
    #[serde(default)]
    pub mentioned: Option<String>,
    #[serde(default)]
    pub attachments: Vec<Attachment>,
    /// The chat's mode, for the rules that name one.
    #[serde(default)]
    pub mode: String,
    #[serde(default)]
    pub max_tokens: Option<u32>,
}

/// One line of a buffer: text, or bytes that are not UTF-8.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    Text(String),
    Bytes(Vec<u8>),
}

impl Line {
    /// The line as text, invalid bytes as U+FFFD.
    fn lossy(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Line::Text(t) => std::borrow::Cow::Borrowed(t),
            Line::Bytes(b) => String::from_utf8_lossy(b),
        }
    }
}

impl From<&str> for Line {
    fn from(s: &str) -> Self {
        Line::Text(s.to_string())
    }
}

impl<'de> Deserialize<'de> for Line {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Line;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a line of text")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Line, E> {
                Ok(Line::Text(v.to_string()))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Line, E> {
                Ok(Line::Text(v))
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Line, E> {
                Ok(match std::str::from_utf8(v) {
                    Ok(t) => Line::Text(t.to_string()),
                    Err(_) => Line::Bytes(v.to_vec()),
                })
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Line, E> {
                Ok(match String::from_utf8(v) {
                    Ok(t) => Line::Text(t),
                    Err(e) => Line::Bytes(e.into_bytes()),
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// Why an edit is not sent. Each names the cause and what to do.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EditError {
    #[error("mia: {path} is not edited: {because}. Nothing was sent; change the rule to edit it.")]
    Denied { path: String, because: String },
    #[error("mia: {path} cannot be checked against the permission rules ({why}). Nothing was sent.")]
    Unchecked { path: String, why: String },
    #[error("mia: the text to edit holds a configured API key, so it is not sent. Nothing was sent.")]
    Secret,
    #[error(
        "mia: the selection is {0} bytes; :Mia edit takes up to {MAX_SELECTION_BYTES}. Nothing was sent; select less."
    )]
    TooLarge(usize),
    #[error("mia: line {0} is not UTF-8 text, and :Mia edit sends text only. Nothing was sent; convert the file (e.g. :set fileencoding=utf-8) or select other lines.")]
    NotText(u64),
    #[error("mia: :Mia edit needs an instruction. Nothing was sent.")]
    NoInstruction,
    #[error(transparent)]
    Mention(#[from] MentionError),
}

/// The request for `spec`, or why it is refused. Blocking.
pub fn prepare(spec: &EditSpec, settings: &AgentSettings, secrets: &[String]) -> Result<ChatRequest, EditError> {
    if spec.instruction.trim().is_empty() {
        return Err(EditError::NoInstruction);
    }
    let mut selection = Vec::with_capacity(spec.selection.len());
    for (i, l) in spec.selection.iter().enumerate() {
        match l {
            Line::Text(t) => selection.push(t.clone()),
            Line::Bytes(_) => return Err(EditError::NotText(spec.first_line + i as u64)),
        }
    }
    let size: usize = selection.iter().map(|l| l.len() + 1).sum();
    if size > MAX_SELECTION_BYTES {
        return Err(EditError::TooLarge(size));
    }
    let root = std::fs::canonicalize(&spec.cwd).unwrap_or_else(|_| spec.cwd.clone());
    let path = spec.path.as_deref().filter(|p| !p.is_empty());
    if let Some(path) = path {
        let canonical = canonicalize(&root, path).map_err(|e| EditError::Unchecked {
            path: path.to_string(),
            why: e.to_string(),
        })?;
        for tool in GUARDED_TOOLS {
            if let Some(because) = settings.permissions.denying_rule(&spec.mode, tool, &canonical) {
                return Err(EditError::Denied {
                    path: canonical.subject.clone(),
                    because,
                });
            }
        }
    }
    let lossy = |lines: &[Line]| lines.iter().map(|l| l.lossy().into_owned()).collect::<Vec<_>>();
    let (before, after, diagnostics) = (lossy(&spec.before), lossy(&spec.after), lossy(&spec.diagnostics));
    let before = tail(&before);
    let after = head(&after);
    let holds_secret = |text: &str| secrets.iter().any(|s| !s.is_empty() && text.contains(s.as_str()));
    if [&spec.instruction]
        .into_iter()
        .chain(selection.iter())
        .chain(before.iter())
        .chain(after.iter())
        .chain(diagnostics.iter())
        .any(|t| holds_secret(t))
    {
        return Err(EditError::Secret);
    }
    let resolved = if spec.attachments.is_empty() {
        mentions::Resolved::default()
    } else {
        let seen = HashMap::new();
        let cx = mentions::Context {
            root: &root,
            permissions: &settings.permissions,
            mode: &spec.mode,
            secrets,
            seen: &seen,
            turn: 1,
        };
        mentions::resolve(&spec.attachments, &cx)?
    };
    let hidden = settings.permissions.hidden_paths(&spec.mode, "read_file");
    let focus = path.map(|p| root.join(p));
    let rules = rules::load(
        &root,
        focus.as_deref(),
        &settings.rules,
        &rules::Guard {
            hidden: hidden.as_ref(),
            secrets,
        },
    );
    let mut system = EDIT_SYSTEM.to_string();
    if !rules.text.is_empty() {
        system.push_str("\n\n");
        system.push_str(&rules.text);
    }
    let mut parts = vec![Part::Text {
        text: user_text(spec, path, &selection, before, after, &diagnostics),
    }];
    parts.extend(resolved.parts);
    Ok(ChatRequest {
        model: spec.model.clone(),
        system: Some(system),
        messages: vec![Message {
            role: Role::User,
            parts,
        }],
        tools: Vec::new(),
        max_tokens: spec.max_tokens,
        temperature: None,
        extra_body: None,
        stop_sequences: Vec::new(),
        response_format: None,
    })
}

/// The last lines of `lines` within the bounds.
fn tail(lines: &[String]) -> &[String] {
    let mut n = 0;
    let mut bytes = 0;
    for l in lines.iter().rev().take(MAX_CONTEXT_LINES) {
        bytes += l.len() + 1;
        if bytes > MAX_CONTEXT_BYTES {
            break;
        }
        n += 1;
    }
    &lines[lines.len() - n..]
}

/// The first lines of `lines` within the bounds.
fn head(lines: &[String]) -> &[String] {
    let mut n = 0;
    let mut bytes = 0;
    for l in lines.iter().take(MAX_CONTEXT_LINES) {
        bytes += l.len() + 1;
        if bytes > MAX_CONTEXT_BYTES {
            break;
        }
        n += 1;
    }
    &lines[..n]
}

/// The user message: the instruction first, then the file and the lines.
fn user_text(
    spec: &EditSpec,
    path: Option<&str>,
    selection: &[String],
    before: &[String],
    after: &[String],
    diagnostics: &[String],
) -> String {
    let mut t = String::new();
    t.push_str(spec.instruction.trim());
    t.push_str("\n\n");
    let last = spec.first_line + (selection.len() as u64).saturating_sub(1);
    let name = path.unwrap_or("(a buffer without a file)");
    let ft = if spec.filetype.is_empty() {
        String::new()
    } else {
        format!(" ({})", spec.filetype)
    };
    t.push_str(&format!(
        "File: {name}{ft}. Rewrite lines {}-{last}, shown between <selection> and </selection>.\n",
        spec.first_line
    ));
    let block = |t: &mut String, tag: &str, lines: &[String]| {
        t.push_str(&format!("<{tag}>\n"));
        for l in lines {
            t.push_str(l);
            t.push('\n');
        }
        t.push_str(&format!("</{tag}>\n"));
    };
    if !before.is_empty() {
        block(&mut t, "before", before);
    }
    block(&mut t, "selection", selection);
    if !after.is_empty() {
        block(&mut t, "after", after);
    }
    if !diagnostics.is_empty() {
        t.push_str("Diagnostics in the selection:\n");
        for d in diagnostics.iter().take(MAX_DIAGNOSTICS) {
            t.push_str("- ");
            t.push_str(d);
            t.push('\n');
        }
    }
    if let Some(m) = spec.mentioned.as_deref().filter(|m| !m.is_empty()) {
        t.push('\n');
        t.push_str(m);
        t.push('\n');
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(root: &std::path::Path) -> EditSpec {
        EditSpec {
            instruction: "rename x to y".into(),
            model: "p/m".into(),
            cwd: root.to_path_buf(),
            path: Some("src/a.rs".into()),
            filetype: "rust".into(),
            first_line: 3,
            selection: vec!["let x = 1;".into(), "x + 1".into()],
            before: (0..80).map(|i| Line::Text(format!("b{i}"))).collect(),
            after: (0..80).map(|i| Line::Text(format!("a{i}"))).collect(),
            diagnostics: vec!["line 3: unused variable".into()],
            mentioned: None,
            attachments: vec![],
            mode: "code".into(),
            max_tokens: None,
        }
    }

    fn settings(rules: serde_json::Value) -> AgentSettings {
        AgentSettings {
            permissions: serde_json::from_value(serde_json::json!({ "rules": rules })).expect("rules"),
            ..Default::default()
        }
    }

    fn text_of(req: &ChatRequest) -> String {
        match &req.messages[0].parts[0] {
            Part::Text { text } => text.clone(),
            other => panic!("not text: {other:?}"),
        }
    }

    #[test]
    fn the_request_carries_the_instruction_first_the_selection_and_bounded_context() {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::create_dir(dir.path().join("src")).expect("mkdir");
        std::fs::write(dir.path().join("AGENTS.md"), "use tabs\n").expect("write");
        let req = prepare(&spec(dir.path()), &settings(serde_json::json!([])), &[]).expect("prepared");
        let text = text_of(&req);
        assert!(
            text.starts_with("rename x to y\n\nFile: src/a.rs (rust). Rewrite lines 3-4"),
            "{text}"
        );
        assert!(
            text.contains("<selection>\nlet x = 1;\nx + 1\n</selection>\n"),
            "{text}"
        );
        assert!(
            text.contains("\nb79\n") && text.contains("\nb30\n") && !text.contains("\nb29\n"),
            "{text}"
        );
        assert!(
            text.contains("\na0\n") && text.contains("\na49\n") && !text.contains("\na50\n"),
            "{text}"
        );
        assert!(text.contains("- line 3: unused variable"), "{text}");
        let system = req.system.expect("system");
        assert!(
            system.starts_with(EDIT_SYSTEM) && system.contains("use tabs"),
            "{system}"
        );
        assert!(req.tools.is_empty());
    }

    #[test]
    fn a_file_a_deny_rule_covers_is_refused_for_any_of_the_file_tools() {
        let dir = tempfile::tempdir().expect("tmp");
        for tool in ["read_file", "edit_file", "write_file", "*"] {
            let s = settings(serde_json::json!([{ "tool": tool, "pattern": "src/**", "action": "deny" }]));
            let err = prepare(&spec(dir.path()), &s, &[]).expect_err("denied");
            assert!(matches!(err, EditError::Denied { .. }), "{tool}: {err}");
            assert!(err.to_string().contains("src/a.rs"), "{err}");
        }
        let other = settings(serde_json::json!([{ "tool": "*", "pattern": "secret/**", "action": "deny" }]));
        assert!(prepare(&spec(dir.path()), &other, &[]).is_ok());
    }

    #[test]
    fn a_selected_line_that_is_not_utf8_is_refused_and_context_lines_are_sent_lossily() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut s = spec(dir.path());
        s.after[0] = Line::Bytes(b"caf\xe9".to_vec());
        let req = prepare(&s, &settings(serde_json::json!([])), &[]).expect("prepared");
        assert!(text_of(&req).contains("\ncaf\u{fffd}\n"));
        s.selection[1] = Line::Bytes(b"caf\xe9".to_vec());
        let err = prepare(&s, &settings(serde_json::json!([])), &[]).expect_err("not text");
        assert_eq!(err, EditError::NotText(4));
    }

    #[test]
    fn text_holding_a_configured_key_is_not_sent() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut s = spec(dir.path());
        s.before.push("KEY=sk-secret-123".into());
        let err = prepare(&s, &settings(serde_json::json!([])), &["sk-secret-123".into()]).expect_err("secret");
        assert_eq!(err, EditError::Secret);
    }
}
