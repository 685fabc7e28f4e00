//! `write_file`: creates or replaces a whole file, atomically.

use futures_util::future::BoxFuture;
use serde_json::{json, Value};

use super::atomic::write_atomically;
use super::{human_bytes, object_schema, path_subject, prop, required_str, resolve, run_blocking, shown, Outcome};
use crate::tools::{Tool, ToolContext, ToolEffect, ToolOutput};

/// Writes a file's full content, creating parent directories.
pub struct WriteFile;

const NAME: &str = "write_file";

impl Tool for WriteFile {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        "Create a file or replace its entire content. Parent directories are created as needed. \
         To change part of an existing file, prefer edit_file."
    }

    fn parameters(&self) -> Value {
        object_schema(
            json!({
                "path": prop("string", "File to write, relative to the project root (or absolute inside it)."),
                "content": prop("string", "The complete new content of the file."),
            }),
            &["path", "content"],
        )
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::Write
    }

    fn subject(&self, args: &Value) -> Option<crate::tools::ToolSubject> {
        path_subject(args, "path", None)
    }

    fn call(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        Box::pin(async move {
            // A file open in a buffer is written through Neovim (buffer and disk agree after).
            if let (Some(requested), Some(content)) = (
                args.get("path").and_then(Value::as_str),
                args.get("content").and_then(Value::as_str),
            ) {
                if let Ok(path) = resolve(&ctx, requested) {
                    let name = shown(&ctx, &path);
                    match super::editor_fs::write_text(&ctx, &path, content).await {
                        Ok(true) => return super::with_error_summary(NAME, written(&name, content, true)),
                        Ok(false) => {}
                        Err(e) => {
                            return super::with_error_summary(
                                NAME,
                                ToolOutput::error(format!("`{name}` could not be written in the editor ({e})")),
                            )
                        }
                    }
                }
            }
            run_blocking(NAME, move || write(&args, &ctx)).await
        })
    }
}

fn write(args: &Value, ctx: &ToolContext) -> Outcome {
    let requested = required_str(NAME, args, "path")?;
    let content = required_str(NAME, args, "content")?;
    let path = resolve(ctx, requested)?;
    let name = shown(ctx, &path);
    let existed = write_atomically(&path, content.as_bytes())
        .map_err(|e| ToolOutput::error(format!("`{name}` could not be written ({e})")))?;
    Ok(written(&name, content, existed))
}

/// What the model is told about a file written with `content`.
fn written(name: &str, content: &str, existed: bool) -> ToolOutput {
    let bytes = content.len() as u64;
    let size = human_bytes(bytes);
    let lines = content.lines().count();
    if existed {
        ToolOutput::ok(format!("Overwrote `{name}` ({bytes} bytes, {lines} lines)."))
            .with_summary(format!("✏ wrote {size} to {name}"))
    } else {
        ToolOutput::ok(format!("Created `{name}` ({bytes} bytes, {lines} lines)."))
            .with_summary(format!("✏ created {name} ({size})"))
    }
}
