//! `edit_file`: exact string replacement in an existing file.
//!
//! The match must be exact and, unless `replace_all` is set, unique: a model
//! that guessed wrong gets told how (no match, several matches, a near miss in
//! whitespace) instead of an edit in the wrong place. Files are edited as
//! bytes, so content in any encoding outside the replaced text survives.

use futures_util::future::BoxFuture;
use memchr::memmem;
use serde_json::{json, Value};

use super::{object_schema, optional_bool, path_subject, prop, required_str, resolve, shown};
use crate::tools::landing::{self, Proposal};
use crate::tools::{Tool, ToolContext, ToolEffect, ToolOutput};

/// Replaces `old_string` with `new_string` in a file.
pub struct EditFile;

const NAME: &str = "edit_file";

/// Lines of context shown around an edit, above and below.
const SNIPPET_CONTEXT: usize = 2;
/// Most lines of the edited region shown back to the model.
const SNIPPET_MAX_LINES: usize = 40;

impl Tool for EditFile {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        "Replace an exact piece of text in an existing file. `old_string` must match the file exactly (including \
         indentation and line breaks, without read_file's line-number prefixes) and only once, unless `replace_all` \
         is true. Include enough surrounding lines to make it unique."
    }

    fn parameters(&self) -> Value {
        object_schema(
            json!({
                "path": prop("string", "File to edit, relative to the project root (or absolute inside it)."),
                "old_string": prop("string", "The exact text to replace."),
                "new_string": prop("string", "The text to put in its place (must differ from old_string)."),
                "replace_all": prop("boolean", "Replace every occurrence instead of requiring exactly one. Defaults to false."),
            }),
            &["path", "old_string", "new_string"],
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

/// The edit applied to the file as it is (the buffer that holds it, unsaved
/// changes included, or the disk); landing reviews and writes it.
async fn propose(args: &Value, ctx: &ToolContext) -> Result<(Proposal, ToolOutput), ToolOutput> {
    let requested = required_str(NAME, args, "path")?;
    checked_args(args)?;
    let path = resolve(ctx, requested)?;
    let name = shown(ctx, &path);
    let original = super::current_content(ctx, &path, &name, NAME)
        .await?
        .ok_or_else(|| ToolOutput::error(format!("`{name}` does not exist; to create it, use write_file")))?;
    let (edited, accepted) = plan(args, &name, &original)?;
    Ok((
        Proposal {
            path,
            name,
            before: Some(original),
            after: edited,
        },
        accepted,
    ))
}

/// Checks the arguments that do not depend on the file.
fn checked_args(args: &Value) -> Result<(&str, &str, bool), ToolOutput> {
    let old = required_str(NAME, args, "old_string")?;
    let new = required_str(NAME, args, "new_string")?;
    let replace_all = optional_bool(args, "replace_all").unwrap_or(false);
    if old.is_empty() {
        return Err(ToolOutput::error(
            "`old_string` is empty; give the text to replace (to create a file or replace all of it, use write_file)",
        ));
    }
    if old == new {
        return Err(ToolOutput::error(
            "`old_string` and `new_string` are identical, so there is nothing to change; pass the new text in `new_string`",
        ));
    }
    Ok((old, new, replace_all))
}

/// The edited bytes of `original` and what the model is told.
fn plan(args: &Value, name: &str, original: &[u8]) -> Result<(Vec<u8>, ToolOutput), ToolOutput> {
    let (old, new, replace_all) = checked_args(args)?;
    let positions: Vec<usize> = memmem::find_iter(original, old.as_bytes()).collect();
    match positions.len() {
        0 => return Err(ToolOutput::error(no_match_message(name, original, old))),
        n if n > 1 && !replace_all => {
            return Err(ToolOutput::error(format!(
                "`old_string` occurs {n} times in `{name}`; include more surrounding lines so it matches exactly \
                 once, or set `replace_all` to true to replace all {n}"
            )));
        }
        _ => {}
    }
    let positions = if replace_all { &positions[..] } else { &positions[..1] };
    let edited = replace_at(original, positions, old.len(), new.as_bytes());

    let count = positions.len();
    let (added, removed) = line_delta(old, new);
    let (added, removed) = (added * count, removed * count);
    let times = if count == 1 {
        "1 occurrence".to_string()
    } else {
        format!("{count} occurrences")
    };
    let first_line = line_of(original, positions[0]);
    let mut content = format!("Edited `{name}`: replaced {times} (+{added} −{removed} lines).");
    content.push_str(&format!(
        "\nThe first edited region now reads:\n{}",
        snippet(&edited, first_line, new)
    ));
    let out = ToolOutput::ok(content).with_summary(format!("✏ edited {name} (+{added} −{removed} lines)"));
    Ok((edited, out))
}

/// `original` with `old_len` bytes at each of `positions` (ascending, not
/// overlapping) replaced by `new`.
fn replace_at(original: &[u8], positions: &[usize], old_len: usize, new: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(original.len() + positions.len() * new.len());
    let mut from = 0;
    for &at in positions {
        out.extend_from_slice(&original[from..at]);
        out.extend_from_slice(new);
        from = at + old_len;
    }
    out.extend_from_slice(&original[from..]);
    out
}

/// Lines added and removed by replacing `old` with `new` once: both split into
/// lines, minus the lines they share at the start and at the end.
fn line_delta(old: &str, new: &str) -> (usize, usize) {
    let a: Vec<&str> = old.split('\n').collect();
    let b: Vec<&str> = new.split('\n').collect();
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..]
        .iter()
        .rev()
        .zip(b[prefix..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    (b.len() - prefix - suffix, a.len() - prefix - suffix)
}

/// 1-based line number of byte offset `at`.
fn line_of(bytes: &[u8], at: usize) -> usize {
    memchr::memchr_iter(b'\n', &bytes[..at]).count() + 1
}

/// The lines from `first_line` covering `new`, with a little context, numbered
/// like read_file's output.
fn snippet(edited: &[u8], first_line: usize, new: &str) -> String {
    let text = String::from_utf8_lossy(edited);
    let new_lines = new.split('\n').count();
    let start = first_line.saturating_sub(SNIPPET_CONTEXT).max(1);
    let end = first_line + new_lines - 1 + SNIPPET_CONTEXT;
    let wanted = (end + 1 - start).min(SNIPPET_MAX_LINES);
    text.lines()
        .enumerate()
        .skip(start - 1)
        .take(wanted)
        .map(|(i, line)| format!("{:>6}\t{}", i + 1, line.strip_suffix('\r').unwrap_or(line)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Why `old` matched nothing, with the most likely cause when one is visible.
fn no_match_message(name: &str, original: &[u8], old: &str) -> String {
    let base = format!("`old_string` was not found in `{name}`");
    if old.contains('\n')
        && !old.contains("\r\n")
        && memmem::find(original, old.replace('\n', "\r\n").as_bytes()).is_some()
    {
        return format!(
            "{base}: the file uses Windows line endings (\\r\\n) and old_string uses \\n; include the \\r before each \
             line break in old_string and new_string"
        );
    }
    if has_line_number_prefixes(old) {
        return format!(
            "{base}: old_string seems to include read_file's line-number prefixes; copy only the text after the tab"
        );
    }
    let text = String::from_utf8_lossy(original);
    if let Some(line) = whitespace_insensitive_match(&text, old) {
        return format!(
            "{base}, but a match that differs only in whitespace (indentation, trailing spaces or line endings) starts \
             at line {line}; read the file again and copy old_string exactly"
        );
    }
    format!("{base}; read the file again (it may have changed) and copy the text exactly, including whitespace")
}

/// Whether every non-empty line of `s` starts like a read_file line (`   12\t`).
fn has_line_number_prefixes(s: &str) -> bool {
    let mut lines = s.lines().filter(|l| !l.trim().is_empty()).peekable();
    lines.peek().is_some()
        && lines.all(|l| {
            let rest = l.trim_start_matches(' ');
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            digits > 0 && rest[digits..].starts_with('\t')
        })
}

/// The 1-based line where `needle`'s lines appear in `text` when each line is
/// compared with surrounding whitespace trimmed.
fn whitespace_insensitive_match(text: &str, needle: &str) -> Option<usize> {
    let wanted: Vec<&str> = needle.lines().map(str::trim).collect();
    let first = wanted.iter().position(|l| !l.is_empty())?;
    let last = wanted.iter().rposition(|l| !l.is_empty())?;
    let wanted = &wanted[first..=last];
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    if wanted.len() == 1 {
        // A single line may be part of a longer one.
        return lines.iter().position(|l| l.contains(wanted[0])).map(|i| i + 1);
    }
    lines.windows(wanted.len()).position(|w| w == wanted).map(|i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_delta_counts_only_changed_lines() {
        assert_eq!(line_delta("foo", "bar"), (1, 1));
        assert_eq!(line_delta("a\nb\nc", "a\nB\nB2\nc"), (2, 1));
        assert_eq!(line_delta("x\n", "x\ny\n"), (1, 0));
    }

    #[test]
    fn replacements_happen_at_every_given_position() {
        assert_eq!(replace_at(b"a-b-c", &[1, 3], 1, b"+="), b"a+=b+=c".to_vec());
    }

    #[test]
    fn near_misses_are_explained() {
        let crlf = no_match_message("a.txt", b"one\r\ntwo\r\n", "one\ntwo");
        assert!(crlf.contains("Windows line endings"), "{crlf}");
        let numbered = no_match_message("a.txt", b"one\ntwo\n", "     1\tone\n     2\ttwo");
        assert!(numbered.contains("line-number prefixes"), "{numbered}");
        let indented = no_match_message("a.txt", b"x\n    fn a() {\n        b();\n", "fn a() {\n  b();");
        assert!(indented.contains("line 2"), "{indented}");
        let missing = no_match_message("a.txt", b"x\n", "nothing");
        assert!(
            missing.contains("was not found in `a.txt`; read the file again"),
            "{missing}"
        );
    }

    #[test]
    fn snippet_shows_the_edit_with_context() {
        let s = snippet(b"1\n2\n3\nNEW\n5\n6\n7\n", 4, "NEW");
        assert_eq!(s, "     2\t2\n     3\t3\n     4\tNEW\n     5\t5\n     6\t6");
    }
}
