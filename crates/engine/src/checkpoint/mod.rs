//! Checkpoints: before a turn first changes a file, its content is kept, so
//! `:Mia undo` can put the turn's files back (and a restore is itself a
//! checkpoint, so it can be undone too).
//!
//! Layout under `data_dir/checkpoints/`:
//! - `objects/ab/cdef…`: file contents named by their SHA-256, written once
//!   and shared by every session (content-addressed, deduplicated);
//! - `sessions/<session id>.jsonl`: one line per file a checkpoint covers
//!   ([`Entry`]), appended as the turn goes.
//!
//! Files changed by `bash` are found by scanning the project the way git
//! sees it (`.gitignore` honoured, with or without a repository) before and
//! after the command ([`TurnCheckpoint::scan`] / [`TurnCheckpoint::after_scan`]).
//! Everything here does blocking file I/O: callers run it on the blocking pool.

pub mod bytes_path;
mod objects;
mod scan;

use std::collections::{BTreeMap, HashSet};
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

pub use objects::Objects;
pub use scan::{Scan, ScanCache};

/// `setup({ checkpoints = … })`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(default)]
pub struct CheckpointSettings {
    /// Checkpoints older than this are pruned.
    pub max_age_days: u32,
    /// Snapshots beyond this total are pruned, oldest first.
    pub max_bytes: u64,
    /// Files bigger than this are not snapshotted (undo reports them).
    pub max_file_bytes: u64,
    /// Most files whose content a scan around a command keeps (it looks at
    /// ten times as many, so a change past them is named, not missed).
    pub max_scan_files: usize,
}

/// The defaults are the configuration's (`crate::config::CheckpointsConfig`).
impl Default for CheckpointSettings {
    fn default() -> Self {
        crate::config::CheckpointsConfig::default().into()
    }
}

/// Why a checkpoint could not be listed or restored.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("the session has no checkpoints to undo")]
    Nothing,
    #[error("`{0}` is not a session id")]
    BadSession(String),
    #[error("checkpoints are kept under data_dir, which is not set; set `data_dir` in setup()")]
    NoDataDir,
    #[error("the checkpoint journal {path} cannot be used ({source}); delete it to start over")]
    Journal { path: PathBuf, source: io::Error },
}

/// What a checkpoint entry's file went through after its snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    Modified,
    Created,
    Deleted,
}

/// Whether a checkpoint was taken by a turn or by a restore.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Turn,
    Restore,
}

/// One file of one checkpoint: its content before the change (`before`:
/// the object's name; `link`: it was a symbolic link to this target; both
/// `None` when the file did not exist), or why there is no snapshot
/// (`skipped`). An entry with `uncovered` is no file: it says what the
/// checkpoint does not cover (a scan cut short, a mount in the project).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub checkpoint: u64,
    pub turn: String,
    pub kind: Kind,
    pub prompt: String,
    pub created_ms: i64,
    #[serde(with = "bytes_path")]
    pub path: PathBuf,
    pub before: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "bytes_path::option")]
    pub link: Option<PathBuf>,
    pub change: Change,
    pub by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncovered: Option<String>,
    /// Not a change: how the checkpoint's turn (or restore) left the file,
    /// written when it ended, so undo can tell a later save from the turn's work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left: Option<Left>,
}

/// A file's identity as a turn left it: a later save changes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Left {
    pub exists: bool,
    pub len: u64,
    pub mtime_ns: i128,
    pub ino: u64,
}

impl Left {
    /// `path` as it is now (its own entry: a link is not followed).
    pub fn of(path: &Path) -> Left {
        use std::os::unix::fs::MetadataExt;
        match fs::symlink_metadata(path) {
            Ok(m) => Left {
                exists: true,
                len: m.len(),
                mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
                ino: m.ino(),
            },
            Err(_) => Left {
                exists: false,
                len: 0,
                mtime_ns: 0,
                ino: 0,
            },
        }
    }
}

/// A file as a snapshot keeps it: its content's object, or the target of
/// the link it is (never read through), or why it is not kept; all `None`
/// when it does not exist.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snap {
    pub object: Option<String>,
    pub link: Option<PathBuf>,
    pub skipped: Option<String>,
}

impl Snap {
    fn exists(&self) -> bool {
        self.object.is_some() || self.link.is_some()
    }
}

/// A checkpoint as `:Mia checkpoints` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct Listed {
    pub id: u64,
    pub turn: String,
    pub kind: Kind,
    pub prompt: String,
    pub created_ms: i64,
    pub files: Vec<ListedFile>,
    /// What the checkpoint does not cover, one sentence each.
    pub uncovered: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ListedFile {
    pub path: String,
    pub change: Change,
    pub by: String,
}

/// What `:Mia undo` did.
#[derive(Debug, Clone, Serialize)]
pub struct Restored {
    /// The checkpoint whose files were put back.
    pub checkpoint: u64,
    /// The restore's own checkpoint (undo it to get the files back).
    pub restore: u64,
    pub turn: String,
    pub restored: Vec<RestoredFile>,
    pub skipped: Vec<SkippedFile>,
    /// What the checkpoint did not cover, one sentence each.
    pub uncovered: Vec<String>,
    /// Restored files that changed after the checkpoint's turn ended (a
    /// save of the user's): their content then is in the restore checkpoint.
    #[serde(serialize_with = "shown_all")]
    pub changed_since: Vec<PathBuf>,
}

fn shown_all<S: serde::Serializer>(paths: &[PathBuf], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(paths.iter().map(|p| bytes_path::shown(p)))
}

/// Paths reach Lua as one line of text each ([`bytes_path::shown`]).
#[derive(Debug, Clone, Serialize)]
pub struct RestoredFile {
    #[serde(serialize_with = "bytes_path::serialize_shown")]
    pub path: PathBuf,
    pub deleted: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct SkippedFile {
    #[serde(serialize_with = "bytes_path::serialize_shown")]
    pub path: PathBuf,
    pub reason: String,
}

/// Session ids become file names: only what mia's ids are made of.
fn valid_session_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Why `path` cannot be restored safely: a directory on its way is now a
/// link (or cannot be resolved). `None`: its nearest existing directory is
/// where the path says it is.
fn linked_parent(path: &Path) -> Option<String> {
    let parent = path.parent()?;
    let existing = parent.ancestors().find(|d| d.symlink_metadata().is_ok())?;
    match fs::canonicalize(existing) {
        Ok(real) if real == existing => None,
        Ok(real) => Some(format!(
            "{} is now a link to {}; restore it by hand if that is intended",
            existing.display(),
            real.display()
        )),
        Err(e) => Some(format!("{} cannot be resolved ({e})", existing.display())),
    }
}

/// The checkpoints of every session under one data directory.
#[derive(Debug, Clone)]
pub struct Checkpoints {
    dir: PathBuf,
    pub objects: Objects,
    pub settings: CheckpointSettings,
    /// Configured API keys: a file holding one is not kept (the store never holds a secret).
    secrets: std::sync::Arc<[String]>,
}

impl Checkpoints {
    pub fn new(data_dir: &Path, settings: CheckpointSettings) -> Checkpoints {
        let dir = data_dir.join("checkpoints");
        Checkpoints {
            objects: Objects::new(dir.join("objects")),
            dir,
            settings,
            secrets: std::sync::Arc::from(Vec::new()),
        }
    }

    /// The same store, refusing to keep any file that holds one of `secrets`.
    pub fn with_secrets(mut self, secrets: Vec<String>) -> Checkpoints {
        self.secrets = secrets.into();
        self
    }

    /// The data directory the checkpoints live in: never scanned as part of a project.
    pub fn data_dir(&self) -> &Path {
        self.dir.parent().unwrap_or(&self.dir)
    }

    /// Stores a file's bytes, unless they hold a configured API key:
    /// (object, why not kept).
    pub fn keep(&self, bytes: &[u8]) -> io::Result<(Option<String>, Option<String>)> {
        let holds = |secret: &str| !secret.is_empty() && bytes.windows(secret.len()).any(|w| w == secret.as_bytes());
        if self.secrets.iter().any(|s| holds(s)) {
            return Ok((
                None,
                Some("it holds a configured API key, which checkpoints never keep".into()),
            ));
        }
        Ok((Some(self.objects.put(bytes)?), None))
    }

    fn journal_path(&self, session_id: &str) -> Result<PathBuf, CheckpointError> {
        if !valid_session_id(session_id) {
            return Err(CheckpointError::BadSession(session_id.chars().take(64).collect()));
        }
        Ok(self.dir.join("sessions").join(format!("{session_id}.jsonl")))
    }

    /// Every entry of a session, in the order they were written. Lines that
    /// cannot be read (a torn write) are skipped.
    pub fn entries(&self, session_id: &str) -> Result<Vec<Entry>, CheckpointError> {
        let path = self.journal_path(session_id)?;
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(CheckpointError::Journal { path, source }),
        };
        Ok(text
            .lines()
            .filter_map(|l| serde_json::from_str::<Entry>(l).ok())
            .collect())
    }

    fn append(&self, session_id: &str, entry: &Entry) -> Result<(), CheckpointError> {
        let path = self.journal_path(session_id)?;
        let journal = |source| CheckpointError::Journal {
            path: path.clone(),
            source,
        };
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(journal)?;
        }
        let mut line = serde_json::to_string(entry).map_err(|e| journal(io::Error::other(e)))?;
        line.push('\n');
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(journal)?;
        // One write of one line: concurrent appends do not interleave.
        file.write_all(line.as_bytes()).map_err(journal)
    }

    fn next_id(&self, session_id: &str) -> Result<u64, CheckpointError> {
        Ok(self
            .entries(session_id)?
            .iter()
            .map(|e| e.checkpoint)
            .max()
            .unwrap_or(0)
            + 1)
    }

    /// The session's checkpoints, newest first; paths inside `root` are shown relative.
    pub fn list(&self, session_id: &str, root: &Path) -> Result<Vec<Listed>, CheckpointError> {
        let mut by_id: BTreeMap<u64, Listed> = BTreeMap::new();
        for e in self.entries(session_id)? {
            let listed = by_id.entry(e.checkpoint).or_insert_with(|| Listed {
                id: e.checkpoint,
                turn: e.turn.clone(),
                kind: e.kind,
                prompt: e.prompt.clone(),
                created_ms: e.created_ms,
                files: Vec::new(),
                uncovered: Vec::new(),
            });
            if e.left.is_some() {
                continue;
            }
            if let Some(what) = e.uncovered {
                if !listed.uncovered.contains(&what) {
                    listed.uncovered.push(what);
                }
                continue;
            }
            let path = bytes_path::shown(e.path.strip_prefix(root).unwrap_or(&e.path));
            listed.files.push(ListedFile {
                path,
                change: e.change,
                by: e.by,
            });
        }
        Ok(by_id.into_values().rev().collect())
    }

    /// Puts the files of the session's latest checkpoint back as they were
    /// before it, after snapshotting them as they are now in a new
    /// `restore` checkpoint (so this can be undone the same way).
    pub fn undo(&self, session_id: &str) -> Result<Restored, CheckpointError> {
        let entries = self.entries(session_id)?;
        let last = entries
            .iter()
            .map(|e| e.checkpoint)
            .max()
            .ok_or(CheckpointError::Nothing)?;
        let mut seen = HashSet::new();
        let uncovered: Vec<String> = entries
            .iter()
            .filter(|e| e.checkpoint == last)
            .filter_map(|e| e.uncovered.clone())
            .fold(Vec::new(), |mut all, what| {
                if !all.contains(&what) {
                    all.push(what);
                }
                all
            });
        let left: std::collections::HashMap<&Path, Left> = entries
            .iter()
            .filter(|e| e.checkpoint == last)
            .filter_map(|e| e.left.map(|l| (e.path.as_path(), l)))
            .collect();
        let targets: Vec<&Entry> = entries
            .iter()
            .filter(|e| {
                e.checkpoint == last && e.uncovered.is_none() && e.left.is_none() && seen.insert(e.path.clone())
            })
            .collect();
        let turn = targets.first().map(|e| e.turn.clone()).unwrap_or_default();
        let prompt = targets.first().map(|e| e.prompt.clone()).unwrap_or_default();
        let restore = last + 1;
        let created_ms = crate::session::now_ms();
        let mut out = Restored {
            checkpoint: last,
            restore,
            turn: turn.clone(),
            restored: Vec::new(),
            skipped: Vec::new(),
            uncovered,
            changed_since: Vec::new(),
        };
        for e in targets {
            // Paths were kept with no link on the way; one there now (a command
            // replaced a directory with a link) would send the write elsewhere.
            if let Some(reason) = linked_parent(&e.path) {
                out.skipped.push(SkippedFile {
                    path: e.path.clone(),
                    reason,
                });
                continue;
            }
            if let Some(reason) = &e.skipped {
                out.skipped.push(SkippedFile {
                    path: e.path.clone(),
                    reason: reason.clone(),
                });
                continue;
            }
            let wanted = match (&e.before, &e.link) {
                (Some(hash), _) => match self.objects.get(hash, &e.path) {
                    Ok(bytes) => Wanted::Bytes(bytes),
                    Err(err) => {
                        out.skipped.push(SkippedFile {
                            path: e.path.clone(),
                            reason: format!("its snapshot is gone ({err}); it may have been pruned"),
                        });
                        continue;
                    }
                },
                (None, Some(target)) => Wanted::Link(target.clone()),
                (None, None) => Wanted::Absent,
            };
            // The file as it is now, so the restore can be undone.
            let before_write = Left::of(&e.path);
            let now = match self.snapshot(&e.path) {
                Ok(s) => s,
                Err(err) => {
                    out.skipped.push(SkippedFile {
                        path: e.path.clone(),
                        reason: format!("it cannot be read ({err})"),
                    });
                    continue;
                }
            };
            if let Some(reason) = now.skipped {
                out.skipped.push(SkippedFile {
                    path: e.path.clone(),
                    reason,
                });
                continue;
            }
            let change = match (now.exists(), &wanted) {
                (_, Wanted::Absent) => Change::Deleted,
                (false, _) => Change::Created,
                (true, _) => Change::Modified,
            };
            self.append(
                session_id,
                &Entry {
                    checkpoint: restore,
                    turn: turn.clone(),
                    kind: Kind::Restore,
                    prompt: prompt.clone(),
                    created_ms,
                    path: e.path.clone(),
                    before: now.object,
                    link: now.link,
                    change,
                    by: "undo".into(),
                    skipped: None,
                    uncovered: None,
                    left: None,
                },
            )?;
            // Each replaces what is there (a link too) without writing through it.
            let written = match &wanted {
                Wanted::Bytes(bytes) => crate::tools::atomic_write(&e.path, bytes).map(|_| ()),
                Wanted::Link(target) => replace_with_link(&e.path, target),
                Wanted::Absent => match fs::remove_file(&e.path) {
                    Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
                    other => other,
                },
            };
            match written {
                Ok(()) => {
                    if left.get(e.path.as_path()).is_some_and(|l| *l != before_write) {
                        out.changed_since.push(e.path.clone());
                    }
                    out.restored.push(RestoredFile {
                        path: e.path.clone(),
                        deleted: matches!(wanted, Wanted::Absent),
                    })
                }
                Err(err) => out.skipped.push(SkippedFile {
                    path: e.path.clone(),
                    reason: format!("it could not be written ({err})"),
                }),
            }
        }
        // How the restore left its files, for the undo of this undo.
        for f in &out.restored {
            self.append(
                session_id,
                &Entry {
                    checkpoint: restore,
                    turn: turn.clone(),
                    kind: Kind::Restore,
                    prompt: prompt.clone(),
                    created_ms,
                    path: f.path.clone(),
                    before: None,
                    link: None,
                    change: Change::Modified,
                    by: "undo".into(),
                    skipped: None,
                    uncovered: None,
                    left: Some(Left::of(&f.path)),
                },
            )?;
        }
        Ok(out)
    }

    /// The file as it is now ([`Snap`]): a link is kept as its target and
    /// never read through; only a regular file's content is read.
    fn snapshot(&self, path: &Path) -> io::Result<Snap> {
        let meta = match fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Snap::default()),
            Err(e) => return Err(e),
        };
        if meta.file_type().is_symlink() {
            return Ok(Snap {
                link: Some(fs::read_link(path)?),
                ..Snap::default()
            });
        }
        let skipped = |why: String| Snap {
            skipped: Some(why),
            ..Snap::default()
        };
        if !meta.is_file() {
            return Ok(skipped("it is not a regular file".into()));
        }
        if meta.len() > self.settings.max_file_bytes {
            return Ok(skipped(format!(
                "it is bigger ({} bytes) than checkpoints keep ({} bytes; raise checkpoints.max_file_kb)",
                meta.len(),
                self.settings.max_file_bytes
            )));
        }
        let bytes = crate::tools::paths::read_regular_nofollow(path, self.settings.max_file_bytes)?;
        let (object, skipped) = self.keep(&bytes)?;
        Ok(Snap {
            object,
            link: None,
            skipped,
        })
    }

    /// Removes checkpoints older than `max_age_days`, then objects no
    /// journal names (older than a day: a running turn's scan may still
    /// need them), then the oldest objects until the rest fits `max_bytes`.
    pub fn prune(&self) -> io::Result<PruneReport> {
        let now = std::time::SystemTime::now();
        let max_age = std::time::Duration::from_secs(u64::from(self.settings.max_age_days) * 86_400);
        let mut report = PruneReport::default();
        let mut referenced = HashSet::new();
        let sessions = self.dir.join("sessions");
        if let Ok(dir) = fs::read_dir(&sessions) {
            for entry in dir.flatten() {
                let path = entry.path();
                let old = entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| now.duration_since(t).ok())
                    .is_some_and(|age| age > max_age);
                if old {
                    if fs::remove_file(&path).is_ok() {
                        report.journals_removed += 1;
                    }
                    continue;
                }
                if let Ok(text) = fs::read_to_string(&path) {
                    for e in text.lines().filter_map(|l| serde_json::from_str::<Entry>(l).ok()) {
                        if let Some(h) = e.before {
                            referenced.insert(h);
                        }
                    }
                }
            }
        }
        let grace = std::time::Duration::from_secs(86_400);
        let mut kept = Vec::new();
        for (name, path, len, modified) in self.objects.all() {
            let age = now.duration_since(modified).unwrap_or_default();
            if !referenced.contains(&name) && age > grace {
                if fs::remove_file(&path).is_ok() {
                    report.objects_removed += 1;
                    report.bytes_removed += len;
                }
            } else {
                kept.push((modified, path, len));
            }
        }
        kept.sort();
        let mut total: u64 = kept.iter().map(|k| k.2).sum();
        for (_, path, len) in kept {
            if total <= self.settings.max_bytes {
                break;
            }
            if fs::remove_file(&path).is_ok() {
                report.objects_removed += 1;
                report.bytes_removed += len;
                total -= len;
            }
        }
        report.bytes_kept = total;
        Ok(report)
    }
}

/// What an undo puts at a path.
enum Wanted {
    Bytes(Vec<u8>),
    Link(PathBuf),
    Absent,
}

/// Puts a symbolic link to `target` at `path`, replacing what is there in
/// one rename (a link made beside it first), so nothing is written through
/// the old entry.
fn replace_with_link(path: &Path, target: &Path) -> io::Result<()> {
    let name = path.file_name().ok_or_else(|| io::Error::other("no file name"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".mia-link-{}", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let _ = fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)?;
    fs::rename(&tmp, path).inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct PruneReport {
    pub journals_removed: usize,
    pub objects_removed: usize,
    pub bytes_removed: u64,
    pub bytes_kept: u64,
}

/// The checkpoint of one turn: created at the turn's first change, one entry
/// per file, the first snapshot of a file in the turn wins (later changes
/// in the same turn build on the turn's own work).
pub struct TurnCheckpoint {
    store: Checkpoints,
    session_id: String,
    turn: String,
    prompt: String,
    state: Mutex<TurnState>,
    /// Content names of the project's files by (size, mtime), kept for the session.
    cache: Arc<Mutex<ScanCache>>,
}

#[derive(Default)]
struct TurnState {
    id: Option<u64>,
    touched: HashSet<PathBuf>,
    created_ms: i64,
}

impl TurnCheckpoint {
    pub fn new(
        store: Checkpoints,
        session_id: &str,
        turn: &str,
        prompt: &str,
        cache: Arc<Mutex<ScanCache>>,
    ) -> TurnCheckpoint {
        let first = prompt.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
        TurnCheckpoint {
            store,
            session_id: session_id.to_string(),
            turn: turn.to_string(),
            prompt: first.chars().take(80).collect(),
            state: Mutex::new(TurnState::default()),
            cache,
        }
    }

    fn lock(&self) -> MutexGuard<'_, TurnState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The checkpoint's id, taken at the turn's first change.
    pub fn id(&self) -> Option<u64> {
        self.lock().id
    }

    /// Keeps `path`'s current content before `by` changes it (`change`: what it
    /// is about to do). Nothing happens for a file this turn already kept.
    pub fn before_change(&self, path: &Path, by: &str, change: Change) -> Result<(), CheckpointError> {
        let mut state = self.lock();
        if state.touched.contains(path) {
            return Ok(());
        }
        let snap = match self.store.snapshot(path) {
            Ok(s) => s,
            Err(e) => Snap {
                skipped: Some(format!("it could not be read ({e})")),
                ..Snap::default()
            },
        };
        self.record(&mut state, path, snap, change, by)
    }

    fn record(
        &self,
        state: &mut TurnState,
        path: &Path,
        snap: Snap,
        change: Change,
        by: &str,
    ) -> Result<(), CheckpointError> {
        self.append(state, path, snap, change, by, None)?;
        state.touched.insert(path.to_path_buf());
        Ok(())
    }

    fn append(
        &self,
        state: &mut TurnState,
        path: &Path,
        snap: Snap,
        change: Change,
        by: &str,
        uncovered: Option<String>,
    ) -> Result<(), CheckpointError> {
        let id = match state.id {
            Some(id) => id,
            None => {
                let id = self.store.next_id(&self.session_id)?;
                state.id = Some(id);
                state.created_ms = crate::session::now_ms();
                id
            }
        };
        self.store.append(
            &self.session_id,
            &Entry {
                checkpoint: id,
                turn: self.turn.clone(),
                kind: Kind::Turn,
                prompt: self.prompt.clone(),
                created_ms: state.created_ms,
                path: path.to_path_buf(),
                before: snap.object,
                link: snap.link,
                change,
                by: by.to_string(),
                skipped: snap.skipped,
                uncovered,
                left: None,
            },
        )
    }

    /// Before a command runs: the project's files as they are, each
    /// content kept as an object (once: unchanged files are found in the
    /// cache). Stops early, marked `cancelled`, once `cancelled()` says so.
    pub fn scan(&self, root: &Path, cancelled: &dyn Fn() -> bool) -> Scan {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        scan::before(root, &self.store, &mut cache, cancelled)
    }

    /// After the command: every file whose size or time changed, that
    /// appeared or that disappeared is recorded with its content from
    /// `before`. What the checkpoint does not cover (the scan's gaps, the
    /// changed files whose content was not kept) is recorded in it too and
    /// returned, for the command's output to say.
    pub fn after_scan(&self, root: &Path, before: &Scan, by: &str) -> Result<AfterScan, CheckpointError> {
        let changed = scan::changes(root, before, &self.store);
        let mut state = self.lock();
        let mut out = AfterScan::default();
        for (path, change) in changed {
            if state.touched.contains(&path) {
                continue;
            }
            let snap = match before.files.get(&path) {
                Some(f) => Snap {
                    object: f.object.clone(),
                    link: f.link.clone(),
                    skipped: f.skipped.clone(),
                },
                None => Snap::default(),
            };
            if let Some(why) = &snap.skipped {
                out.uncovered.push(format!("{}: {why}", bytes_path::shown(&path)));
            }
            self.record(&mut state, &path, snap, change, by)?;
            out.recorded.push(path);
        }
        // A gap is noted in a checkpoint that exists: alone it would hide the
        // turn's earlier checkpoint from :Mia undo.
        if state.id.is_some() {
            for what in &before.uncovered {
                let note = format!("{by}: {what}");
                self.append(&mut state, root, Snap::default(), Change::Modified, by, Some(note))?;
            }
        }
        out.uncovered.splice(0..0, before.uncovered.iter().cloned());
        Ok(out)
    }
}

impl Drop for TurnCheckpoint {
    /// The turn is over (every tool call holding it has ended): how it left
    /// each file it changed is recorded, one `lstat` each, so `:Mia undo`
    /// can name the files saved since.
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        let Some(id) = state.id else { return };
        for path in &state.touched {
            let entry = Entry {
                checkpoint: id,
                turn: self.turn.clone(),
                kind: Kind::Turn,
                prompt: self.prompt.clone(),
                created_ms: state.created_ms,
                path: path.clone(),
                before: None,
                link: None,
                change: Change::Modified,
                by: "end of turn".into(),
                skipped: None,
                uncovered: None,
                left: Some(Left::of(path)),
            };
            if let Err(e) = self.store.append(&self.session_id, &entry) {
                tracing::warn!("the end of a checkpoint could not be recorded: {e}");
                return;
            }
        }
    }
}

/// What [`TurnCheckpoint::after_scan`] recorded.
#[derive(Debug, Default)]
pub struct AfterScan {
    pub recorded: Vec<PathBuf>,
    /// What the checkpoint does not cover, one sentence each.
    pub uncovered: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, tempfile::TempDir, Checkpoints) {
        let data = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let store = Checkpoints::new(data.path(), CheckpointSettings::default());
        (data, project, store)
    }

    fn turn(store: &Checkpoints, prompt: &str) -> TurnCheckpoint {
        TurnCheckpoint::new(store.clone(), "s1", &format!("t-{prompt}"), prompt, Arc::default())
    }

    #[test]
    fn undo_restores_a_turns_files_and_undoing_the_restore_brings_the_turn_back() {
        let (_d, project, store) = setup();
        let a = project.path().join("a.txt");
        let b = project.path().join("b.txt");
        fs::write(&a, "one\n").unwrap();
        let t = turn(&store, "change things");
        t.before_change(&a, "edit_file", Change::Modified).unwrap();
        fs::write(&a, "two\n").unwrap();
        // A second change in the same turn keeps the turn's first snapshot.
        t.before_change(&a, "edit_file", Change::Modified).unwrap();
        fs::write(&a, "three\n").unwrap();
        t.before_change(&b, "write_file", Change::Created).unwrap();
        fs::write(&b, "new\n").unwrap();

        let listed = store.list("s1", project.path()).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].prompt, "change things");
        let files: Vec<_> = listed[0].files.iter().map(|f| (f.path.as_str(), f.change)).collect();
        assert_eq!(files, vec![("a.txt", Change::Modified), ("b.txt", Change::Created)]);

        let r = store.undo("s1").unwrap();
        assert_eq!(r.restored.len(), 2, "{r:?}");
        assert_eq!(fs::read_to_string(&a).unwrap(), "one\n");
        assert!(!b.exists());

        let again = store.undo("s1").unwrap();
        assert_eq!(again.checkpoint, r.restore);
        assert_eq!(fs::read_to_string(&a).unwrap(), "three\n");
        assert_eq!(fs::read_to_string(&b).unwrap(), "new\n");
        assert_eq!(store.list("s1", project.path()).unwrap()[0].kind, Kind::Restore);
    }

    #[test]
    fn a_scan_around_a_command_records_what_it_changed_created_and_deleted() {
        let (_d, project, store) = setup();
        let root = project.path();
        fs::write(root.join("keep.txt"), "same").unwrap();
        fs::write(root.join("edit.txt"), "before").unwrap();
        fs::write(root.join("gone.txt"), "bye").unwrap();
        fs::write(root.join(".gitignore"), "ignored/\n").unwrap();
        fs::create_dir(root.join("ignored")).unwrap();
        fs::write(root.join("ignored/x"), "x").unwrap();
        let t = turn(&store, "run sed");
        let before = t.scan(root, &|| false);
        fs::write(root.join("edit.txt"), "after, longer").unwrap();
        fs::remove_file(root.join("gone.txt")).unwrap();
        fs::write(root.join("made.txt"), "hi").unwrap();
        fs::write(root.join("ignored/x"), "changed").unwrap();
        let mut changed = t.after_scan(root, &before, "bash").unwrap().recorded;
        changed.sort();
        let names: Vec<_> = changed
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["edit.txt", "gone.txt", "made.txt"]);
        store.undo("s1").unwrap();
        assert_eq!(fs::read_to_string(root.join("edit.txt")).unwrap(), "before");
        assert_eq!(fs::read_to_string(root.join("gone.txt")).unwrap(), "bye");
        assert!(!root.join("made.txt").exists());
    }

    #[test]
    fn mias_own_data_dir_inside_the_project_is_not_scanned_and_a_file_holding_a_key_is_not_kept() {
        let project = tempfile::tempdir().unwrap();
        let root = project.path();
        let key = "sk-canary-0123456789abcdef";
        // The data directory, spelled through a link, lies inside the project.
        fs::create_dir(root.join("data")).unwrap();
        std::os::unix::fs::symlink(root.join("data"), root.join("data-link")).unwrap();
        let store =
            Checkpoints::new(&root.join("data-link"), CheckpointSettings::default()).with_secrets(vec![key.into()]);
        fs::write(root.join("init.lua"), format!("api_key = \"{key}\"\n")).unwrap();
        fs::write(root.join("plain.txt"), "plain").unwrap();
        let t = turn(&store, "run a command");
        let before = t.scan(root, &|| false);
        assert!(
            before.files.keys().all(|p| !p.starts_with(root.join("data"))),
            "{:?}",
            before.files.keys()
        );
        fs::write(root.join("init.lua"), "changed").unwrap();
        fs::write(root.join("plain.txt"), "changed too").unwrap();
        let mut changed = t.after_scan(root, &before, "bash").unwrap().recorded;
        changed.sort();
        assert_eq!(changed, vec![root.join("init.lua"), root.join("plain.txt")]);
        // Nothing under the data directory holds the key.
        let mut stack = vec![root.join("data")];
        while let Some(dir) = stack.pop() {
            for e in fs::read_dir(dir).unwrap().flatten() {
                if e.path().is_dir() {
                    stack.push(e.path());
                } else {
                    let bytes = fs::read(e.path()).unwrap();
                    assert!(!String::from_utf8_lossy(&bytes).contains(key), "{}", e.path().display());
                }
            }
        }
        let r = store.undo("s1").unwrap();
        assert_eq!(fs::read_to_string(root.join("plain.txt")).unwrap(), "plain");
        assert_eq!(fs::read_to_string(root.join("init.lua")).unwrap(), "changed");
        assert!(
            r.skipped
                .iter()
                .any(|s| s.reason.contains("holds a configured API key")),
            "{r:?}"
        );
    }

    #[test]
    fn in_a_git_project_unchanged_tracked_files_are_kept_as_their_blobs_and_restored_from_git() {
        let (_d, project, store) = setup();
        let root = project.path().canonicalize().unwrap();
        let git = |args: &[&str]| {
            std::process::Command::new("git")
                .arg("-C")
                .arg(&root)
                .args([
                    "-c",
                    "user.name=t",
                    "-c",
                    "user.email=t@t",
                    "-c",
                    "commit.gpgsign=false",
                ])
                .args(args)
                .output()
        };
        if git(&["init", "-q"]).map(|o| !o.status.success()).unwrap_or(true) {
            eprintln!("skipped: git is not installed");
            return;
        }
        fs::write(root.join("tracked.txt"), "committed\n").unwrap();
        fs::write(root.join("dirty.txt"), "v1\n").unwrap();
        git(&["add", "."]).unwrap();
        git(&["commit", "-qm", "x"]).unwrap();
        fs::write(root.join("dirty.txt"), "v2, not committed\n").unwrap();
        let t = turn(&store, "sed");
        let before = t.scan(&root, &|| false);
        assert!(before.files[&root.join("tracked.txt")]
            .object
            .as_deref()
            .unwrap()
            .starts_with("git:"));
        assert!(!before.files[&root.join("dirty.txt")]
            .object
            .as_deref()
            .unwrap()
            .starts_with("git:"));
        assert_eq!(store.objects.all().len(), 1, "only the changed file is copied");
        fs::write(root.join("tracked.txt"), "sed was here\n").unwrap();
        fs::write(root.join("dirty.txt"), "sed was here too\n").unwrap();
        t.after_scan(&root, &before, "bash").unwrap();
        store.undo("s1").unwrap();
        assert_eq!(fs::read_to_string(root.join("tracked.txt")).unwrap(), "committed\n");
        assert_eq!(
            fs::read_to_string(root.join("dirty.txt")).unwrap(),
            "v2, not committed\n"
        );
    }

    #[test]
    fn undo_does_not_follow_a_directory_a_command_replaced_with_a_link() {
        let (_d, project, store) = setup();
        let outside = tempfile::tempdir().unwrap();
        let root = project.path().canonicalize().unwrap();
        fs::create_dir(root.join("d")).unwrap();
        let t = turn(&store, "make d/x");
        t.before_change(&root.join("d/x"), "write_file", Change::Created)
            .unwrap();
        fs::write(root.join("d/x"), "made").unwrap();
        fs::write(outside.path().join("x"), "precious").unwrap();
        fs::remove_dir_all(root.join("d")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("d")).unwrap();
        let r = store.undo("s1").unwrap();
        assert!(r.restored.is_empty());
        assert!(r.skipped[0].reason.contains("is now a link"), "{r:?}");
        assert_eq!(fs::read_to_string(outside.path().join("x")).unwrap(), "precious");
    }

    #[test]
    fn a_file_replaced_by_a_link_is_never_read_through_and_undo_puts_back_the_file_then_the_link() {
        let (data, project, store) = setup();
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("environ");
        fs::write(&secret, "SECRET=outside").unwrap();
        let root = project.path().canonicalize().unwrap();
        let a = root.join("a.txt");
        fs::write(&a, "mine\n").unwrap();
        let t = turn(&store, "edit then link");
        t.before_change(&a, "write_file", Change::Modified).unwrap();
        fs::write(&a, "edited\n").unwrap();
        fs::remove_file(&a).unwrap();
        std::os::unix::fs::symlink(&secret, &a).unwrap();

        let r = store.undo("s1").unwrap();
        assert_eq!(r.restored.len(), 1, "{r:?}");
        assert!(!a.symlink_metadata().unwrap().file_type().is_symlink());
        assert_eq!(fs::read_to_string(&a).unwrap(), "mine\n");
        let again = store.undo("s1").unwrap();
        assert_eq!(again.restored.len(), 1, "{again:?}");
        assert_eq!(fs::read_link(&a).unwrap(), secret);
        // The link's target never went into the checkpoints.
        for (_, path, _, _) in store.objects.all() {
            assert!(!fs::read_to_string(path).unwrap_or_default().contains("SECRET"));
        }
        drop(data);
    }

    #[test]
    fn a_command_that_swaps_a_file_for_a_link_is_undone_without_reading_the_link() {
        let (_d, project, store) = setup();
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("environ");
        fs::write(&secret, "SECRET=outside").unwrap();
        let root = project.path().canonicalize().unwrap();
        fs::write(root.join("a.txt"), "mine").unwrap();
        std::os::unix::fs::symlink(&secret, root.join("old-link")).unwrap();
        let t = turn(&store, "ln -sf");
        let before = t.scan(&root, &|| false);
        fs::remove_file(root.join("a.txt")).unwrap();
        std::os::unix::fs::symlink(&secret, root.join("a.txt")).unwrap();
        std::os::unix::fs::symlink(&secret, root.join("new-link")).unwrap();
        fs::remove_file(root.join("old-link")).unwrap();
        let mut changed = t.after_scan(&root, &before, "bash").unwrap().recorded;
        changed.sort();
        assert_eq!(
            changed,
            vec![root.join("a.txt"), root.join("new-link"), root.join("old-link")]
        );
        let r = store.undo("s1").unwrap();
        assert_eq!(r.restored.len(), 3, "{r:?}");
        assert_eq!(fs::read_to_string(root.join("a.txt")).unwrap(), "mine");
        assert!(root.join("new-link").symlink_metadata().is_err());
        assert_eq!(fs::read_link(root.join("old-link")).unwrap(), secret);
        store.undo("s1").unwrap();
        assert_eq!(fs::read_link(root.join("a.txt")).unwrap(), secret);
        for (_, path, _, _) in store.objects.all() {
            assert!(!fs::read_to_string(path).unwrap_or_default().contains("SECRET"));
        }
    }

    #[test]
    fn a_scan_reads_no_special_file_stops_when_cancelled_and_refuses_a_virtual_file_system() {
        let (_d, project, store) = setup();
        let root = project.path().canonicalize().unwrap();
        fs::write(root.join("a.txt"), "a").unwrap();
        let fifo = std::ffi::CString::new(root.join("pipe").into_os_string().into_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let t = turn(&store, "scan");
        let before = t.scan(&root, &|| false);
        assert_eq!(before.files.keys().collect::<Vec<_>>(), vec![&root.join("a.txt")]);
        let cancelled = t.scan(&root, &|| true);
        assert!(cancelled.cancelled && cancelled.files.is_empty());
        let proc = t.scan(Path::new("/proc/self"), &|| false);
        assert!(proc.files.is_empty());
        assert!(
            proc.uncovered[0].contains("virtual file system proc"),
            "{:?}",
            proc.uncovered
        );
    }

    #[test]
    fn a_command_touching_a_name_that_is_not_utf8_is_covered_and_undone() {
        use std::os::unix::ffi::OsStringExt;
        let (_d, project, store) = setup();
        let root = project.path().canonicalize().unwrap();
        let odd = root.join(std::ffi::OsString::from_vec(b"caf\xe9\nname".to_vec()));
        fs::write(&odd, "before").unwrap();
        fs::write(root.join("plain.txt"), "before").unwrap();
        let t = turn(&store, "touch odd names");
        let before = t.scan(&root, &|| false);
        fs::write(&odd, "after, longer").unwrap();
        fs::write(root.join("plain.txt"), "after, longer").unwrap();
        assert_eq!(t.after_scan(&root, &before, "bash").unwrap().recorded.len(), 2);
        let listed = store.list("s1", &root).unwrap();
        let mut names: Vec<_> = listed[0].files.iter().map(|f| f.path.clone()).collect();
        names.sort();
        assert_eq!(names, vec!["caf\\xe9\\nname", "plain.txt"]);
        let r = store.undo("s1").unwrap();
        assert_eq!(r.restored.len(), 2, "{r:?}");
        assert_eq!(fs::read_to_string(&odd).unwrap(), "before");
        let json = serde_json::to_value(&r).unwrap();
        assert!(json.to_string().contains("caf\\\\xe9\\\\nname"), "{json}");
    }

    #[test]
    fn changes_past_the_scan_limits_are_named_not_missed() {
        let data = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let root = project.path().canonicalize().unwrap();
        let store = Checkpoints::new(
            data.path(),
            CheckpointSettings {
                max_scan_files: 5,
                ..Default::default()
            },
        );
        for i in 0..20 {
            fs::write(root.join(format!("f{i:02}")), "before").unwrap();
        }
        let t = turn(&store, "change many");
        let before = t.scan(&root, &|| false);
        let kept = before.files.values().filter(|k| k.object.is_some()).count();
        assert_eq!(kept, 5);
        for i in 0..20 {
            fs::write(root.join(format!("f{i:02}")), "after, longer").unwrap();
        }
        let after = t.after_scan(&root, &before, "bash").unwrap();
        assert_eq!(after.recorded.len(), 20);
        assert!(
            after.uncovered.iter().any(|u| u.contains("15 files past the first 5")),
            "{after:?}"
        );
        let r = store.undo("s1").unwrap();
        assert_eq!((r.restored.len(), r.skipped.len()), (5, 15), "{r:?}");
        assert!(r.skipped[0].reason.contains("checkpoints.max_scan_files"), "{r:?}");
        assert!(
            r.uncovered.iter().any(|u| u.contains("15 files past the first 5")),
            "{r:?}"
        );
    }

    #[test]
    fn a_scan_stops_copying_when_the_checkpoints_are_full_and_says_so() {
        let data = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let root = project.path().canonicalize().unwrap();
        let store = Checkpoints::new(
            data.path(),
            CheckpointSettings {
                max_bytes: 3000,
                ..Default::default()
            },
        );
        for i in 0..10 {
            fs::write(root.join(format!("f{i}")), vec![b'a' + i as u8; 1000]).unwrap();
        }
        let t = turn(&store, "scan");
        let before = t.scan(&root, &|| false);
        assert!(store.objects.total_bytes() <= 3000, "{}", store.objects.total_bytes());
        assert_eq!(before.files.values().filter(|k| k.object.is_some()).count(), 3);
        assert!(
            before
                .uncovered
                .iter()
                .any(|u| u.contains("7 files were not kept: checkpoints are full")),
            "{:?}",
            before.uncovered
        );
    }

    #[test]
    fn undo_names_the_files_saved_after_the_turn_ended() {
        let (_d, project, store) = setup();
        let root = project.path().canonicalize().unwrap();
        let (a, b) = (root.join("a.txt"), root.join("b.txt"));
        fs::write(&a, "a").unwrap();
        fs::write(&b, "b").unwrap();
        let t = turn(&store, "edit both");
        t.before_change(&a, "write_file", Change::Modified).unwrap();
        fs::write(&a, "turn a").unwrap();
        t.before_change(&b, "write_file", Change::Modified).unwrap();
        fs::write(&b, "turn b").unwrap();
        drop(t);
        fs::remove_file(&a).unwrap();
        fs::write(&a, "the user's a, saved").unwrap();
        let r = store.undo("s1").unwrap();
        assert_eq!(r.changed_since, vec![a.clone()]);
        assert_eq!(fs::read_to_string(&a).unwrap(), "a");
        assert!(store.undo("s1").unwrap().changed_since.is_empty());
        assert_eq!(fs::read_to_string(&a).unwrap(), "the user's a, saved");
    }

    #[test]
    fn identical_contents_are_stored_once_and_a_damaged_snapshot_is_refused() {
        let (d, _p, store) = setup();
        let x = store.objects.put(b"same bytes").unwrap();
        let y = store.objects.put(b"same bytes").unwrap();
        assert_eq!(x, y);
        assert_eq!(store.objects.all().len(), 1);
        let path = d.path().join("checkpoints/objects").join(&x[..2]).join(&x[2..]);
        fs::write(path, "tampered").unwrap();
        let p = Path::new("/nonexistent/x");
        assert!(store.objects.get(&x, p).is_err());
        assert!(store.objects.get("../../etc/passwd", p).is_err());
        assert!(store.objects.get("git:--output=/tmp/x", p).is_err());
    }

    #[test]
    fn session_ids_that_are_not_file_names_are_refused() {
        let (_d, _p, store) = setup();
        assert!(matches!(store.entries("../x"), Err(CheckpointError::BadSession(_))));
        assert!(matches!(store.undo("s1"), Err(CheckpointError::Nothing)));
    }

    #[test]
    fn pruning_keeps_the_newest_objects_within_the_size_limit() {
        let data = tempfile::tempdir().unwrap();
        let store = Checkpoints::new(
            data.path(),
            CheckpointSettings {
                max_bytes: 10,
                ..Default::default()
            },
        );
        let old = store.objects.put(b"0123456789").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let new = store.objects.put(b"abcdefghij").unwrap();
        let r = store.prune().unwrap();
        assert_eq!(r.objects_removed, 1);
        let p = Path::new("/nonexistent/x");
        assert!(store.objects.get(&old, p).is_err());
        assert_eq!(store.objects.get(&new, p).unwrap(), b"abcdefghij");
    }
}
