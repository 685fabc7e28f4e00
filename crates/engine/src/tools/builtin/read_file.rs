//! `read_file`: a text file with line numbers, whole or a range of lines.

use std::io::{self, BufRead, BufReader, Read};

use futures_util::future::BoxFuture;
use serde_json::{json, Value};

use super::{
    human_bytes, looks_binary, object_schema, optional_u64, path_subject, prop, required_str, resolve, run_blocking,
    shown, Outcome, BINARY_SNIFF_BYTES,
};
use crate::tools::{Tool, ToolContext, ToolEffect, ToolOutput};

/// Reads a file as `cat -n` shows it.
pub struct ReadFile;

const NAME: &str = "read_file";

impl Tool for ReadFile {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        "Read a text file in the project. Each line is prefixed with its line number and a tab (like `cat -n`); \
         the numbers are not part of the file. Large files must be read in parts with `offset` and `limit`."
    }

    fn parameters(&self) -> Value {
        object_schema(
            json!({
                "path": prop("string", "File to read, relative to the project root (or absolute inside it)."),
                "offset": {
                    "type": "integer", "minimum": 1,
                    "description": "First line to read, 1-based. Defaults to 1.",
                },
                "limit": {
                    "type": "integer", "minimum": 1,
                    "description": "How many lines to read from `offset`. Defaults to the rest of the file.",
                },
            }),
            &["path"],
        )
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::Read
    }

    fn subject(&self, args: &Value) -> Option<crate::tools::ToolSubject> {
        path_subject(args, "path", None)
    }

    fn call(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        Box::pin(async move {
            if ctx.lua.editor_fs {
                if let Some(text) = editor_text(&args, &ctx).await {
                    let out = match from_editor(&args, &ctx, &text) {
                        Ok(out) | Err(out) => out,
                    };
                    return super::with_error_summary(NAME, out);
                }
            }
            let edits = ctx.edits.clone();
            let path = args
                .get("path")
                .and_then(Value::as_str)
                .and_then(|p| resolve(&ctx, p).ok());
            let out = run_blocking(NAME, move || read(&args, &ctx)).await;
            // What the model saw: an edit after the file changed on disk behind it is refused.
            if let (Some(edits), Some(path), false) = (edits, path, out.is_error) {
                edits.ledger.saw(&path);
            }
            out
        })
    }
}

/// The file's text as an unsaved Neovim buffer holds it; `None` when no
/// modified buffer has it (the file on disk is then read as usual).
async fn editor_text(args: &Value, ctx: &ToolContext) -> Option<String> {
    let requested = args.get("path")?.as_str()?;
    let path = resolve(ctx, requested).ok()?;
    super::editor_fs::read_text(ctx, &path, false).await
}

/// `read` over the text of an unsaved buffer.
fn from_editor(args: &Value, ctx: &ToolContext, text: &str) -> Outcome {
    let requested = required_str(NAME, args, "path")?;
    let path = resolve(ctx, requested)?;
    let name = shown(ctx, &path);
    let offset = optional_u64(args, "offset").unwrap_or(1).max(1);
    let limit = optional_u64(args, "limit");
    let ranged = args.get("offset").is_some() || limit.is_some();
    let cap = ctx.limits.max_read_bytes;
    let len = text.len() as u64;
    if !ranged && len > cap {
        return Err(ToolOutput::error(format!(
            "`{name}` (unsaved in the editor) is {} ({len} bytes), more than read_file returns at once ({}); pass              `offset` and `limit` to read it in parts",
            human_bytes(len),
            human_bytes(cap)
        )));
    }
    let output_cap = if ranged { cap } else { u64::MAX };
    let numbered =
        number_lines(io::Cursor::new(text.as_bytes()), offset, limit, output_cap).map_err(|e| open_error(&name, &e))?;
    present(&name, numbered, offset, ranged, cap, " (unsaved buffer)")
}

fn read(args: &Value, ctx: &ToolContext) -> Outcome {
    let requested = required_str(NAME, args, "path")?;
    let path = resolve(ctx, requested)?;
    let name = shown(ctx, &path);
    let meta = std::fs::metadata(&path).map_err(|e| open_error(&name, &e))?;
    if meta.is_dir() {
        return Err(ToolOutput::error(format!(
            "`{name}` is a directory, not a file; use list_dir to see what it contains"
        )));
    }
    if !meta.is_file() {
        return Err(ToolOutput::error(format!(
            "`{name}` is not a regular file (a device, socket or pipe); read_file only reads files"
        )));
    }
    let offset = optional_u64(args, "offset").unwrap_or(1).max(1);
    let limit = optional_u64(args, "limit");
    let ranged = args.get("offset").is_some() || limit.is_some();
    let cap = ctx.limits.max_read_bytes;
    if !ranged && meta.len() > cap {
        return Err(ToolOutput::error(format!(
            "`{name}` is {} ({} bytes), more than read_file returns at once ({}); pass `offset` and `limit` to read \
             it in parts (e.g. offset 1, limit 500), or use grep to find the lines you need",
            human_bytes(meta.len()),
            meta.len(),
            human_bytes(cap)
        )));
    }

    // Checked again on the open file: a pipe swapped in since would block.
    let (mut file, _) = crate::tools::paths::open_regular(&path).map_err(|e| open_error(&name, &e))?;
    let mut head = Vec::with_capacity(BINARY_SNIFF_BYTES);
    (&mut file)
        .take(BINARY_SNIFF_BYTES as u64)
        .read_to_end(&mut head)
        .map_err(|e| open_error(&name, &e))?;
    if looks_binary(&head) {
        return Err(ToolOutput::error(format!(
            "`{name}` looks like a binary file (it contains NUL bytes); read_file only shows text"
        )));
    }

    let reader = BufReader::new(io::Cursor::new(head).chain(file));
    // A whole file already passed the size check; only ranges need the cap.
    let output_cap = if ranged { cap } else { u64::MAX };
    let numbered = number_lines(reader, offset, limit, output_cap).map_err(|e| open_error(&name, &e))?;
    present(&name, numbered, offset, ranged, cap, "")
}

/// The numbered lines as the model gets them, with the chat's summary.
fn present(name: &str, numbered: Numbered, offset: u64, ranged: bool, cap: u64, from: &str) -> Outcome {
    if numbered.total_lines == 0 {
        return Ok(ToolOutput::ok(format!("(`{name}` is empty)")).with_summary(format!("📖 read {name} (empty){from}")));
    }
    if numbered.shown == 0 {
        return Err(ToolOutput::error(format!(
            "`{name}` has {} lines, so offset {offset} is past its end; pass an offset between 1 and {}",
            numbered.total_lines, numbered.total_lines
        )));
    }

    let last = offset + numbered.shown - 1;
    let mut content = numbered.text;
    if numbered.stopped_early {
        content.push_str(&format!(
            "\n(output stopped at line {last} to stay under {}; continue with offset {})",
            human_bytes(cap),
            last + 1
        ));
    }
    let summary = if ranged || numbered.stopped_early {
        format!("📖 read {name} (lines {offset}–{last}){from}")
    } else {
        format!("📖 read {name} ({} lines){from}", numbered.shown)
    };
    Ok(ToolOutput::ok(content).with_summary(summary))
}

/// The numbered text of a range of lines.
struct Numbered {
    text: String,
    /// Lines in `text`.
    shown: u64,
    /// Lines read from the file (up to where reading stopped).
    total_lines: u64,
    /// Reading stopped at `cap` bytes of output before `limit` was reached.
    stopped_early: bool,
}

/// Numbers lines `offset..offset+limit` of `reader` as `cat -n` does (width 6,
/// then a tab), decoding invalid UTF-8 lossily. Stops once the output would
/// exceed `cap` bytes; without a limit, counts the remaining lines so an
/// offset past the end can be reported.
fn number_lines(mut reader: impl BufRead, offset: u64, limit: Option<u64>, cap: u64) -> io::Result<Numbered> {
    let mut out = Numbered {
        text: String::new(),
        shown: 0,
        total_lines: 0,
        stopped_early: false,
    };
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        out.total_lines += 1;
        let number = out.total_lines;
        if number < offset {
            continue;
        }
        if limit.is_some_and(|l| out.shown >= l) {
            break;
        }
        let text = String::from_utf8_lossy(trim_line_end(&line));
        let entry = format!("{number:>6}\t{text}\n");
        if out.shown > 0 && (out.text.len() + entry.len()) as u64 > cap {
            out.stopped_early = true;
            break;
        }
        out.text.push_str(&entry);
        out.shown += 1;
    }
    if out.text.ends_with('\n') {
        out.text.pop();
    }
    Ok(out)
}

/// A line without its terminator (`\n` or `\r\n`).
fn trim_line_end(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// The model-facing message for a file that cannot be opened or read.
fn open_error(name: &str, e: &io::Error) -> ToolOutput {
    ToolOutput::error(match e.kind() {
        io::ErrorKind::NotFound => {
            format!("`{name}` does not exist; check the path (glob finds files by name, list_dir shows a directory)")
        }
        io::ErrorKind::PermissionDenied => format!("`{name}` cannot be read: permission denied"),
        _ => format!("`{name}` cannot be read ({e})"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbered(text: &str, offset: u64, limit: Option<u64>, cap: u64) -> Numbered {
        number_lines(io::Cursor::new(text.as_bytes().to_vec()), offset, limit, cap).unwrap()
    }

    #[test]
    fn lines_are_numbered_like_cat_n() {
        let n = numbered("a\nb\r\nc", 1, None, 1024);
        assert_eq!(n.text, "     1\ta\n     2\tb\n     3\tc");
        assert_eq!(n.shown, 3);
    }

    #[test]
    fn a_range_starts_at_offset_and_takes_limit_lines() {
        let n = numbered("a\nb\nc\nd\n", 2, Some(2), 1024);
        assert_eq!(n.text, "     2\tb\n     3\tc");
    }

    #[test]
    fn output_stops_at_the_cap_with_at_least_one_line() {
        let n = numbered("aaaa\nbbbb\ncccc\n", 1, None, 20);
        assert_eq!(n.shown, 1);
        assert!(n.stopped_early);
    }
}
