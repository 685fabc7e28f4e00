//! The newest source an in-tree build of the library was made from, for
//! `mia.core`'s refusal of a library older than its code (a `git pull`
//! without a rebuild). Done here rather than in Lua: on the first command
//! the Lua version took ~0.77 ms (reading and splitting cargo's dep-info
//! 0.23 ms, then ~115 stats through luv, which builds a table for each,
//! 0.54 ms); this takes ~0.25 ms, nearly all of it the stat calls. Like
//! the Lua loader did, it reads one small file and stats the sources.

use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

/// Largest dep-info file read (cargo's lists ~120 inputs in ~4 KB).
const MAX_DEP_INFO: u64 = 4 * 1024 * 1024;
/// How deep the walk of `src/` and `crates/` goes when there is no dep-info.
const MAX_DEPTH: usize = 16;

/// The part of a dep-info line after its target: after the first `:`
/// that follows an unescaped character and precedes a blank.
fn after_target(line: &str) -> Option<&str> {
    let b = line.as_bytes();
    (1..b.len())
        .find(|&i| b[i] == b':' && b[i - 1] != b'\\' && b.get(i + 1).is_some_and(u8::is_ascii_whitespace))
        .map(|i| &line[i + 1..])
}

/// The inputs cargo's dep-info `text` lists: `target: input input ...`
/// per line, with `\ ` for a space inside a path.
fn dep_info_inputs(text: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for rest in text.lines().filter_map(after_target) {
        let mut path = String::new();
        let mut chars = rest.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '\\' && chars.peek() == Some(&' ') {
                path.push(' ');
                chars.next();
            } else if c.is_whitespace() {
                if !path.is_empty() {
                    files.push(PathBuf::from(std::mem::take(&mut path)));
                }
            } else {
                path.push(c);
            }
        }
        if !path.is_empty() {
            files.push(PathBuf::from(path));
        }
    }
    files
}

/// The inputs the dep-info file next to `lib` lists, or None when there is
/// none (or it is unreadable, oversized or lists nothing).
fn dep_info(lib: &Path) -> Option<Vec<PathBuf>> {
    let d = lib.with_extension("d");
    if std::fs::metadata(&d).ok()?.len() >= MAX_DEP_INFO {
        return None;
    }
    let files = dep_info_inputs(&std::fs::read_to_string(&d).ok()?);
    (!files.is_empty()).then_some(files)
}

fn mtime_secs(path: &Path) -> Option<u64> {
    let modified = std::fs::metadata(path).ok()?.modified().ok()?;
    Some(modified.duration_since(UNIX_EPOCH).ok()?.as_secs())
}

/// Every `.rs` file under `dir` (symbolic links to directories are not followed).
fn rust_files(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            if depth < MAX_DEPTH {
                rust_files(&path, depth + 1, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The newest of the sources the library at `lib` was built from, as its
/// modification time in seconds and its path: the inputs cargo's dep-info
/// next to the library lists (so a change that does not rebuild the
/// library, such as a test dependency in Cargo.toml, does not count), else
/// every `.rs` file under `root/src` and `root/crates` (the workspace's
/// crates) and root's `Cargo.toml`, `Cargo.lock`
/// and `build.rs`; `root/lua/mia/version.lua` in both cases. None when
/// none of them exists.
pub(super) fn newest_source(root: &Path, lib: &Path) -> Option<(u64, PathBuf)> {
    let mut files = vec![root.join("lua/mia/version.lua")];
    match dep_info(lib) {
        Some(inputs) => files.extend(inputs),
        None => {
            files.extend(["Cargo.toml", "Cargo.lock", "build.rs"].map(|f| root.join(f)));
            rust_files(&root.join("src"), 0, &mut files);
            rust_files(&root.join("crates"), 0, &mut files);
        }
    }
    let mut newest: Option<(u64, PathBuf)> = None;
    for file in files {
        if let Some(t) = mtime_secs(&file) {
            if newest.as_ref().is_none_or(|(n, _)| t > *n) {
                newest = Some((t, file));
            }
        }
    }
    newest
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::{self, File, FileTimes};
    use std::time::{Duration, SystemTime};

    fn touch(path: &Path, secs_ago: u64) {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).unwrap();
        }
        let f = File::options().create(true).append(true).open(path).unwrap();
        let t = SystemTime::now() - Duration::from_secs(secs_ago);
        f.set_times(FileTimes::new().set_modified(t).set_accessed(t)).unwrap();
    }

    fn secs_ago(secs: u64) -> u64 {
        (SystemTime::now() - Duration::from_secs(secs))
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    #[test]
    fn dep_info_names_its_inputs_with_escaped_spaces() {
        let text =
            "/p/target/release/libmia_core.so: /p/build.rs /p/my\\ dir/src/lib.rs  /p/src/a.rs\n\n/p/src/a.rs:\n";
        assert_eq!(
            dep_info_inputs(text),
            ["/p/build.rs", "/p/my dir/src/lib.rs", "/p/src/a.rs"].map(PathBuf::from)
        );
        // An escaped colon is part of the target; a line without inputs adds none.
        assert_eq!(dep_info_inputs("a\\: b: c\nx:\n:y z\n"), [PathBuf::from("c")]);
        assert!(dep_info_inputs("").is_empty());
    }

    #[test]
    fn the_dep_info_decides_which_files_count() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path();
        let lib = root.join("target/release/libmia_core.so");
        touch(&lib, 100);
        touch(&root.join("src/lib.rs"), 300);
        touch(&root.join("src/deep/er/mod.rs"), 200);
        touch(&root.join("src/notes.txt"), 10);
        touch(&root.join("lua/mia/version.lua"), 400);
        // No dep-info: the newest `.rs` under src/ (other files do not count).
        let (t, path) = newest_source(root, &lib).unwrap();
        assert_eq!((t, path), (secs_ago(200), root.join("src/deep/er/mod.rs")));
        touch(&root.join("crates/engine/src/agent/mod.rs"), 100);
        assert_eq!(
            newest_source(root, &lib).unwrap().1,
            root.join("crates/engine/src/agent/mod.rs")
        );
        touch(&root.join("Cargo.toml"), 50);
        assert_eq!(newest_source(root, &lib).unwrap().1, root.join("Cargo.toml"));
        // With one, only what it lists (and version.lua): Cargo.toml no longer counts.
        fs::write(
            root.join("target/release/libmia_core.d"),
            format!("{}: {}\n", lib.display(), root.join("src/lib.rs").display()),
        )
        .unwrap();
        assert_eq!(newest_source(root, &lib).unwrap().1, root.join("src/lib.rs"));
        touch(&root.join("lua/mia/version.lua"), 5);
        assert_eq!(newest_source(root, &lib).unwrap().1, root.join("lua/mia/version.lua"));
    }

    #[test]
    fn nothing_found_is_none() {
        let root = tempfile::tempdir().unwrap();
        assert!(newest_source(root.path(), &root.path().join("libmia_core.so")).is_none());
    }
}
