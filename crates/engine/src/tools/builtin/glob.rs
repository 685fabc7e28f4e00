//! `glob`: files whose path matches a glob pattern, newest first.

use std::path::PathBuf;
use std::time::SystemTime;

use futures_util::future::BoxFuture;
use globset::GlobBuilder;
use serde_json::{json, Value};

use super::{
    human_bytes, object_schema, optional_str, path_subject, project_walker, prop, required_str, resolve, run_blocking,
    shown, Outcome,
};
use crate::tools::{Tool, ToolContext, ToolEffect, ToolOutput};

/// Finds files by name pattern, honouring `.gitignore`.
pub struct Glob;

const NAME: &str = "glob";

impl Tool for Glob {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        "Find files by path pattern, e.g. `**/*.rs` or `src/**/test_*.{js,ts}`. `*` stays within one directory, \
         `**` crosses directories. Skips what .gitignore ignores and hidden files. Results are paths relative to the \
         project root, most recently modified first."
    }

    fn parameters(&self) -> Value {
        object_schema(
            json!({
                "pattern": prop("string", "Glob matched against file paths relative to `path` (or to the project root)."),
                "path": prop("string", "Directory to search in, relative to the project root. Defaults to the root."),
            }),
            &["pattern"],
        )
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::Read
    }

    fn subject(&self, args: &Value) -> Option<crate::tools::ToolSubject> {
        path_subject(args, "path", Some("."))
    }

    fn call(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        run_blocking(NAME, move || find(&args, &ctx))
    }
}

fn find(args: &Value, ctx: &ToolContext) -> Outcome {
    let pattern = required_str(NAME, args, "pattern")?;
    let requested = optional_str(args, "path").unwrap_or(".");
    let matcher = GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map_err(|e| {
            ToolOutput::error(format!(
                "`{pattern}` is not a valid glob ({}); use `*`, `?`, `**`, `[abc]` and `{{a,b}}`",
                e.kind()
            ))
        })?
        .compile_matcher();
    let dir = resolve(ctx, requested)?;
    let dir_name = shown(ctx, &dir);
    if !dir.is_dir() {
        return Err(ToolOutput::error(format!(
            "`{dir_name}` is not a directory; pass a directory as `path`, or leave it out to search the whole project"
        )));
    }
    let root = dir_root(ctx, &dir);

    let mut found: Vec<(SystemTime, PathBuf)> = Vec::new();
    for entry in project_walker(ctx, &dir).build() {
        if ctx.abort.is_cancelled() {
            break;
        }
        let Ok(entry) = entry else { continue };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let path = entry.path();
        let from_dir = path.strip_prefix(&dir).unwrap_or(path);
        let from_root = path.strip_prefix(&root).unwrap_or(path);
        if matcher.is_match(from_dir) || matcher.is_match(from_root) {
            let modified = entry
                .metadata()
                .ok()
                .and_then(|m| m.modified().ok())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            found.push((modified, from_root.to_path_buf()));
        }
    }
    // Newest first; equal times by path so the order is stable.
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));

    let total = found.len();
    let cancelled = ctx.abort.is_cancelled();
    if total == 0 {
        let mut content = format!(
            "No files match `{pattern}` in `{dir_name}` (ignored and hidden files are skipped; `*` does not cross \
             `/`, use `**/` for any depth)."
        );
        if cancelled {
            content.push_str("\n(cancelled before the search finished)");
        }
        return Ok(ToolOutput::ok(content).with_summary(format!("🗂 no files match {pattern}")));
    }
    let cap = ctx.limits.output_cap_bytes;
    let mut content = String::new();
    let mut listed = 0;
    for (_, path) in &found {
        let line = format!("{}\n", path.display());
        if content.len() + line.len() > cap {
            break;
        }
        content.push_str(&line);
        listed += 1;
    }
    content.pop();
    if listed < total {
        content.push_str(&format!(
            "\n({} more matching files not shown: output is capped at {}; use a narrower pattern or path)",
            total - listed,
            human_bytes(cap as u64)
        ));
    }
    if cancelled {
        content.push_str("\n(cancelled: the results are incomplete)");
    }
    let files = if total == 1 { "file" } else { "files" };
    Ok(ToolOutput::ok(content).with_summary(format!("🗂 {total} {files} match {pattern}")))
}

/// The project root in the same form as `dir` (both physical), so paths can
/// be made relative to it.
fn dir_root(ctx: &ToolContext, dir: &std::path::Path) -> PathBuf {
    match ctx.root.canonicalize() {
        Ok(root) if dir.starts_with(&root) => root,
        _ => ctx.root.clone(),
    }
}
