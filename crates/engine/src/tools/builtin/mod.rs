//! The tools mia ships: reading, writing and editing files, listing and
//! finding files, searching their text, and running shell commands. Each tool
//! is a unit struct in its own file; this module holds what they share
//! (argument access, path confinement, running blocking work off the async
//! threads, the project walker and a few formatting helpers).

mod atomic;
mod bash;
mod edit_file;
mod editor_fs;
mod glob;
mod grep;
mod list_dir;
mod output;
mod process_group;
mod read_file;
pub mod update_plan;
mod write_file;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::Value;

use super::paths::{canonicalize, display_relative, resolve_in_root, PathError};
use super::{SharedTool, ToolContext, ToolOutput, ToolSubject};

pub(crate) use atomic::{write_atomically, write_atomically_unsynced};
pub use bash::Bash;
pub use edit_file::EditFile;
pub(crate) use editor_fs::write_through_editor;
pub use glob::Glob;
pub use grep::Grep;
pub use list_dir::ListDir;
pub use read_file::ReadFile;
pub use write_file::WriteFile;

/// Every built-in tool, in the order they are offered to the model.
pub fn all() -> Vec<SharedTool> {
    vec![
        Arc::new(ReadFile),
        Arc::new(WriteFile),
        Arc::new(EditFile),
        Arc::new(ListDir),
        Arc::new(Glob),
        Arc::new(Grep),
        Arc::new(Bash),
        Arc::new(update_plan::UpdatePlan),
    ]
}

/// A tool body either finishes with its output or stops early with an error
/// output; both reach the model, so both are `ToolOutput`.
type Outcome = Result<ToolOutput, ToolOutput>;

/// Runs `work` on tokio's blocking pool (file I/O and directory walks would
/// stall the async threads) and gives every result a chat summary: errors
/// that did not set one get "⚠ tool: first line of the message".
fn run_blocking<F>(tool: &'static str, work: F) -> BoxFuture<'static, ToolOutput>
where
    F: FnOnce() -> Outcome + Send + 'static,
{
    Box::pin(async move {
        let out = match tokio::task::spawn_blocking(work).await {
            Ok(Ok(out) | Err(out)) => out,
            Err(e) => ToolOutput::error(format!(
                "`{tool}` stopped unexpectedly ({e}); this is a bug in mia, please report it"
            )),
        };
        with_error_summary(tool, out)
    })
}

/// Adds "⚠ tool: …" as the summary of an error output that has none.
fn with_error_summary(tool: &str, out: ToolOutput) -> ToolOutput {
    if !out.is_error || !out.metadata.is_null() {
        return out;
    }
    let first = out.content.lines().next().unwrap_or("").to_string();
    out.with_summary(format!("⚠ {tool}: {}", shorten(&first, 100)))
}

/// The string argument `key`, which the schema marks required.
fn required_str<'a>(tool: &str, args: &'a Value, key: &str) -> Result<&'a str, ToolOutput> {
    args.get(key).and_then(Value::as_str).ok_or_else(|| {
        ToolOutput::error(format!(
            "`{tool}` needs `{key}` (a string); call it again with `{key}` set"
        ))
    })
}

fn optional_str<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

/// A whole number argument; `3.0` counts, negative numbers and fractions do not.
fn optional_u64(args: &Value, key: &str) -> Option<u64> {
    let v = args.get(key)?;
    v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| *f >= 0.0 && f.fract() == 0.0 && *f <= u64::MAX as f64)
            .map(|f| f as u64)
    })
}

fn optional_bool(args: &Value, key: &str) -> Option<bool> {
    args.get(key).and_then(Value::as_bool)
}

/// Resolves a path argument inside the project, or the refusal the model sees.
/// A path outside the project resolves only when a rule allowed exactly
/// that path for this call.
fn resolve(ctx: &ToolContext, requested: &str) -> Result<PathBuf, ToolOutput> {
    match resolve_in_root(&ctx.root, requested) {
        Ok(path) => Ok(path),
        Err(e @ (PathError::OutsideRoot { .. } | PathError::SymlinkEscape { .. })) => {
            let allowed = ctx.outside_allowed.as_ref();
            match canonicalize(&ctx.root, requested) {
                Ok(c) if Some(&c.physical) == allowed => Ok(c.physical),
                _ => Err(ToolOutput::error(e.to_string())),
            }
        }
        Err(e) => Err(ToolOutput::error(e.to_string())),
    }
}

/// Most bytes of a file an edit proposal reads (the diff and the checkpoint need all of it).
const MAX_EDITED_BYTES: u64 = 64 * 1024 * 1024;

/// The content an edit starts from: the text of the buffer that holds the
/// file (unsaved changes included), else the file on disk; `None` when it
/// does not exist.
pub(crate) async fn current_content(
    ctx: &ToolContext,
    path: &Path,
    name: &str,
    tool: &str,
) -> Result<Option<Vec<u8>>, ToolOutput> {
    if let Some(buffer) = editor_fs::read_buffer(ctx, path, true).await {
        // Saving the buffer would undo a change made on disk behind it.
        let (disk_path, b) = (path.to_path_buf(), buffer);
        let (buffer, behind) = tokio::task::spawn_blocking(move || {
            let behind = crate::tools::paths::read_regular(&disk_path, MAX_EDITED_BYTES)
                .is_ok_and(|disk| b.disk_changed_behind(&disk));
            (b, behind)
        })
        .await
        .map_err(|e| ToolOutput::error(format!("`{tool}` stopped unexpectedly ({e}); this is a bug in mia")))?;
        if behind {
            return Err(ToolOutput::error(format!(
                "`{name}` changed on disk since it was loaded in the editor, so the buffer is out of date; the \
                 user must reload it (:edit) before it can be changed. Tell them, then read it again."
            ))
            .with_summary(format!("⚠ {tool}: {name} changed on disk behind its buffer")));
        }
        return Ok(Some(buffer.text.into_bytes()));
    }
    let (path, name, tool) = (path.to_path_buf(), name.to_string(), tool.to_string());
    let stopped = tool.clone();
    let read = tokio::task::spawn_blocking(move || -> Result<Option<Vec<u8>>, ToolOutput> {
        let meta = match std::fs::metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(ToolOutput::error(format!("`{name}` cannot be read ({e})"))),
        };
        if meta.is_dir() {
            return Err(ToolOutput::error(format!(
                "`{name}` is a directory; {tool} changes one file"
            )));
        }
        if !meta.is_file() {
            return Err(ToolOutput::error(format!(
                "`{name}` is not a regular file (a device, socket or pipe); {tool} only changes files"
            )));
        }
        if meta.len() > MAX_EDITED_BYTES {
            return Err(ToolOutput::error(format!(
                "`{name}` is {} ({} bytes), more than mia edits ({}); change it with a command instead",
                human_bytes(meta.len()),
                meta.len(),
                human_bytes(MAX_EDITED_BYTES)
            )));
        }
        crate::tools::paths::read_regular(&path, MAX_EDITED_BYTES)
            .map(Some)
            .map_err(|e| ToolOutput::error(format!("`{name}` cannot be read ({e})")))
    })
    .await;
    match read {
        Ok(r) => r,
        Err(e) => Err(ToolOutput::error(format!(
            "`{stopped}` stopped unexpectedly ({e}); this is a bug in mia, please report it"
        ))),
    }
}

/// How a path is shown to the model and in the chat: relative to the root.
fn shown(ctx: &ToolContext, path: &Path) -> String {
    display_relative(&ctx.root, path)
}

/// The path subject of a tool whose path argument is `key` (`default` when absent).
fn path_subject(args: &Value, key: &str, default: Option<&str>) -> Option<ToolSubject> {
    optional_str(args, key)
        .or(default)
        .map(|p| ToolSubject::Path(p.to_string()))
}

/// The command subject of a tool whose command argument is `key`.
fn command_subject(args: &Value, key: &str) -> Option<ToolSubject> {
    optional_str(args, key).map(|c| ToolSubject::Command(c.to_string()))
}

/// A walker over the project that sees what git would: `.gitignore` (also
/// outside a git repository, since many projects are not one yet), `.ignore`,
/// global git excludes, and no hidden files.
///
/// Entries that a deny rule hides from this tool (`ToolContext::hidden`)
/// are skipped, directories with all they hold, so that searching a
/// directory never reads a file the rules deny by name.
fn project_walker(ctx: &ToolContext, start: &Path) -> ignore::WalkBuilder {
    let mut builder = ignore::WalkBuilder::new(start);
    builder.require_git(false).follow_links(false);
    if let Some(hidden) = ctx.hidden.clone() {
        let root = ctx.root.canonicalize().unwrap_or_else(|_| ctx.root.clone());
        builder.filter_entry(move |entry| match entry.path().strip_prefix(&root) {
            Ok(rel) if !rel.as_os_str().is_empty() => !hidden(&rel.to_string_lossy()),
            _ => true,
        });
    }
    builder
}

/// A schema property: `{"type": ty, "description": description}`.
fn prop(ty: &str, description: &str) -> Value {
    serde_json::json!({ "type": ty, "description": description })
}

/// The object schema every built-in tool uses: listed properties only.
fn object_schema(properties: Value, required: &[&str]) -> Value {
    serde_json::json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// Sizes for people: "812 B", "4.1 KB", "2.3 MB".
fn human_bytes(n: u64) -> String {
    const KB: f64 = 1024.0;
    let f = n as f64;
    if f < KB {
        format!("{n} B")
    } else if f < KB * KB {
        format!("{:.1} KB", f / KB)
    } else if f < KB * KB * KB {
        format!("{:.1} MB", f / (KB * KB))
    } else {
        format!("{:.1} GB", f / (KB * KB * KB))
    }
}

/// `s` cut to at most `max` characters, with "…" when cut.
fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Whether `bytes` (the start of a file) look binary: a NUL byte, the same
/// test git and ripgrep use.
fn looks_binary(bytes: &[u8]) -> bool {
    memchr::memchr(0, bytes).is_some()
}

/// How much of a file's start [`looks_binary`] examines.
const BINARY_SNIFF_BYTES: usize = 8 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_a_unique_name_and_a_closed_object_schema() {
        let tools = all();
        let mut names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), tools.len());
        for tool in &tools {
            let schema = tool.parameters();
            assert_eq!(schema["type"], "object", "{}", tool.name());
            assert_eq!(schema["additionalProperties"], false, "{}", tool.name());
            for (key, property) in schema["properties"].as_object().unwrap() {
                assert!(
                    property["description"].as_str().is_some_and(|d| !d.is_empty()),
                    "{}.{key} has no description",
                    tool.name()
                );
            }
            for key in schema["required"].as_array().unwrap() {
                assert!(schema["properties"].get(key.as_str().unwrap()).is_some());
            }
            assert!(!tool.description().is_empty());
        }
    }

    #[test]
    fn sizes_read_like_people_write_them() {
        assert_eq!(human_bytes(812), "812 B");
        assert_eq!(human_bytes(4200), "4.1 KB");
        assert_eq!(human_bytes(3 * 1024 * 1024), "3.0 MB");
    }

    #[test]
    fn shorten_marks_cuts() {
        assert_eq!(shorten("abc", 5), "abc");
        assert_eq!(shorten("abcdef", 4), "abc…");
    }

    #[test]
    fn whole_numbers_are_accepted_in_either_json_form() {
        let args = serde_json::json!({"a": 3, "b": 3.0, "c": 2.5, "d": -1});
        assert_eq!(optional_u64(&args, "a"), Some(3));
        assert_eq!(optional_u64(&args, "b"), Some(3));
        assert_eq!(optional_u64(&args, "c"), None);
        assert_eq!(optional_u64(&args, "d"), None);
    }
}
