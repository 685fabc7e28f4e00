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

/// `fs/write_text_file`: replaces the text of the buffer holding `path` and
/// saves it. `Ok(false)`: no buffer holds the file (write the disk).
pub(super) async fn write_text(ctx: &ToolContext, path: &Path, content: &str) -> Result<bool, String> {
    if !ctx.lua.editor_fs {
        return Ok(false);
    }
    let payload = json!({ "sessionId": ctx.session_id, "path": path.display().to_string(), "content": content });
    match ctx
        .lua
        .call(ctx.stream, "fs/write_text_file", payload, EDITOR_WAIT, &ctx.abort)
        .await
    {
        Ok(Ok(Value::Object(m))) => Ok(m.get("written").and_then(Value::as_bool).unwrap_or(false)),
        Ok(Ok(_)) => Ok(false),
        Ok(Err(message)) => Err(message),
        Err(e) => Err(e.to_string()),
    }
}
