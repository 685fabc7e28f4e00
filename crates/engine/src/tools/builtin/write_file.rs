//! `write_file`: creates or replaces a whole file, through review and
//! checkpoints ([`crate::tools::landing`]), atomically.

use futures_util::future::BoxFuture;
use serde_json::{json, Value};

use super::{human_bytes, object_schema, path_subject, prop, required_str, resolve, shown};
use crate::tools::landing::{self, Proposal};
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

    fn reviews_edits(&self) -> bool {
        true
    }

    fn call(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        Box::pin(async move {
            let out = match propose(&args, &ctx).await {
                Ok((proposal, accepted)) => landing::land(&ctx, NAME, proposal, accepted).await,
                Err(out) => out,
            };
            super::with_error_summary(NAME, out)
        })
    }
}

/// The file as it is (the buffer that holds it, or the disk) and as the
/// call would leave it; landing reviews and writes it.
async fn propose(args: &Value, ctx: &ToolContext) -> Result<(Proposal, ToolOutput), ToolOutput> {
    let requested = required_str(NAME, args, "path")?;
    let content = required_str(NAME, args, "content")?;
    let path = resolve(ctx, requested)?;
    let name = shown(ctx, &path);
    let before = super::current_content(ctx, &path, &name, NAME).await?;
    let accepted = written(&name, content, before.is_some());
    Ok((
        Proposal {
            path,
            name,
            before,
            after: content.as_bytes().to_vec(),
        },
        accepted,
    ))
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
