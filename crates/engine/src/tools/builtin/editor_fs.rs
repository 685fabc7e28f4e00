//! ACP's client-side file methods, answered by Neovim: a file open in a
//! buffer is read and written through the buffer, so the model sees the
//! text the user sees (unsaved changes included) and its edits land in the
//! buffer (saved, so buffer and disk agree) instead of behind the user's back.
//! Only agent runs ask ([`crate::calls::LuaBridge::editor_fs`]); a file no
//! buffer holds is read and written on disk as before.

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use crate::tools::ToolContext;
use mia_proto::reply::{ReadReply, WriteReply};
use mia_proto::EditorCall;

/// How long a file operation waits for Neovim's answer.
const EDITOR_WAIT: Duration = Duration::from_secs(5);

/// `fs/read_text_file`: the text of the buffer holding `path`: with
/// `loaded_too`, any loaded buffer; otherwise only one with unsaved changes.
/// `None`: no such buffer (read the disk).
pub(super) async fn read_text(ctx: &ToolContext, path: &Path, loaded_too: bool) -> Option<String> {
    read_buffer(ctx, path, loaded_too).await.map(|b| b.text)
}

/// A buffer's text and how it maps to the file on disk.
pub(super) struct BufferText {
    pub text: String,
    /// The buffer has unsaved changes.
    pub modified: bool,
    /// 'fileformat', 'bomb' and 'fileencoding', to compare with the disk.
    pub fileformat: String,
    pub bomb: bool,
    pub encoding: String,
}

impl BufferText {
    /// True when the file on disk (`disk`) holds something else than the
    /// buffer's text as Neovim would write it: it changed behind the buffer.
    /// Only an unmodified UTF-8 buffer is compared (others cannot be told apart).
    pub fn disk_changed_behind(&self, disk: &[u8]) -> bool {
        if self.modified || !(self.encoding.is_empty() || self.encoding.eq_ignore_ascii_case("utf-8")) {
            return false;
        }
        let mut bytes = disk;
        if self.bomb {
            bytes = bytes.strip_prefix(b"\xEF\xBB\xBF".as_slice()).unwrap_or(bytes);
        }
        let Ok(text) = std::str::from_utf8(bytes) else {
            return false;
        };
        let text = match self.fileformat.as_str() {
            "dos" => std::borrow::Cow::Owned(text.replace("\r\n", "\n")),
            "mac" => return false,
            _ => std::borrow::Cow::Borrowed(text),
        };
        // 'fixeol' may add the final newline the file lacks.
        text.trim_end_matches('\n') != self.text.trim_end_matches('\n')
    }
}

/// [`read_text`] with the buffer's state.
pub(super) async fn read_buffer(ctx: &ToolContext, path: &Path, loaded_too: bool) -> Option<BufferText> {
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
        .call_for::<ReadReply>(ctx.stream, EditorCall::ReadTextFile(payload), EDITOR_WAIT, &ctx.abort)
        .await
    {
        // Without the flag (an older answer), `modified` is true: nothing is compared.
        Ok(Ok(ReadReply(Some(b)))) => Some(BufferText {
            text: b.content,
            modified: b.modified,
            fileformat: b.fileformat,
            bomb: b.bomb,
            encoding: b.encoding,
        }),
        // No answer in time: the disk is read, and the user is told why.
        Err(crate::calls::CallError::TimedOut(ms)) => {
            let text = format!(
                "the editor did not answer fs/read_text_file for {} within {} s; read from disk instead \
                 (unsaved changes in the editor, if any, were not seen)",
                path.display(),
                ms / 1000
            );
            tracing::warn!("{text}");
            ctx.lua.queue.push(crate::events::Event::Mia {
                stream: ctx.stream,
                event: crate::events::MiaEvent::Warning { text },
            });
            None
        }
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
        .call_for::<WriteReply>(ctx.stream, EditorCall::WriteTextFile(payload), LANDING_WAIT, &ctx.abort)
        .await
    {
        Ok(Ok(WriteReply::Written)) => Ok(EditorWrite::Written),
        Ok(Ok(WriteReply::Rejected { reason })) => {
            let reason = reason
                .as_deref()
                .unwrap_or("the user kept their unsaved changes in the editor");
            Ok(EditorWrite::Rejected(reason.chars().take(2_000).collect()))
        }
        Ok(Ok(WriteReply::NoBuffer)) => Ok(EditorWrite::NoBuffer),
        Ok(Err(message)) => Err(message),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::BufferText;

    fn buffer(text: &str, fileformat: &str, bomb: bool, modified: bool) -> BufferText {
        BufferText {
            text: text.into(),
            modified,
            fileformat: fileformat.into(),
            bomb,
            encoding: "utf-8".into(),
        }
    }

    #[test]
    fn a_file_changed_behind_an_unmodified_buffer_is_told_from_how_neovim_writes_it() {
        let b = buffer("one\ntwo\n", "unix", false, false);
        assert!(!b.disk_changed_behind(b"one\ntwo\n"));
        assert!(!b.disk_changed_behind(b"one\ntwo"), "'fixeol' adds the newline");
        assert!(b.disk_changed_behind(b"one\ntwo\nthree\n"));
        let dos = buffer("one\ntwo\n", "dos", true, false);
        assert!(!dos.disk_changed_behind(b"\xEF\xBB\xBFone\r\ntwo\r\n"));
        assert!(dos.disk_changed_behind(b"\xEF\xBB\xBFone\r\nTWO\r\n"));
        // Unsaved changes are the user's: the landing asks about those instead.
        assert!(!buffer("mine\n", "unix", false, true).disk_changed_behind(b"theirs\n"));
        assert!(!buffer("x\n", "unix", false, false).disk_changed_behind(&[0xff, 0xfe]));
    }
}
