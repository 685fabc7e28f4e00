//! An external agent's permission request that carries a diff, made fit for
//! mia's review (`lua/mia/review.lua`): the agent's path and texts are
//! outside input, so what crosses into Neovim is bounded here and the
//! review is told what it is looking at (`_meta.mia`): the path as the user
//! knows it, whether it lies outside the project, whether the texts were
//! cut, and whether the old side came from the file on disk.
//!
//! The options and the answer are untouched: the user still picks one of
//! the agent's own options, and the agent writes the file with its own
//! tools, so cutting what is *shown* never changes what is accepted.

use std::path::Path;

use serde_json::{json, Map, Value};

use crate::tools::paths;

/// Most bytes of each side of a diff shown in the review.
pub const SHOWN_BYTES: usize = 256 * 1024;
/// Most lines of each side of a diff shown in the review.
pub const SHOWN_LINES: usize = 5_000;
/// Largest file read from disk to stand in for a missing `oldText`, or to
/// tell whether `oldText` is the whole file.
const MAX_DISK_BYTES: u64 = 16 * 1024 * 1024;
/// Most characters of the path shown (its end is kept: the file name).
const MAX_SUBJECT_CHARS: usize = 200;

/// The first [`SHOWN_LINES`] lines of `text`, at most [`SHOWN_BYTES`] (cut
/// at a character boundary), or `None` when all of it fits.
pub fn cut(text: &str) -> Option<String> {
    let mut end = 0;
    for (n, line) in text.split_inclusive('\n').enumerate() {
        if n == SHOWN_LINES || end + line.len() > SHOWN_BYTES {
            break;
        }
        end += line.len();
    }
    if end == text.len() {
        return None;
    }
    if end == 0 {
        // one line longer than the bound: cut inside it
        end = SHOWN_BYTES.min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
    }
    Some(text[..end].to_string())
}

/// Lines of `text` as an editor counts them (a final line without "\n" counts).
fn line_count(text: &str) -> usize {
    text.split_inclusive('\n').count()
}

/// At most [`MAX_SUBJECT_CHARS`] characters of `name`, its end kept.
fn bounded_name(name: &str) -> String {
    let n = name.chars().count();
    if n <= MAX_SUBJECT_CHARS {
        return name.to_string();
    }
    let tail: String = name.chars().skip(n - (MAX_SUBJECT_CHARS - 1)).collect();
    format!("…{tail}")
}

/// The file's text when it is a regular file of at most [`MAX_DISK_BYTES`].
fn read_small(path: &Path) -> Option<String> {
    crate::tools::paths::read_regular(path, MAX_DISK_BYTES)
        .ok()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// Prepares permission request `payload` (ACP's `session/request_permission`
/// params as JSON) whose tool call carries a diff: fills its first diff's
/// missing `oldText` from the file when it exists inside `root`, cuts every
/// diff's texts to the shown bounds, drops the tool call's raw input and
/// output (they repeat the texts, and the review never reads them), and
/// returns what the review shows about it, for `_meta.mia`. `None` (the
/// payload untouched) when no content entry is a diff. Reads the disk: call
/// it off the runtime's worker threads.
pub fn prepare(payload: &mut Value, root: &Path) -> Option<Map<String, Value>> {
    let content = payload.pointer_mut("/toolCall/content")?.as_array_mut()?;
    let first = content.iter().position(|c| {
        c.get("type").and_then(Value::as_str) == Some("diff")
            && c.get("path").and_then(Value::as_str).is_some()
            && c.get("newText").and_then(Value::as_str).is_some()
    })?;
    let mut meta = Map::new();
    let path = content[first]["path"].as_str().unwrap_or_default().to_string();
    let place = paths::canonicalize(root, &path).ok().filter(|c| c.inside);
    match &place {
        Some(c) => {
            meta.insert("subject".into(), json!(bounded_name(&c.subject)));
            let on_disk = read_small(&c.physical);
            let old = content[first]
                .get("oldText")
                .and_then(Value::as_str)
                .map(str::to_string);
            match (old, on_disk) {
                (None, Some(disk)) => {
                    content[first]["oldText"] = json!(disk);
                    meta.insert("old_from_disk".into(), json!(true));
                }
                (Some(old), Some(disk)) if old != disk => {
                    meta.insert("fragment".into(), json!(true));
                }
                _ => {}
            }
        }
        None => {
            meta.insert("subject".into(), json!(bounded_name(&path)));
            meta.insert("outside".into(), json!(true));
            let root: std::path::PathBuf = root.components().collect(); // no trailing "/"
            meta.insert("root".into(), json!(bounded_name(&root.display().to_string())));
        }
    }
    for (i, entry) in content.iter_mut().enumerate() {
        if entry.get("type").and_then(Value::as_str) != Some("diff") {
            continue;
        }
        let mut sizes = Map::new();
        for (key, side) in [("oldText", "old"), ("newText", "new")] {
            let Some(text) = entry.get(key).and_then(Value::as_str) else {
                continue;
            };
            if let Some(shown) = cut(text) {
                sizes.insert(format!("{side}_bytes"), json!(text.len()));
                sizes.insert(format!("{side}_lines"), json!(line_count(text)));
                sizes.insert(format!("{side}_shown_lines"), json!(line_count(&shown)));
                entry[key] = json!(shown);
            }
        }
        if i == first && !sizes.is_empty() {
            meta.insert("cut".into(), Value::Object(sizes));
        }
        if let Some(p) = entry.get("path").and_then(Value::as_str) {
            if p.chars().count() > MAX_SUBJECT_CHARS {
                entry["path"] = json!(bounded_name(p));
            }
        }
    }
    if let Some(tc) = payload.get_mut("toolCall").and_then(Value::as_object_mut) {
        tc.remove("rawInput");
        tc.remove("rawOutput");
    }
    Some(meta)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(path: &str, old: Value, new: &str) -> Value {
        json!({
            "sessionId": "s",
            "toolCall": {
                "toolCallId": "t",
                "rawInput": { "content": new },
                "content": [{ "type": "diff", "path": path, "oldText": old, "newText": new }],
            },
            "options": [],
        })
    }

    #[test]
    fn small_texts_are_not_cut_and_long_ones_keep_whole_lines() {
        assert_eq!(cut("a\nb\n"), None);
        let many: String = (0..SHOWN_LINES + 10).map(|i| format!("{i}\n")).collect();
        let shown = cut(&many).expect("cut");
        assert_eq!(line_count(&shown), SHOWN_LINES);
        assert!(shown.ends_with('\n'));
        let long_line = "é".repeat(SHOWN_BYTES); // 2 bytes each, one line
        let shown = cut(&long_line).expect("cut");
        assert!(shown.len() <= SHOWN_BYTES && shown.chars().all(|c| c == 'é'));
    }

    #[test]
    fn a_missing_old_text_comes_from_the_file_and_a_fragment_is_flagged() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("a.txt"), "one\ntwo\n").expect("write");
        let mut p = request(
            &dir.path().join("a.txt").display().to_string(),
            Value::Null,
            "one\nTWO\n",
        );
        let meta = prepare(&mut p, dir.path()).expect("a diff");
        assert_eq!(meta["subject"], "a.txt");
        assert_eq!(meta["old_from_disk"], true);
        assert_eq!(p["toolCall"]["content"][0]["oldText"], "one\ntwo\n");
        assert!(p["toolCall"].get("rawInput").is_none());

        let mut p = request("a.txt", json!("two\n"), "TWO\n");
        let meta = prepare(&mut p, dir.path()).expect("a diff");
        assert_eq!(meta["fragment"], true);
        assert!(meta.get("outside").is_none());
    }

    #[test]
    fn a_path_outside_the_project_is_named_as_given_and_never_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut p = request("/etc/passwd", Value::Null, "x\n");
        let meta = prepare(&mut p, dir.path()).expect("a diff");
        assert_eq!(meta["outside"], true);
        assert_eq!(meta["subject"], "/etc/passwd");
        assert_eq!(p["toolCall"]["content"][0]["oldText"], Value::Null);
        let long = format!("/{}", "d/".repeat(500));
        let mut p = request(&long, Value::Null, "x\n");
        let meta = prepare(&mut p, dir.path()).expect("a diff");
        assert!(meta["subject"].as_str().expect("str").chars().count() <= MAX_SUBJECT_CHARS);
    }

    #[test]
    fn a_huge_new_text_is_cut_and_its_full_size_reported() {
        let dir = tempfile::tempdir().expect("tempdir");
        let big = format!("{}\n", "x".repeat(100)).repeat(20_000);
        let mut p = request("new.txt", Value::Null, &big);
        let meta = prepare(&mut p, dir.path()).expect("a diff");
        let cut = &meta["cut"];
        assert_eq!(cut["new_bytes"], big.len());
        assert_eq!(cut["new_lines"], 20_000);
        let shown = p["toolCall"]["content"][0]["newText"].as_str().expect("str");
        assert!(shown.len() <= SHOWN_BYTES);
        assert_eq!(cut["new_shown_lines"], line_count(shown));
    }

    #[test]
    fn a_request_without_a_diff_is_left_alone() {
        let mut p = json!({ "toolCall": { "content": [{ "type": "content" }] } });
        let before = p.clone();
        assert!(prepare(&mut p, Path::new("/")).is_none());
        assert_eq!(p, before);
    }
}
