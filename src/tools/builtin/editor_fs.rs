//! ACP's client-side file methods, answered by Neovim: a file open in a
//! buffer is read and written through the buffer, so the model sees the
//! text the user sees (unsaved changes included) and its edits land in the
//! buffer (saved, so buffer and disk agree) instead of behind the user's back.
//! Only agent runs ask ([`crate::calls::LuaBridge::editor_fs`]); a file no
//! buffer holds is read and written on disk as before.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::tools::ToolContext;

/// How long a file operation waits for Neovim's answer.
const EDITOR_WAIT: Duration = Duration::from_secs(5);

/// `fs/read_text_file`: the text of the buffer holding `path`: with
/// `loaded_too`, any loaded buffer; otherwise only one with unsaved changes.
/// `None`: no such buffer (read the disk).
pub(super) async fn read_text(ctx: &ToolContext, path: &Path, loaded_too: bool) -> Option<String> {
    if !ctx.lua.editor_fs {
        return None;
    }
    let payload = json!({
        "sessionId": ctx.session_id,
        "path": path.display().to_string(),
        "_meta": { "mia": { "loaded": loaded_too } },
    });
    match ctx
        .lua
        .call(ctx.stream, "fs/read_text_file", payload, EDITOR_WAIT, &ctx.abort)
        .await
    {
        Ok(Ok(Value::Object(m))) => match m.get("content") {
            Some(Value::String(text)) => Some(text.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// How long a landing write may wait: the buffer may ask the user first.
const LANDING_WAIT: Duration = Duration::from_secs(3600);

/// `fs/write_text_file` for a landing ([`crate::tools::landing`]): `base` is
/// the text the proposal was computed from and `reviewed` whether the user
/// saw the diff. Neovim asks before replacing unsaved changes nobody
/// reviewed (or text that changed since the proposal), and answers
/// `{ written, rejected, reason }`.
pub(crate) async fn write_through_editor(
    ctx: &ToolContext,
    path: &Path,
    content: &str,
    base: Option<&str>,
    reviewed: bool,
    name: &str,
) -> Result<crate::tools::landing::EditorWrite, String> {
    use crate::tools::landing::EditorWrite;
    if !ctx.lua.editor_fs {
        return Ok(EditorWrite::NoBuffer);
    }
    let payload = json!({
        "sessionId": ctx.session_id,
        "path": path.display().to_string(),
        "content": content,
        "_meta": { "mia": { "base": base, "reviewed": reviewed, "name": name } },
    });
    match ctx
        .lua
        .call(ctx.stream, "fs/write_text_file", payload, LANDING_WAIT, &ctx.abort)
        .await
    {
        Ok(Ok(Value::Object(m))) => {
            if m.get("written").and_then(Value::as_bool).unwrap_or(false) {
                Ok(EditorWrite::Written)
            } else if m.get("rejected").and_then(Value::as_bool).unwrap_or(false) {
                let reason = m
                    .get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or("the user kept their unsaved changes in the editor");
                Ok(EditorWrite::Rejected(reason.chars().take(2_000).collect()))
            } else {
                Ok(EditorWrite::NoBuffer)
            }
        }
        Ok(Ok(_)) => Ok(EditorWrite::NoBuffer),
        Ok(Err(message)) => Err(message),
        Err(e) => Err(e.to_string()),
    }
}
