//! The project as git sees it (`.gitignore`, `.ignore`, hidden files kept,
//! `.git` skipped; works without a repository), scanned around a command
//! so the files it changed can be put back.
//!
//! A scan reads regular files only, never through a link (a link is kept
//! as the link it is), never in another file system than the project's
//! (a mount inside it is named as not covered) nor in a virtual one
//! (`/proc`, `/sys`); it stops when the call is cancelled, and within the
//! checkpoints' size limit. What it could not keep is said, never dropped.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use super::{Change, Checkpoints};

/// How many more files a scan looks at (size and time only) than it keeps
/// the content of (`max_scan_files`): past the kept ones a change is still
/// seen, and named as not covered.
const LOOK_FACTOR: usize = 10;

/// A file's size and time, the cheap test for "changed".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub len: u64,
    pub modified: Option<SystemTime>,
    /// A symbolic link (its own size and time), not a file.
    pub link: bool,
}

/// A file seen by a scan, with its kept content (or, for a link, its target).
#[derive(Debug, Clone)]
pub struct Known {
    pub stamp: Stamp,
    pub object: Option<String>,
    pub link: Option<PathBuf>,
    pub skipped: Option<String>,
}

/// Objects already stored for a session's files, by path: a file whose
/// stamp has not changed is not read again.
pub type ScanCache = HashMap<PathBuf, Known>;

/// The project's files before a command.
#[derive(Debug, Default)]
pub struct Scan {
    pub files: BTreeMap<PathBuf, Known>,
    /// True when the scan stopped at its file limit.
    pub truncated: bool,
    /// True when the call was cancelled while the scan ran.
    pub cancelled: bool,
    /// What the scan does not cover, one sentence each.
    pub uncovered: Vec<String>,
}

/// `data_dir` as the walk of `root` spells it, when it lies inside `root`.
fn inside(root: &Path, data_dir: &Path) -> Option<PathBuf> {
    let canon_root = std::fs::canonicalize(root).ok()?;
    let canon_data = std::fs::canonicalize(data_dir).ok()?;
    let rel = canon_data.strip_prefix(&canon_root).ok()?;
    Some(root.join(rel))
}

/// The kind of virtual file system `path` lies on (files there are made up
/// by the kernel: reading one may block, `/proc/kmsg`, or leak, `environ`).
fn virtual_fs(path: &Path) -> Option<&'static str> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `c` is a valid C string and `buf` a valid statfs to fill.
    let mut buf: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut buf) } != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)]
    let kind = match buf.f_type as i64 {
        0x9fa0 => "proc",
        0x6265_6572 => "sysfs",
        0x6462_6720 => "debugfs",
        0x7472_6163 => "tracefs",
        0x0027_e0eb | 0x6367_7270 => "cgroup",
        0x7363_6673 => "securityfs",
        0xcafe_4a11 => "bpf",
        0x1cd1 => "devpts",
        0x6265_6570 => "configfs",
        0x6165_676c => "pstore",
        0xde5e_81e4 => "efivarfs",
        0x6573_5543 => "fusectl",
        _ => return None,
    };
    Some(kind)
}

/// What a walk of the project found.
#[derive(Debug, Default)]
struct Walked {
    /// Regular files and symbolic links.
    files: Vec<(PathBuf, Stamp)>,
    truncated: bool,
    cancelled: bool,
    uncovered: Vec<String>,
}

/// The project's regular files and links, without `.git`, without mia's own
/// data directory (its snapshots and store are not the project's), without
/// other file systems; at most `max_scan_files × LOOK_FACTOR` of them.
/// `cancelled` is asked once per entry.
fn walk(root: &Path, store: &Checkpoints, cancelled: &dyn Fn() -> bool) -> Walked {
    let mut out = Walked::default();
    if let Some(kind) = virtual_fs(root) {
        out.uncovered.push(format!(
            "{} is on the virtual file system {kind}: its files are not scanned, so commands' changes there are \
             not kept",
            super::bytes_path::shown(root)
        ));
        return out;
    }
    let limit = store.settings.max_scan_files.saturating_mul(LOOK_FACTOR);
    let data = inside(root, store.data_dir());
    let root_dev = std::fs::metadata(root).map(|m| m.dev()).ok();
    let mounts: Arc<Mutex<Vec<PathBuf>>> = Arc::default();
    let seen_mounts = mounts.clone();
    let walker = ignore::WalkBuilder::new(root)
        .hidden(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(move |e| {
            if e.file_name() == ".git" || data.as_deref() == Some(e.path()) {
                return false;
            }
            if e.depth() > 0 && e.file_type().is_some_and(|t| t.is_dir()) {
                let dev = e.metadata().map(|m| m.dev()).ok();
                if dev.is_some() && dev != root_dev {
                    seen_mounts
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(e.path().to_path_buf());
                    return false;
                }
            }
            true
        })
        .build();
    for entry in walker.flatten() {
        if cancelled() {
            out.cancelled = true;
            break;
        }
        let Some(kind) = entry.file_type() else { continue };
        if !(kind.is_file() || kind.is_symlink()) {
            continue;
        }
        if out.files.len() >= limit {
            out.truncated = true;
            out.uncovered.push(format!(
                "the scan stopped after {limit} files (10 × checkpoints.max_scan_files): changes to the \
                 project's other files are not kept"
            ));
            break;
        }
        // Without following links this is the entry's own lstat.
        let Ok(meta) = entry.metadata() else { continue };
        out.files.push((
            entry.path().to_path_buf(),
            Stamp {
                len: meta.len(),
                modified: meta.modified().ok(),
                link: kind.is_symlink(),
            },
        ));
    }
    for dir in mounts.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        out.uncovered.push(format!(
            "{} is another file system mounted in the project: changes there are not kept",
            super::bytes_path::shown(dir)
        ));
    }
    out
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
/// kept as its blob), up to `max_scan_files` files and while the
/// checkpoints stay within `max_bytes`; the files past either limit are
/// seen (a change to them is named) but not kept. Stops when `cancelled`.
pub fn before(root: &Path, store: &Checkpoints, cache: &mut ScanCache, cancelled: &dyn Fn() -> bool) -> Scan {
    let walked = walk(root, store, cancelled);
    let blobs = if walked
        .files
        .iter()
        .any(|(p, s)| cache.get(p).is_none_or(|k| k.stamp != *s))
    {
        git_blobs(root)
    } else {
        HashMap::new()
    };
    let mut scan = Scan {
        truncated: walked.truncated,
        cancelled: walked.cancelled,
        uncovered: walked.uncovered,
        ..Default::default()
    };
    let settings = &store.settings;
    // Room left under `max_bytes`, counted once a file must be copied.
    let mut room: Option<u64> = None;
    let (mut kept, mut past_limit, mut full) = (0usize, 0usize, 0usize);
    for (path, stamp) in walked.files {
        if scan.cancelled || cancelled() {
            scan.cancelled = true;
            break;
        }
        if !stamp.link {
            kept += 1;
        }
        let known = match cache.get(&path) {
            Some(k) if k.stamp == stamp => k.clone(),
            _ => {
                let mut k = Known {
                    stamp,
                    object: None,
                    link: None,
                    skipped: None,
                };
                if stamp.link {
                    match std::fs::read_link(&path) {
                        Ok(target) => k.link = Some(target),
                        Err(e) => k.skipped = Some(format!("its link could not be read before the command ({e})")),
                    }
                } else if let Some(blob) = blobs.get(&path) {
                    k.object = Some(format!("git:{blob}"));
                } else if kept > settings.max_scan_files {
                    past_limit += 1;
                    k.skipped = Some(format!(
                        "its content was not kept: a scan keeps at most {} files (raise checkpoints.max_scan_files)",
                        settings.max_scan_files
                    ));
                } else if stamp.len > settings.max_file_bytes {
                    k.skipped = Some(format!(
                        "it is bigger ({} bytes) than checkpoints keep ({} bytes; raise checkpoints.max_file_kb)",
                        stamp.len, settings.max_file_bytes
                    ));
                } else {
                    let left =
                        *room.get_or_insert_with(|| settings.max_bytes.saturating_sub(store.objects.total_bytes()));
                    if stamp.len > left {
                        full += 1;
                        k.skipped = Some(format!(
                            "its content was not kept: checkpoints are full ({} MB, checkpoints.max_mb)",
                            settings.max_bytes / (1024 * 1024)
                        ));
                    } else {
                        match crate::tools::paths::read_regular_nofollow(&path, settings.max_file_bytes)
                            .and_then(|b| store.keep(&b))
                        {
                            Ok((object, skipped)) => {
                                room = Some(left.saturating_sub(stamp.len));
                                k.object = object;
                                k.skipped = skipped;
                            }
                            Err(e) => k.skipped = Some(format!("it could not be read before the command ({e})")),
                        }
                    }
                }
                // Only what a later scan would find the same: a limit may have room then.
                if k.object.is_some() || k.link.is_some() {
                    cache.insert(path.clone(), k.clone());
                }
                k
            }
        };
        scan.files.insert(path, known);
    }
    if past_limit > 0 {
        scan.uncovered.push(format!(
            "{past_limit} files past the first {} were not kept (checkpoints.max_scan_files)",
            settings.max_scan_files
        ));
    }
    if full > 0 {
        scan.uncovered.push(format!(
            "{full} files were not kept: checkpoints are full ({} MB, checkpoints.max_mb)",
            settings.max_bytes / (1024 * 1024)
        ));
    }
    scan
}

/// Files that differ from `before`: changed stamp (or kind), new, gone, or
/// replaced by something that is neither a file nor a link.
pub fn changes(root: &Path, before: &Scan, store: &Checkpoints) -> Vec<(PathBuf, Change)> {
    let now = walk(root, store, &|| false);
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (path, stamp) in now.files {
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
        if seen.contains(path) {
            continue;
        }
        // Never `exists()`: it follows a link.
        match path.symlink_metadata() {
            Err(_) => out.push((path.clone(), Change::Deleted)),
            Ok(_) if now.truncated => {}
            Ok(_) => out.push((path.clone(), Change::Modified)),
        }
    }
    out
}
