//! `list_dir`: what a directory holds, a few levels deep, as git sees it.

use std::path::PathBuf;

use futures_util::future::BoxFuture;
use serde_json::{json, Value};

use super::{
    human_bytes, object_schema, optional_str, optional_u64, path_subject, project_walker, prop, resolve, run_blocking,
    shown, Outcome,
};
use crate::tools::{Tool, ToolContext, ToolEffect, ToolOutput};

/// Lists a directory, honouring `.gitignore` and hiding dotfiles.
pub struct ListDir;

const NAME: &str = "list_dir";
const DEFAULT_DEPTH: u64 = 1;
const MAX_DEPTH: u64 = 5;

impl Tool for ListDir {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        "List the files and directories in a project directory, skipping what .gitignore ignores and hidden files. \
         Directories end with `/`. Paths are relative to the listed directory."
    }

    fn parameters(&self) -> Value {
        object_schema(
            json!({
                "path": prop("string", "Directory to list, relative to the project root. Defaults to the root (\".\")."),
                "depth": {
                    "type": "integer", "minimum": 1, "maximum": MAX_DEPTH,
                    "description": "How many levels to descend (1 = only direct entries). Defaults to 1, at most 5.",
                },
            }),
            &[],
        )
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::Read
    }

    fn subject(&self, args: &Value) -> Option<crate::tools::ToolSubject> {
        path_subject(args, "path", Some("."))
    }

    fn call(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        run_blocking(NAME, move || list(&args, &ctx))
    }
}

fn list(args: &Value, ctx: &ToolContext) -> Outcome {
    let requested = optional_str(args, "path").unwrap_or(".");
    let depth = optional_u64(args, "depth").unwrap_or(DEFAULT_DEPTH).clamp(1, MAX_DEPTH) as usize;
    let dir = resolve(ctx, requested)?;
    let name = shown(ctx, &dir);
    match std::fs::metadata(&dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(ToolOutput::error(format!(
                "`{name}` is a file, not a directory; use read_file to read it"
            )));
        }
        Err(_) => {
            return Err(ToolOutput::error(format!(
                "`{name}` does not exist; list its parent directory or use glob to find it"
            )));
        }
    }

    let mut entries: Vec<(PathBuf, bool)> = Vec::new();
    for entry in project_walker(ctx, &dir).max_depth(Some(depth)).build() {
        if ctx.abort.is_cancelled() {
            break;
        }
        // Unreadable entries are skipped; the listing is a view, not an audit.
        let Ok(entry) = entry else { continue };
        if entry.depth() == 0 {
            continue;
        }
        let Ok(relative) = entry.path().strip_prefix(&dir) else {
            continue;
        };
        let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
        entries.push((relative.to_path_buf(), is_dir));
    }
    entries.sort();

    let total = entries.len();
    if total == 0 {
        return Ok(
            ToolOutput::ok(format!("`{name}` is empty (or holds only ignored and hidden files)."))
                .with_summary(format!("📂 listed {name} (empty)")),
        );
    }
    let cap = ctx.limits.output_cap_bytes;
    let mut content = String::new();
    let mut listed = 0;
    for (path, is_dir) in &entries {
        let line = format!("{}{}\n", path.display(), if *is_dir { "/" } else { "" });
        if content.len() + line.len() > cap {
            break;
        }
        content.push_str(&line);
        listed += 1;
    }
    content.pop();
    let mut summary = format!("📂 listed {name} ({total} entries)");
    if listed < total {
        content.push_str(&format!(
            "\n({} more entries not shown: the listing is capped at {}; list a subdirectory or use a smaller depth)",
            total - listed,
            human_bytes(cap as u64)
        ));
        summary = format!("📂 listed {name} ({listed} of {total} entries)");
    }
    if ctx.abort.is_cancelled() {
        content.push_str("\n(cancelled: the listing is incomplete)");
    }
    Ok(ToolOutput::ok(content).with_summary(summary))
}
