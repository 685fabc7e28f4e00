//! Persistence: sessions, their messages and one usage row per provider call,
//! in one SQLite file under `data_dir` that several Neovim instances share.
//!
//! - Writes go through one writer thread per [`Store`] ([`writer`]), which
//!   batches whatever is queued into one transaction and retries the whole
//!   transaction while another process holds the lock. Async callers only
//!   await a reply; nothing blocks the runtime or Neovim's main thread.
//! - Reads run on a small pool of read-only connections ([`reader`]) inside
//!   `spawn_blocking`. WAL mode lets them run while anyone writes.
//! - The file's layout and its upgrades live in [`schema`]; reports in
//!   [`reports`], most of them read from the per-hour and per-day usage
//!   rollup ([`rollup`]); daily costs and budget spend in [`spend`]; the whole
//!   `mia.costs` report (window, chart, suggestions) in [`cost_report`];
//!   session and message reads in [`sessions`]; the pagination cursor
//!   format in [`cursor`].
//!
//! Dependencies: `store` → `cost` (calendar days, suggestions) and `llm`
//! (message roles). Nothing in `store` reaches for the runtime: whoever
//! needs a store is handed one.
//!
//! Every async method must be awaited inside a tokio runtime (reads use
//! `spawn_blocking`). A write future that is dropped before it resolves does
//! not cancel the write: once queued, it commits (or fails) regardless.

mod cost_report;
mod cursor;
mod error;
pub mod export;
mod reader;
mod reports;
mod rollup;
mod rows;
mod schema;
mod sessions;
mod spend;
mod unsaved;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use cost_report::{AgentModel, CostQuery, CostReport, CostScope, ModelSessions, CHART_DAYS};
pub use error::StoreError;
pub use reports::{Breakdown, CostTypes, ReportQuery, Totals, UsageReport};
pub use rows::{MessageKind, MessageRow, MessageState, SessionPage, SessionRow, SessionSummary, UsageRow};
pub use schema::{BUSY_TIMEOUT, SCHEMA_VERSION};
pub use sessions::{request_positions, request_rows, MAX_PAGE};
pub use spend::{DayCost, Spend, MAX_DAYS};
pub use unsaved::{Lost, SavingNews, Unsaved};

use reader::ReadPool;
use rusqlite::Connection;
use writer::{Job, Writer};

/// A handle on one database file. Cheap to clone: clones share the writer
/// thread and the read pool. Separate `Store`s on the same file (in this or
/// another process) are safe too; they coordinate through SQLite's locks.
///
/// When the last clone is dropped, writes already queued are committed
/// before the writer thread exits; the drop waits for that.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    writer: Writer,
    readers: ReadPool,
    /// What the writer could not write yet, and what to tell the user.
    unsaved: Arc<unsaved::Shared>,
    /// Told of every usage row as it is recorded (telemetry's counters): set
    /// once by whoever opened the store, since the store sits below them.
    usage_observer: std::sync::OnceLock<UsageObserver>,
}

/// What [`Store::observe_usage`] registers.
pub type UsageObserver = Box<dyn Fn(&UsageRow) + Send + Sync>;

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.inner.path).finish()
    }
}

impl Store {
    /// Opens (creating if needed) the database at `path`, creating its parent
    /// directories, and upgrades an older file to [`SCHEMA_VERSION`].
    ///
    /// Blocking (it may run migrations and wait on another process's lock):
    /// call it at startup or from `spawn_blocking`, not from a hot async path.
    ///
    /// Fails with [`StoreError::NewerSchema`] for a file from a newer mia and
    /// [`StoreError::Corrupt`] for a file that is not a usable database.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::CreateDir {
                dir: dir.to_path_buf(),
                detail: e.to_string(),
            })?;
        }
        let conn = schema::open_writer(path)?;
        let readers = ReadPool::new(path)?;
        let unsaved = Arc::new(unsaved::Shared::default());
        let writer = Writer::spawn(conn, path, unsaved.clone())?;
        Ok(Store {
            inner: Arc::new(Inner {
                path: path.to_path_buf(),
                writer,
                readers,
                unsaved,
                usage_observer: std::sync::OnceLock::new(),
            }),
        })
    }

    /// Where saving stands: why writes fail (if they do), what waits in
    /// memory to be written, what was lost.
    pub fn unsaved(&self) -> Unsaved {
        self.inner.unsaved.unsaved()
    }

    /// What changed in the store's saving since the last call (saving
    /// stopped, writes are being lost, saving works again): each piece is
    /// given once, for the user to be told.
    pub fn take_saving_news(&self) -> Vec<SavingNews> {
        self.inner.unsaved.take_news()
    }

    /// The file this store reads and writes.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    // ---- writes: each returns once its transaction has committed ----

    /// Inserts the session, or updates it if the id exists: every field but
    /// `created_at_ms`, and `title` only when given (a run that re-saves its
    /// session without a title keeps the one the user set; clearing a title
    /// is [`Store::rename_session`]'s job).
    pub async fn upsert_session(&self, row: SessionRow) -> Result<(), StoreError> {
        self.write(Job::UpsertSession(row)).await.map(drop)
    }

    /// Marks activity: `updated_at_ms` becomes the later of its current
    /// value and the given one (so a late or skewed clock never moves a
    /// session back in listings). [`StoreError::SessionNotFound`] if absent.
    pub async fn touch_session(&self, id: &str, updated_at_ms: i64) -> Result<(), StoreError> {
        self.write(Job::TouchSession {
            id: id.to_string(),
            updated_at_ms,
        })
        .await
        .map(drop)
    }

    /// Sets the title (`None` clears it) without counting as activity.
    /// [`StoreError::SessionNotFound`] if absent.
    pub async fn rename_session(&self, id: &str, title: Option<&str>) -> Result<(), StoreError> {
        self.write(Job::RenameSession {
            id: id.to_string(),
            title: title.map(str::to_string),
        })
        .await
        .map(drop)
    }

    /// Deletes the session and its messages. Its usage rows stay: money
    /// spent still counts toward day budgets and reports. Deleting a missing
    /// session succeeds (the outcome the caller wanted already holds).
    pub async fn delete_session(&self, id: &str) -> Result<(), StoreError> {
        self.write(Job::DeleteSession { id: id.to_string() }).await.map(drop)
    }

    /// Inserts the message, or rewrites it by id, keeping its first
    /// `created_at_ms`. Used both to checkpoint a streaming message (state
    /// `Streaming`, called repeatedly) and to store its final form.
    ///
    /// Checkpoints may be fired without awaiting, so they can arrive late: a
    /// `Streaming` row never replaces a message that is already finished, nor
    /// a checkpoint with a later `updated_at_ms` (it is dropped, and the call
    /// still succeeds). A finished state always applies.
    /// [`StoreError::SessionNotFound`] if the session does not exist;
    /// [`StoreError::SeqTaken`] if another message holds its `seq`.
    pub async fn upsert_message(&self, row: MessageRow) -> Result<(), StoreError> {
        self.write(Job::UpsertMessage(row)).await.map(drop)
    }

    /// Appends `row` to its session at the next position (`max(seq) + 1`,
    /// taken inside the write transaction, so two writers, in this process or
    /// another, never get the same number) and returns that `seq`; the
    /// `seq` in `row` is ignored. Writing the same id again updates that
    /// message in place and keeps its `seq` (how a streaming answer is
    /// checkpointed); a `Streaming` row never replaces a finished one. A
    /// message already stored is never overwritten by another id.
    /// [`StoreError::SessionNotFound`] if the session does not exist;
    /// [`StoreError::InvalidInput`] if the id belongs to another session.
    pub async fn append_message(&self, row: MessageRow) -> Result<i64, StoreError> {
        self.write(Job::AppendMessage(row)).await
    }

    /// Appends a compaction summary (`row.parts`, usually one text part)
    /// that stands for every message of the session except its latest
    /// `keep_last` plain messages (see [`MessageKind::Compaction`]); the range
    /// is read inside the write transaction and the row's `kind` and `seq` are
    /// set here. Returns the summary's `seq`.
    /// [`StoreError::InvalidInput`] when there is nothing older to cover.
    pub async fn append_compaction(&self, row: MessageRow, keep_last: u32) -> Result<i64, StoreError> {
        self.write(Job::AppendCompaction { row, keep_last }).await
    }

    /// Has `observer` told of every usage row recorded from now on (before
    /// it is written). Only the first observer registered is kept; returns
    /// whether this one was.
    pub fn observe_usage(&self, observer: UsageObserver) -> bool {
        self.inner.usage_observer.set(observer).is_ok()
    }

    /// Appends one provider call's usage and returns its row id. The session
    /// need not exist (calls outside sessions, or in since-deleted ones, are
    /// still money spent).
    pub async fn record_usage(&self, row: UsageRow) -> Result<i64, StoreError> {
        if let Some(observe) = self.inner.usage_observer.get() {
            observe(&row);
        }
        self.write(Job::RecordUsage(row)).await
    }

    /// Moves the write-ahead log into the main file and truncates it, after
    /// the writes queued before this call. For shutdown and measurements;
    /// SQLite also checkpoints on its own as the log grows.
    pub async fn checkpoint(&self) -> Result<(), StoreError> {
        self.write(Job::Checkpoint).await.map(drop)
    }

    async fn write(&self, job: Job) -> Result<i64, StoreError> {
        self.inner.writer.submit(job).await
    }

    // ---- reads ----

    /// The session with this id, or `None`.
    pub async fn session(&self, id: &str) -> Result<Option<SessionRow>, StoreError> {
        let id = id.to_string();
        self.read(move |c, p| sessions::session(c, p, &id)).await
    }

    /// The session's messages ordered by `seq` (empty for an unknown session).
    pub async fn messages(&self, session_id: &str) -> Result<Vec<MessageRow>, StoreError> {
        let id = session_id.to_string();
        self.read(move |c, p| sessions::messages(c, p, &id)).await
    }

    /// One page of sessions, most recently updated first (ties by id,
    /// descending), only those whose `cwd` equals the given one if any.
    ///
    /// Pass `cursor: None` for the first page and then each page's
    /// `next_cursor` (which is `None` on the last page). Cursors are tied to
    /// the `cwd` filter they were made for; a cursor that was altered or
    /// made for another filter is refused with [`StoreError::InvalidCursor`].
    /// Sessions created or updated during a walk never make it repeat or skip
    /// the sessions still to come, except that one updated before the walk
    /// reaches it moves to the top (see the [`sessions`] module).
    /// `limit` is clamped to `1..=`[`MAX_PAGE`].
    pub async fn list_sessions(
        &self,
        cwd: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<SessionPage, StoreError> {
        let after = cursor.map(|c| cursor::decode(c, cwd)).transpose()?;
        let cwd = cwd.map(str::to_string);
        self.read(move |c, p| sessions::list(c, p, cwd.as_deref(), after.as_ref(), limit))
            .await
    }

    /// Totals and breakdowns of the usage rows matching `query` (see
    /// [`reports`] for what counts where).
    pub async fn usage_report(&self, query: &ReportQuery) -> Result<UsageReport, StoreError> {
        let query = query.clone();
        self.read(move |c, p| reports::usage_report(c, p, &query)).await
    }

    /// The same report as [`Store::usage_report`], summed from the usage
    /// rows alone without the rollup: what the rollup must always equal
    /// (tests) and the figure it is measured against (benches).
    #[doc(hidden)]
    pub async fn usage_report_from_rows(&self, query: &ReportQuery) -> Result<UsageReport, StoreError> {
        let query = query.clone();
        self.read(move |c, p| reports::usage_report_from_rows(c, p, &query))
            .await
    }

    /// Known cost and request count per local calendar day, oldest first:
    /// `days` entries (zero days included) starting with the day that
    /// contains `from_ms`, where local time is UTC + `tz_offset_s` seconds.
    /// [`StoreError::InvalidInput`] past [`MAX_DAYS`].
    pub async fn daily_costs(&self, from_ms: i64, days: u32, tz_offset_s: i32) -> Result<Vec<DayCost>, StoreError> {
        self.read(move |c, p| spend::daily_costs(c, p, from_ms, days, tz_offset_s, spend::Source::Rollup))
            .await
    }

    /// [`Store::daily_costs`] summed from the usage rows alone (see
    /// [`Store::usage_report_from_rows`]).
    #[doc(hidden)]
    pub async fn daily_costs_from_rows(
        &self,
        from_ms: i64,
        days: u32,
        tz_offset_s: i32,
    ) -> Result<Vec<DayCost>, StoreError> {
        self.read(move |c, p| spend::daily_costs(c, p, from_ms, days, tz_offset_s, spend::Source::Rows))
            .await
    }

    /// What the session has cost so far, and what every session (in every
    /// process sharing the file) has cost in `[day_start_ms, day_end_ms)`.
    /// Answered from covering indexes; cheap enough to call before each request.
    /// Calls whose usage rows this store could not write yet (or lost) count
    /// too: a full disk never lets a budget be passed.
    pub async fn spend(&self, session_id: &str, day_start_ms: i64, day_end_ms: i64) -> Result<Spend, StoreError> {
        // Read first: a kept row written meanwhile is counted twice, never missed.
        let (session_unwritten, day_unwritten) =
            self.inner.unsaved.unwritten_spend(session_id, day_start_ms, day_end_ms);
        let id = session_id.to_string();
        let stored = self
            .read(move |c, p| spend::spend(c, p, &id, day_start_ms, day_end_ms))
            .await?;
        Ok(Spend {
            session_usd: stored.session_usd + session_unwritten,
            day_usd: stored.day_usd + day_unwritten,
        })
    }

    /// Every usage row of `query`'s range as CSV or JSON text, in chunks of
    /// lines (see [`export`]); read on the blocking pool, row by row.
    pub async fn export_usage(&self, query: export::ExportQuery) -> Result<export::Export, StoreError> {
        self.read(move |c, p| export::export(c, p, &query)).await
    }

    /// Runs `f` on a pooled read connection on tokio's blocking pool.
    async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &Path) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || inner.readers.with(|c| f(c, &inner.path)))
            .await
            .map_err(|e| StoreError::ReadFailed {
                path: self.inner.path.clone(),
                detail: e.to_string(),
            })?
    }
}
