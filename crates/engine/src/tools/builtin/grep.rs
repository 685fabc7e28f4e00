//! `grep`: regex search over the project's files with ripgrep's engine.
//!
//! The search runs in two passes so the output is deterministic (sorted by
//! path) while memory stays bounded however many lines match:
//!
//! 1. a parallel, gitignore-aware walk searches every file and counts its
//!    matching lines; it keeps the lines' text too while a global budget
//!    lasts;
//! 2. the matching files are sorted by path and printed until the result or
//!    byte cap is reached; a file whose lines were not kept is searched again.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use futures_util::future::BoxFuture;
use globset::{GlobBuilder, GlobMatcher};
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkMatch};
use ignore::WalkState;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::{
    human_bytes, object_schema, optional_bool, optional_str, optional_u64, path_subject, project_walker, prop,
    required_str, resolve, run_blocking, shorten, shown, Outcome,
};
use crate::tools::{Tool, ToolContext, ToolEffect, ToolOutput};

/// Searches file contents with a regular expression.
pub struct Grep;

const NAME: &str = "grep";
const DEFAULT_MAX_RESULTS: u64 = 200;
const MAX_MAX_RESULTS: u64 = 5_000;
/// Longest line text shown; minified files would otherwise fill the output.
const MAX_LINE_CHARS: usize = 400;
/// How many output caps' worth of line text the first pass may keep.
const KEEP_BUDGET_FACTOR: usize = 4;

impl Tool for Grep {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        "Search file contents with a regular expression (Rust regex syntax, like ripgrep). Skips what .gitignore \
         ignores, hidden files and binary files. Prints `path:line:text` for each matching line, sorted by path."
    }

    fn parameters(&self) -> Value {
        object_schema(
            json!({
                "pattern": prop("string", "Regular expression to search for, e.g. `fn\\s+main` or `TODO|FIXME`. Escape ( [ { . * + ? | \\ to match them literally."),
                "path": prop("string", "File or directory to search, relative to the project root. Defaults to the root."),
                "glob": prop("string", "Only search files matching this glob, e.g. `*.rs` or `src/**/*.{ts,tsx}`. A glob without `/` matches file names at any depth."),
                "case_insensitive": prop("boolean", "Ignore case. Defaults to false."),
                "max_results": {
                    "type": "integer", "minimum": 1, "maximum": MAX_MAX_RESULTS,
                    "description": "Most matching lines to show. Defaults to 200.",
                },
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
        run_blocking(NAME, move || search(&args, &ctx))
    }
}

fn search(args: &Value, ctx: &ToolContext) -> Outcome {
    let pattern = required_str(NAME, args, "pattern")?;
    let requested = optional_str(args, "path").unwrap_or(".");
    let case_insensitive = optional_bool(args, "case_insensitive").unwrap_or(false);
    let max_results = optional_u64(args, "max_results")
        .unwrap_or(DEFAULT_MAX_RESULTS)
        .clamp(1, MAX_MAX_RESULTS) as usize;

    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(case_insensitive)
        .line_terminator(Some(b'\n'))
        .build(pattern)
        .map_err(|e| {
            ToolOutput::error(format!(
                "`{pattern}` is not a valid regular expression: {e}\nFix the pattern (escape ( [ {{ . * + ? | \\ with \
                 a backslash to match them literally; a match cannot span lines)."
            ))
        })?;
    let filter = match optional_str(args, "glob") {
        Some(glob) => Some(FileFilter::new(glob)?),
        None => None,
    };
    let start = resolve(ctx, requested)?;
    let start_name = shown(ctx, &start);
    if !start.exists() {
        return Err(ToolOutput::error(format!(
            "`{start_name}` does not exist; pass an existing file or directory as `path`, or leave it out to search \
             the whole project"
        )));
    }
    let root = physical_root(ctx, &start);

    let search = Search {
        matcher,
        filter,
        abort: ctx.abort.clone(),
        keep_budget: AtomicUsize::new(ctx.limits.output_cap_bytes.saturating_mul(KEEP_BUDGET_FACTOR)),
    };
    let mut files = search.first_pass(project_walker(ctx, &start), &start);
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let cancelled = ctx.abort.is_cancelled();

    let total_lines: u64 = files.iter().map(|f| f.count).sum();
    let total_files = files.len();
    if total_lines == 0 {
        let mut content = format!("No matches for `{pattern}` in `{start_name}`.");
        if cancelled {
            content.push_str("\n(cancelled before the search finished)");
        }
        return Ok(ToolOutput::ok(content).with_summary(format!("🔎 no matches for {}", shorten(pattern, 60))));
    }

    let cap = ctx.limits.output_cap_bytes;
    let mut content = String::new();
    let mut shown_lines = 0usize;
    let mut cut_by_bytes = false;
    'files: for file in &files {
        let lines = match &file.lines {
            Some(lines) => lines.clone(),
            None if cancelled => continue,
            None => search.lines_of(&file.path, max_results - shown_lines),
        };
        let name = file
            .path
            .strip_prefix(&root)
            .unwrap_or(&file.path)
            .display()
            .to_string();
        for (number, text) in lines {
            if shown_lines >= max_results {
                break 'files;
            }
            let line = format!("{name}:{number}:{text}\n");
            if content.len() + line.len() > cap {
                cut_by_bytes = true;
                break 'files;
            }
            content.push_str(&line);
            shown_lines += 1;
        }
    }
    content.pop();

    let in_files = plural(total_files as u64, "file", "files");
    let matches = plural(total_lines, "match", "matches");
    if (shown_lines as u64) < total_lines {
        let why = if cut_by_bytes {
            format!("output is capped at {}", human_bytes(cap as u64))
        } else if cancelled {
            "the search was cancelled".to_string()
        } else {
            format!("max_results is {max_results}")
        };
        content.push_str(&format!(
            "\n(showing {shown_lines} of {total_lines} matching lines in {in_files}: {why}; narrow the pattern, path \
             or glob to see the rest)"
        ));
    }
    if cancelled {
        content.push_str("\n(cancelled: the search stopped early, so there may be more matches)");
    }
    Ok(ToolOutput::ok(content).with_summary(format!("🔎 {matches} in {in_files}")))
}

/// "1 file", "12 files".
fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The project root in the same (physical) form as the walk's paths.
fn physical_root(ctx: &ToolContext, start: &Path) -> PathBuf {
    match ctx.root.canonicalize() {
        Ok(root) if start.starts_with(&root) => root,
        _ => ctx.root.clone(),
    }
}

/// The `glob` argument: like ripgrep's `-g`, a glob without `/` matches a
/// file's name at any depth; one with `/` matches the path below the search
/// directory.
struct FileFilter {
    matcher: GlobMatcher,
    name_only: bool,
}

impl FileFilter {
    fn new(glob: &str) -> Result<Self, ToolOutput> {
        let matcher = GlobBuilder::new(glob.trim_start_matches('/'))
            .literal_separator(true)
            .build()
            .map_err(|e| {
                ToolOutput::error(format!(
                    "`{glob}` is not a valid glob ({}); use e.g. `*.rs`, `src/**/*.ts` or `*.{{js,jsx}}`",
                    e.kind()
                ))
            })?
            .compile_matcher();
        Ok(FileFilter {
            matcher,
            name_only: !glob.contains('/'),
        })
    }

    fn accepts(&self, path: &Path, start: &Path) -> bool {
        if self.name_only {
            path.file_name().is_some_and(|n| self.matcher.is_match(n))
        } else {
            self.matcher.is_match(path.strip_prefix(start).unwrap_or(path))
        }
    }
}

/// What the first pass found in one file.
struct FileHits {
    path: PathBuf,
    /// Matching lines in the file.
    count: u64,
    /// Their numbers and text, if the keep budget allowed storing all of them.
    lines: Option<Vec<(u64, String)>>,
}

/// One search: the compiled pattern and file filter, shared by all threads.
struct Search {
    matcher: RegexMatcher,
    filter: Option<FileFilter>,
    abort: CancellationToken,
    /// Bytes of line text the first pass may still keep.
    keep_budget: AtomicUsize,
}

impl Search {
    fn searcher() -> Searcher {
        SearcherBuilder::new()
            .line_number(true)
            .binary_detection(BinaryDetection::quit(b'\0'))
            .build()
    }

    /// Searches every file the walker yields (from `start`) in parallel; returns the files with
    /// at least one matching line, in no particular order.
    fn first_pass(&self, walker: ignore::WalkBuilder, start: &Path) -> Vec<FileHits> {
        let found: Mutex<Vec<FileHits>> = Mutex::new(Vec::new());
        walker.build_parallel().run(|| {
            let mut searcher = Self::searcher();
            let found = &found;
            Box::new(move |entry| {
                if self.abort.is_cancelled() {
                    return WalkState::Quit;
                }
                let Ok(entry) = entry else {
                    return WalkState::Continue;
                };
                if !entry.file_type().is_some_and(|t| t.is_file()) {
                    return WalkState::Continue;
                }
                if let Some(filter) = &self.filter {
                    if !filter.accepts(entry.path(), start) {
                        return WalkState::Continue;
                    }
                }
                let mut sink = Collect::new(&self.abort, Some(&self.keep_budget), usize::MAX);
                // Unreadable files are skipped, as ripgrep does after a warning; so is a pipe
                // put in a file's place since the walk saw it (opening it would wait for a writer).
                let Ok((file, _)) = crate::tools::paths::open_regular(entry.path()) else {
                    return WalkState::Continue;
                };
                if searcher.search_file(&self.matcher, &file, &mut sink).is_ok() && sink.count > 0 {
                    let hits = FileHits {
                        path: entry.into_path(),
                        count: sink.count,
                        lines: sink.keep.then_some(sink.lines),
                    };
                    found.lock().unwrap_or_else(|p| p.into_inner()).push(hits);
                }
                WalkState::Continue
            })
        });
        found.into_inner().unwrap_or_else(|p| p.into_inner())
    }

    /// The first `limit` matching lines of `path`, searched again.
    fn lines_of(&self, path: &Path, limit: usize) -> Vec<(u64, String)> {
        let mut sink = Collect::new(&self.abort, None, limit);
        // A file that vanished since the first pass (or is no longer a regular file) shows nothing.
        if let Ok((file, _)) = crate::tools::paths::open_regular(path) {
            let _ = Self::searcher().search_file(&self.matcher, &file, &mut sink);
        }
        sink.lines
    }
}

/// Counts a file's matching lines and keeps their text: up to `limit` lines,
/// and while `budget` (shared by all files) lasts. Once the budget runs out
/// mid-file the file's lines are dropped and `keep` turns false, so a file's
/// lines are either all kept or none.
struct Collect<'a> {
    abort: &'a CancellationToken,
    budget: Option<&'a AtomicUsize>,
    limit: usize,
    count: u64,
    lines: Vec<(u64, String)>,
    keep: bool,
}

impl<'a> Collect<'a> {
    fn new(abort: &'a CancellationToken, budget: Option<&'a AtomicUsize>, limit: usize) -> Self {
        Collect {
            abort,
            budget,
            limit,
            count: 0,
            lines: Vec::new(),
            keep: true,
        }
    }

    /// Takes `n` bytes from the shared budget, if there are that many left.
    fn take_budget(&self, n: usize) -> bool {
        match self.budget {
            None => true,
            Some(budget) => budget
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| left.checked_sub(n))
                .is_ok(),
        }
    }
}

impl Sink for Collect<'_> {
    type Error = io::Error;

    fn matched(&mut self, _searcher: &Searcher, found: &SinkMatch<'_>) -> Result<bool, io::Error> {
        if self.abort.is_cancelled() {
            return Ok(false);
        }
        self.count += 1;
        if self.keep {
            let text = line_text(found.bytes());
            if self.take_budget(text.len()) {
                self.lines.push((found.line_number().unwrap_or(0), text));
            } else {
                self.keep = false;
                self.lines = Vec::new();
            }
        }
        Ok(self.lines.len() < self.limit)
    }
}

/// A matched line for display: terminator removed, invalid UTF-8 replaced,
/// very long lines cut.
fn line_text(bytes: &[u8]) -> String {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    let text = String::from_utf8_lossy(bytes);
    if text.chars().count() > MAX_LINE_CHARS {
        format!(
            "{} [line cut at {MAX_LINE_CHARS} characters]",
            shorten(&text, MAX_LINE_CHARS)
        )
    } else {
        text.into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_without_slash_matches_names_at_any_depth() {
        let f = FileFilter::new("*.rs").unwrap();
        assert!(f.accepts(Path::new("/p/src/deep/a.rs"), Path::new("/p")));
        assert!(!f.accepts(Path::new("/p/src/a.ts"), Path::new("/p")));
        let f = FileFilter::new("src/**/*.rs").unwrap();
        assert!(f.accepts(Path::new("/p/src/deep/a.rs"), Path::new("/p")));
        assert!(!f.accepts(Path::new("/p/other/a.rs"), Path::new("/p")));
    }

    #[test]
    fn long_lines_are_cut_and_terminators_dropped() {
        assert_eq!(line_text(b"abc\r\n"), "abc");
        let long = "x".repeat(MAX_LINE_CHARS + 10);
        assert!(line_text(long.as_bytes()).ends_with("[line cut at 400 characters]"));
    }
}
