//! The project as git sees it (`.gitignore`, `.ignore`, hidden files kept,
//! `.git` skipped; works without a repository), scanned around a command
//! so the files it changed can be put back.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::{Change, Checkpoints};

/// A file's size and time, the cheap test for "changed".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub len: u64,
    pub modified: Option<SystemTime>,
}

/// A file seen by a scan, with its kept content.
#[derive(Debug, Clone)]
pub struct Known {
    pub stamp: Stamp,
    pub object: Option<String>,
    pub skipped: Option<String>,
}

/// Objects already stored for a session's files, by path: a file whose
/// stamp has not changed is not read again.
pub type ScanCache = HashMap<PathBuf, Known>;

/// The project's files before a command.
#[derive(Debug, Default)]
pub struct Scan {
    pub files: BTreeMap<PathBuf, Known>,
    /// True when the scan stopped at `max_scan_files`.
    pub truncated: bool,
}

/// `data_dir` as the walk of `root` spells it, when it lies inside `root`.
fn inside(root: &Path, data_dir: &Path) -> Option<PathBuf> {
    let canon_root = std::fs::canonicalize(root).ok()?;
    let canon_data = std::fs::canonicalize(data_dir).ok()?;
    let rel = canon_data.strip_prefix(&canon_root).ok()?;
    Some(root.join(rel))
}

/// The project's files, without `.git` and without mia's own data directory
/// (its snapshots and store are not the project's).
fn walk(root: &Path, store: &Checkpoints) -> (Vec<(PathBuf, Stamp)>, bool) {
    let settings = &store.settings;
    let mut out = Vec::new();
    let data = inside(root, store.data_dir());
    let walker = ignore::WalkBuilder::new(root)
        .hidden(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(move |e| e.file_name() != ".git" && data.as_deref() != Some(e.path()))
        .build();
    for entry in walker.flatten() {
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        if out.len() >= settings.max_scan_files {
            return (out, true);
        }
        let Ok(meta) = entry.metadata() else { continue };
        out.push((
            entry.path().to_path_buf(),
            Stamp {
                len: meta.len(),
                modified: meta.modified().ok(),
            },
        ));
    }
    (out, false)
}

/// The blobs git already holds for the project's tracked files whose work
/// tree content is the index's (`git diff-files` says unchanged): path →
/// blob id. Their snapshot is the blob (`git:<id>`), so the first command of
/// a session does not copy the whole project. Empty without git, or when
/// git may rewrite content between blob and file (`core.autocrlf`, a
/// `.gitattributes`), where only a copy is faithful.
fn git_blobs(root: &Path) -> HashMap<PathBuf, String> {
    let git = |args: &[&str]| -> Option<Vec<u8>> {
        // A project's own git config must not run anything (core.fsmonitor, filters, …).
        let out = crate::git::command(root)
            .ok()?
            .args(args)
            .stderr(std::process::Stdio::null())
            .output()
            .ok()?;
        out.status.success().then_some(out.stdout)
    };
    let mut blobs = HashMap::new();
    let Some(top) = git(&["rev-parse", "--show-toplevel"]) else {
        return blobs;
    };
    let top = PathBuf::from(String::from_utf8_lossy(&top).trim_end_matches('\n'));
    let autocrlf = git(&["config", "--get", "core.autocrlf"]).unwrap_or_default();
    if !matches!(String::from_utf8_lossy(&autocrlf).trim(), "" | "false") {
        return blobs;
    }
    let (Some(listed), Some(dirty)) = (
        git(&["ls-files", "--stage", "-z", "--full-name", ":/"]),
        git(&["diff-files", "--name-only", "-z", "--no-renames", ":/"]),
    ) else {
        return blobs;
    };
    let dirty: std::collections::HashSet<&[u8]> = dirty.split(|b| *b == 0).collect();
    for entry in listed.split(|b| *b == 0) {
        // "<mode> <blob> <stage>\t<path>"
        let Some(tab) = entry.iter().position(|b| *b == b'\t') else {
            continue;
        };
        let (head, path) = (&entry[..tab], &entry[tab + 1..]);
        if path.ends_with(b".gitattributes") {
            return HashMap::new();
        }
        let mut fields = head.split(|b| *b == b' ');
        let (Some(mode), Some(blob), Some(stage)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        // Regular files only (not links, not submodules), merged entries only.
        if !(mode == b"100644" || mode == b"100755") || stage != b"0" || dirty.contains(path) {
            continue;
        }
        let Ok(blob) = std::str::from_utf8(blob) else { continue };
        let Ok(path) = std::str::from_utf8(path) else { continue };
        blobs.insert(top.join(path), blob.to_string());
    }
    blobs
}

/// Scans the project and keeps every file's content (read only when its
/// stamp differs from the cache's; a tracked file git holds unchanged is
/// kept as its blob).
pub fn before(root: &Path, store: &Checkpoints, cache: &mut ScanCache) -> Scan {
    let (files, truncated) = walk(root, store);
    let blobs = if files.iter().any(|(p, s)| cache.get(p).is_none_or(|k| k.stamp != *s)) {
        git_blobs(root)
    } else {
        HashMap::new()
    };
    let mut scan = Scan {
        truncated,
        ..Default::default()
    };
    for (path, stamp) in files {
        let known = match cache.get(&path) {
            Some(k) if k.stamp == stamp => k.clone(),
            _ => {
                let (object, skipped) = if let Some(blob) = blobs.get(&path) {
                    (Some(format!("git:{blob}")), None)
                } else if stamp.len > store.settings.max_file_bytes {
                    (
                        None,
                        Some(format!(
                            "it is bigger ({} bytes) than checkpoints keep ({} bytes; raise checkpoints.max_file_kb)",
                            stamp.len, store.settings.max_file_bytes
                        )),
                    )
                } else {
                    match std::fs::read(&path).and_then(|b| store.keep(&b)) {
                        Ok(kept) => kept,
                        Err(e) => (None, Some(format!("it could not be read before the command ({e})"))),
                    }
                };
                let k = Known { stamp, object, skipped };
                cache.insert(path.clone(), k.clone());
                k
            }
        };
        scan.files.insert(path, known);
    }
    scan
}

/// Files that differ from `before`: changed stamp, new, or gone.
pub fn changes(root: &Path, before: &Scan, store: &Checkpoints) -> Vec<(PathBuf, Change)> {
    let (now, _) = walk(root, store);
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (path, stamp) in now {
        match before.files.get(&path) {
            Some(k) if k.stamp == stamp => {}
            Some(_) => out.push((path.clone(), Change::Modified)),
            // A scan cut short cannot tell new files from unscanned ones.
            None if before.truncated => {}
            None => out.push((path.clone(), Change::Created)),
        }
        seen.insert(path);
    }
    for path in before.files.keys() {
        if !seen.contains(path) && !path.exists() {
            out.push((path.clone(), Change::Deleted));
        }
    }
    out
}
