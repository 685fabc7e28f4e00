//! The one thread per `Store` that writes.
//!
//! Callers send a [`Job`] with a oneshot reply; the thread takes everything
//! queued at that moment (up to [`MAX_BATCH`]) and commits it as one
//! transaction, so many small writes cost one fsync-free WAL append instead
//! of one transaction each. Replies go out only after the commit, so an
//! `Ok` means "on disk for every other connection to see".
//!
//! A job that fails on its own (unknown session, taken seq) gets its error
//! while the rest of its batch commits: a failed statement does not end a
//! SQLite transaction. A failure that does end it (lock timeout, full disk,
//! I/O) fails or retries the whole batch; a batch that fails as a whole
//! is kept and written later ([`super::unsaved`]).

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mia_cost::CostSource;
use rusqlite::{params, Connection};
use tokio::sync::oneshot;

use super::error::{extended_code, from_sqlite, is_busy, StoreError, CONSTRAINT_FOREIGNKEY, CONSTRAINT_UNIQUE};
use super::rows::{MessageRow, SessionRow, UsageRow};
use super::unsaved::{Held, Shared};

/// Most jobs committed in one transaction; bounds how long the write lock is
/// held (other Neovims wait on it) and how much one failure can take down.
const MAX_BATCH: usize = 1024;

/// How long a batch keeps retrying `SQLITE_BUSY` (each try already waits the
/// busy timeout) before its callers get [`StoreError::Busy`].
const MAX_BUSY_WAIT: Duration = Duration::from_secs(30);

/// What a job returns: the new row id for `RecordUsage`, the message's `seq`
/// for `AppendMessage` and `AppendCompaction`, 0 otherwise.
pub(crate) type Outcome = Result<i64, StoreError>;

/// One write, as the async API hands it to the thread.
pub(crate) enum Job {
    UpsertSession(SessionRow),
    TouchSession {
        id: String,
        updated_at_ms: i64,
    },
    RenameSession {
        id: String,
        title: Option<String>,
    },
    DeleteSession {
        id: String,
    },
    UpsertMessage(MessageRow),
    /// Inserts a message at the session's next `seq`, or updates it by id
    /// keeping its `seq`; the outcome is the row's `seq`.
    AppendMessage(MessageRow),
    /// Appends a compaction summary covering all but the session's latest
    /// `keep_last` plain messages; the outcome is the new row's `seq`.
    AppendCompaction {
        row: MessageRow,
        keep_last: u32,
    },
    RecordUsage(UsageRow),
    /// Copies the WAL into the main file and truncates it; runs outside any
    /// transaction, after the jobs queued before it.
    Checkpoint,
}

struct Request {
    job: Job,
    reply: oneshot::Sender<Outcome>,
}

/// The handle to the writer thread. Dropping it lets the thread finish every
/// job already queued, then waits for it to exit, so nothing accepted is lost.
pub(crate) struct Writer {
    path: PathBuf,
    tx: Option<mpsc::Sender<Request>>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    /// Starts the thread that owns `conn` (already configured and migrated);
    /// what it cannot write yet, it keeps and says in `shared`.
    pub(crate) fn spawn(conn: Connection, path: &Path, shared: std::sync::Arc<Shared>) -> Result<Writer, StoreError> {
        let (tx, rx) = mpsc::channel::<Request>();
        let thread_path = path.to_path_buf();
        let thread = std::thread::Builder::new()
            .name("mia-store-writer".into())
            .spawn(move || run(conn, &thread_path, rx, Held::new(shared)))
            .map_err(|e| StoreError::Open {
                path: path.to_path_buf(),
                detail: format!("cannot start the writer thread: {e}"),
            })?;
        Ok(Writer {
            path: path.to_path_buf(),
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Queues `job` and waits for its commit without blocking the runtime.
    pub(crate) async fn submit(&self, job: Job) -> Outcome {
        let stopped = || StoreError::WriterStopped {
            path: self.path.clone(),
        };
        let (reply, answer) = oneshot::channel();
        let tx = self.tx.as_ref().ok_or_else(stopped)?;
        tx.send(Request { job, reply }).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!(path = %self.path.display(), "store: writer thread panicked");
            }
        }
    }
}

// The writes every turn makes, prepared while the writer is idle (see
// `warm_up`). A usage row's insert is the costly one: preparing it
// compiles the rollup trigger (`schema.rs`) into it, ~1 ms.
const UPSERT_SESSION: &str = "INSERT INTO sessions (id, cwd, title, mode, model, created_at_ms, updated_at_ms, meta)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
         ON CONFLICT (id) DO UPDATE SET
             cwd = excluded.cwd, title = coalesce(excluded.title, sessions.title), mode = excluded.mode,
             model = excluded.model,
             updated_at_ms = excluded.updated_at_ms, meta = excluded.meta";
const APPEND_MESSAGE: &str =
    "INSERT INTO messages (id, session_id, seq, role, parts, state, meta, created_at_ms, updated_at_ms,
                                   kind, covers_from, covers_to)
             VALUES (?1, ?2, (SELECT coalesce(max(seq), -1) + 1 FROM messages WHERE session_id = ?2),
                     ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
             ON CONFLICT (id) DO UPDATE SET
                 parts = excluded.parts, state = excluded.state, meta = excluded.meta,
                 updated_at_ms = excluded.updated_at_ms
             WHERE messages.session_id = excluded.session_id
               AND (excluded.state <> 'streaming'
                    OR (messages.state = 'streaming' AND messages.updated_at_ms <= excluded.updated_at_ms))";
const UPSERT_MESSAGE: &str =
    "INSERT INTO messages (id, session_id, seq, role, parts, state, meta, created_at_ms, updated_at_ms,
                                   kind, covers_from, covers_to)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
             ON CONFLICT (id) DO UPDATE SET
                 session_id = excluded.session_id, seq = excluded.seq, role = excluded.role,
                 parts = excluded.parts, state = excluded.state, meta = excluded.meta,
                 updated_at_ms = excluded.updated_at_ms, kind = excluded.kind,
                 covers_from = excluded.covers_from, covers_to = excluded.covers_to
             WHERE excluded.state <> 'streaming'
                OR (messages.state = 'streaming' AND messages.updated_at_ms <= excluded.updated_at_ms)";
const INSERT_USAGE: &str = "INSERT INTO usage (session_id, message_id, agent, provider, model,
                 input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens,
                 estimated, cost_known, input_usd, output_usd, cache_read_usd, cache_write_usd, total_usd,
                 started_at_ms, duration_ms, created_at_ms, cost_source)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)";

/// In the order a turn first needs them: its prompt (session, message), the
/// answer's checkpoints, then its usage row.
const WARM: [&str; 4] = [UPSERT_SESSION, APPEND_MESSAGE, UPSERT_MESSAGE, INSERT_USAGE];

/// Prepares the next statement of [`WARM`] not yet in the connection's
/// cache; false once all are. One at a time, between requests, so that a
/// write that arrives meanwhile waits for one statement at most. A failure
/// is left for the write that needs the statement to report.
fn warm_up(conn: &Connection, warmed: &mut usize) -> bool {
    let Some(sql) = WARM.get(*warmed) else {
        return false;
    };
    *warmed += 1;
    let _ = conn.prepare_cached(sql);
    true
}

/// The thread body: block for one request, drain what else is queued, write.
/// While nothing is queued, the statements every turn needs are prepared
/// first, so that a new Neovim's first turn does not wait for them. While
/// writes are kept ([`Held`]), they are tried again every [`super::unsaved::RETRY_EVERY`],
/// with whatever was written meanwhile kept behind them.
fn run(conn: Connection, path: &Path, rx: mpsc::Receiver<Request>, mut held: Held) {
    let mut warmed = 0;
    loop {
        let first = match rx.try_recv() {
            Ok(request) => request,
            Err(mpsc::TryRecvError::Disconnected) => return leave(&conn, path, &mut held),
            Err(mpsc::TryRecvError::Empty) => {
                if warm_up(&conn, &mut warmed) {
                    continue;
                }
                match held.next_try() {
                    None => match rx.recv() {
                        Ok(request) => request,
                        Err(_) => return,
                    },
                    Some(wait) => match rx.recv_timeout(wait) {
                        Ok(request) => request,
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            commit_and_reply(&conn, path, Vec::new(), &mut held);
                            continue;
                        }
                        Err(mpsc::RecvTimeoutError::Disconnected) => return leave(&conn, path, &mut held),
                    },
                }
            }
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let mut pending: Vec<Request> = Vec::with_capacity(batch.len());
        for request in batch {
            if matches!(request.job, Job::Checkpoint) {
                commit_and_reply(&conn, path, std::mem::take(&mut pending), &mut held);
                let outcome = checkpoint(&conn, path);
                let _ = request.reply.send(outcome);
            } else {
                pending.push(request);
            }
        }
        commit_and_reply(&conn, path, pending, &mut held);
    }
}

/// The store is being closed: the kept writes get a last try, and what
/// still fails is logged as lost.
fn leave(conn: &Connection, path: &Path, held: &mut Held) {
    if held.is_empty() {
        return;
    }
    held.try_now();
    commit_and_reply(conn, path, Vec::new(), held);
    if !held.is_empty() {
        let lost = held.len();
        tracing::error!(path = %path.display(), lost, "store: writes kept in memory are lost as the store closes");
    }
}

/// Commits the kept writes, then `requests`, as one transaction (so the
/// store numbers them in the order they were made) and answers each
/// caller. A caller that stopped waiting (its future was dropped) is
/// simply not answered; its write still happened. When the whole
/// transaction fails, every write in it is kept to be tried again.
fn commit_and_reply(conn: &Connection, path: &Path, requests: Vec<Request>, held: &mut Held) {
    if let Some(err) = held.failing() {
        for request in requests {
            let _ = request.reply.send(Err(err.clone()));
            held.hold(request.job, &err);
        }
        return;
    }
    let retried = held.len();
    if requests.is_empty() && retried == 0 {
        return;
    }
    let jobs: Vec<&Job> = held.jobs().chain(requests.iter().map(|r| &r.job)).collect();
    match commit_with_retry(conn, path, &jobs) {
        Ok(outcomes) => {
            let mut outcomes = outcomes.into_iter();
            for outcome in outcomes.by_ref().take(retried) {
                if let Err(e) = outcome {
                    tracing::warn!(path = %path.display(), error = %e, "store: a kept write failed");
                }
            }
            for (request, outcome) in requests.into_iter().zip(outcomes) {
                let _ = request.reply.send(outcome);
            }
            if retried > 0 {
                tracing::info!(path = %path.display(), written = retried, "store: writes kept in memory are written");
            }
            held.written(retried);
        }
        Err(err) => {
            if retried == 0 {
                tracing::warn!(path = %path.display(), jobs = requests.len(), error = %err, "store: write batch failed");
            }
            held.failed(&err);
            for request in requests {
                let _ = request.reply.send(Err(err.clone()));
                held.hold(request.job, &err);
            }
        }
    }
}

/// Why a whole batch did not commit.
enum BatchFailure {
    /// Another connection held the lock past the busy timeout: retry it all.
    Busy,
    /// Anything else that ended the transaction: report it to every job.
    Fatal(StoreError),
}

fn commit_with_retry(conn: &Connection, path: &Path, jobs: &[&Job]) -> Result<Vec<Outcome>, StoreError> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(5);
    loop {
        match try_commit(conn, path, jobs) {
            Ok(outcomes) => return Ok(outcomes),
            Err(BatchFailure::Fatal(err)) => return Err(err),
            Err(BatchFailure::Busy) => {
                let waited = started.elapsed();
                if waited >= MAX_BUSY_WAIT {
                    return Err(StoreError::Busy {
                        path: path.to_path_buf(),
                        waited_ms: waited.as_millis() as u64,
                    });
                }
                tracing::debug!(path = %path.display(), waited_ms = waited.as_millis() as u64, "store: busy, retrying batch");
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(200));
            }
        }
    }
}

/// One attempt: `BEGIN IMMEDIATE` takes the write lock up front (waiting up
/// to the busy timeout), so the jobs themselves never meet `SQLITE_BUSY`
/// halfway through and the batch is all-or-nothing on lock contention.
fn try_commit(conn: &Connection, path: &Path, jobs: &[&Job]) -> Result<Vec<Outcome>, BatchFailure> {
    let fail = |op: &'static str, e: &rusqlite::Error| {
        if is_busy(e) {
            BatchFailure::Busy
        } else {
            BatchFailure::Fatal(from_sqlite(path, op, e))
        }
    };
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(|e| fail("starting a write", &e))?;
    let mut outcomes = Vec::with_capacity(jobs.len());
    for job in jobs {
        match apply(conn, path, job) {
            Ok(id) => outcomes.push(Ok(id)),
            Err(JobError::Own(err)) => outcomes.push(Err(err)),
            Err(JobError::Sqlite(op, e)) => {
                if conn.is_autocommit() {
                    // SQLite rolled the whole transaction back (I/O, full disk...).
                    return Err(fail(op, &e));
                }
                if lasting(&e) {
                    // Not this job's own fault: the batch is kept and tried again whole.
                    let _ = conn.execute_batch("ROLLBACK");
                    return Err(fail(op, &e));
                }
                outcomes.push(Err(from_sqlite(path, op, &e)));
            }
        }
    }
    if let Err(e) = conn.execute_batch("COMMIT") {
        if !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        return Err(fail("committing", &e));
    }
    Ok(outcomes)
}

/// True for a failure of the file rather than of one write (a full disk, an
/// I/O error, a file made read-only): every write would meet it.
fn lasting(e: &rusqlite::Error) -> bool {
    use rusqlite::ffi::ErrorCode;
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DiskFull | ErrorCode::SystemIoFailure | ErrorCode::ReadOnly | ErrorCode::CannotOpen)
    )
}

/// A job's own failure, or a SQLite error to classify in the batch context.
enum JobError {
    Own(StoreError),
    Sqlite(&'static str, rusqlite::Error),
}

fn sqlite(op: &'static str) -> impl FnOnce(rusqlite::Error) -> JobError {
    move |e| JobError::Sqlite(op, e)
}

fn apply(conn: &Connection, path: &Path, job: &Job) -> Result<i64, JobError> {
    match job {
        Job::UpsertSession(row) => upsert_session(conn, row),
        Job::TouchSession { id, updated_at_ms } => {
            let n = conn
                .prepare_cached("UPDATE sessions SET updated_at_ms = max(updated_at_ms, ?2) WHERE id = ?1")
                .and_then(|mut s| s.execute(params![id, updated_at_ms]))
                .map_err(sqlite("touching a session"))?;
            found(n, id)
        }
        Job::RenameSession { id, title } => {
            let n = conn
                .prepare_cached("UPDATE sessions SET title = ?2 WHERE id = ?1")
                .and_then(|mut s| s.execute(params![id, title]))
                .map_err(sqlite("renaming a session"))?;
            found(n, id)
        }
        Job::DeleteSession { id } => {
            conn.prepare_cached("DELETE FROM sessions WHERE id = ?1")
                .and_then(|mut s| s.execute(params![id]))
                .map_err(sqlite("deleting a session"))?;
            Ok(0)
        }
        Job::UpsertMessage(row) => upsert_message(conn, row),
        Job::AppendMessage(row) => append_message(conn, row),
        Job::AppendCompaction { row, keep_last } => append_compaction(conn, row, *keep_last),
        Job::RecordUsage(row) => record_usage(conn, row),
        Job::Checkpoint => Err(JobError::Own(StoreError::Sqlite {
            op: "checkpointing",
            path: path.to_path_buf(),
            detail: "a checkpoint cannot run inside a transaction".into(),
        })),
    }
}

fn found(changed: usize, id: &str) -> Result<i64, JobError> {
    if changed == 0 {
        return Err(JobError::Own(StoreError::SessionNotFound { id: id.to_string() }));
    }
    Ok(0)
}

fn json_text(value: &serde_json::Value) -> String {
    // Serializing a `Value` cannot fail (its map keys are always strings).
    value.to_string()
}

fn upsert_session(conn: &Connection, row: &SessionRow) -> Result<i64, JobError> {
    conn.prepare_cached(UPSERT_SESSION)
        .and_then(|mut s| {
            s.execute(params![
                row.id,
                row.cwd,
                row.title,
                row.mode,
                row.model,
                row.created_at_ms,
                row.updated_at_ms,
                json_text(&row.meta),
            ])
        })
        .map_err(sqlite("saving a session"))?;
    Ok(0)
}

/// The row's role as stored, after checking that its parts are a JSON array.
fn checked_role(row: &MessageRow) -> Result<String, JobError> {
    if !row.parts.is_array() {
        return Err(JobError::Own(StoreError::InvalidInput {
            detail: format!("message {:?}: parts must be a JSON array", row.id),
        }));
    }
    role_text(row)
}

fn upsert_message(conn: &Connection, row: &MessageRow) -> Result<i64, JobError> {
    let role = checked_role(row)?;
    let (covers_from, covers_to) = row.kind.covers();
    let result = conn.prepare_cached(UPSERT_MESSAGE).and_then(|mut s| {
        s.execute(params![
            row.id,
            row.session_id,
            row.seq,
            role,
            json_text(&row.parts),
            row.state.as_str(),
            json_text(&row.meta),
            row.created_at_ms,
            row.updated_at_ms,
            row.kind.as_str(),
            covers_from,
            covers_to,
        ])
    });
    message_outcome(result.map(|_| 0), row)
}

/// Maps a message write's constraint failures to the caller's own errors.
fn message_outcome(result: rusqlite::Result<i64>, row: &MessageRow) -> Result<i64, JobError> {
    match result {
        Ok(seq) => Ok(seq),
        Err(e) if extended_code(&e) == Some(CONSTRAINT_FOREIGNKEY) => Err(JobError::Own(StoreError::SessionNotFound {
            id: row.session_id.clone(),
        })),
        Err(e) if extended_code(&e) == Some(CONSTRAINT_UNIQUE) => Err(JobError::Own(StoreError::SeqTaken {
            id: row.id.clone(),
            session_id: row.session_id.clone(),
            seq: row.seq,
        })),
        Err(e) => Err(JobError::Sqlite("saving a message", e)),
    }
}

/// Inserts `row` at `max(seq) + 1` of its session, read inside this write
/// transaction (which holds the database's write lock, so no other
/// connection can take the same number); a row whose id exists keeps its
/// `seq` and is updated like [`upsert_message`] would (a late `Streaming`
/// checkpoint never replaces a finished message). Returns the row's `seq`.
fn append_message(conn: &Connection, row: &MessageRow) -> Result<i64, JobError> {
    let role = checked_role(row)?;
    let (covers_from, covers_to) = row.kind.covers();
    let result = conn
        .prepare_cached(APPEND_MESSAGE)
        .and_then(|mut s| {
            s.execute(params![
                row.id,
                row.session_id,
                role,
                json_text(&row.parts),
                row.state.as_str(),
                json_text(&row.meta),
                row.created_at_ms,
                row.updated_at_ms,
                row.kind.as_str(),
                covers_from,
                covers_to,
            ])
        })
        .and_then(|_| {
            conn.prepare_cached("SELECT seq FROM messages WHERE id = ?1 AND session_id = ?2")
                .and_then(|mut s| s.query_row(params![row.id, row.session_id], |r| r.get::<_, i64>(0)))
        });
    match result {
        Err(rusqlite::Error::QueryReturnedNoRows) => Err(JobError::Own(StoreError::InvalidInput {
            detail: format!(
                "message id {:?} belongs to another session than {:?}",
                row.id, row.session_id
            ),
        })),
        other => message_outcome(other, row),
    }
}

/// Appends a compaction summary that covers the session's messages from its
/// first `seq` up to (not including) its latest `keep_last` plain messages,
/// both read inside this write transaction. Fails with `InvalidInput` when
/// nothing is left to cover.
fn append_compaction(conn: &Connection, row: &MessageRow, keep_last: u32) -> Result<i64, JobError> {
    let range = conn
        .prepare_cached(
            "SELECT (SELECT min(seq) FROM messages WHERE session_id = ?1),
                    (SELECT seq FROM messages WHERE session_id = ?1 AND kind = 'message' AND parts <> '[]'
                     ORDER BY seq DESC LIMIT 1 OFFSET ?2)",
        )
        .and_then(|mut s| {
            s.query_row(params![row.session_id, i64::from(keep_last)], |r| {
                Ok((r.get::<_, Option<i64>>(0)?, r.get::<_, Option<i64>>(1)?))
            })
        })
        .map_err(sqlite("reading the range to compact"))?;
    let (Some(covers_from), Some(covers_to)) = range else {
        return Err(JobError::Own(StoreError::InvalidInput {
            detail: format!(
                "session {:?} has no message older than its latest {keep_last} to compact",
                row.session_id
            ),
        }));
    };
    let mut row = row.clone();
    row.kind = super::rows::MessageKind::Compaction { covers_from, covers_to };
    append_message(conn, &row)
}

/// The role as the text `Role` serializes to, so Lua and the table agree.
fn role_text(row: &MessageRow) -> Result<String, JobError> {
    match serde_json::to_value(row.role) {
        Ok(serde_json::Value::String(s)) => Ok(s),
        _ => Err(JobError::Own(StoreError::InvalidInput {
            detail: format!("message {:?}: its role does not serialize to a string", row.id),
        })),
    }
}

/// Inserts one usage row. The insert's trigger (`schema::V3`) adds it to the
/// usage rollup in the same statement, so the row and its sums commit or
/// fail together in this batch's transaction.
fn record_usage(conn: &Connection, row: &UsageRow) -> Result<i64, JobError> {
    let tokens = [
        ("input_tokens", row.input_tokens),
        ("output_tokens", row.output_tokens),
        ("cache_read_tokens", row.cache_read_tokens),
        ("cache_write_tokens", row.cache_write_tokens),
        ("reasoning_tokens", row.reasoning_tokens),
    ];
    let mut counts = [0i64; 5];
    for (slot, (name, value)) in counts.iter_mut().zip(tokens) {
        *slot = i64::try_from(value).map_err(|_| {
            JobError::Own(StoreError::InvalidInput {
                detail: format!("usage {name} = {value} does not fit in a 64-bit signed integer"),
            })
        })?;
    }
    let usd = [
        row.input_usd,
        row.output_usd,
        row.cache_read_usd,
        row.cache_write_usd,
        row.total_usd,
    ];
    // A NaN or infinite price would poison every sum it joins; such a row is
    // kept (its tokens still count) but marked as having no known cost.
    let cost_known = row.cost_known && usd.iter().all(|v| v.is_finite());
    let usd = usd.map(|v| if v.is_finite() { v } else { 0.0 });
    let source = match row.cost_source {
        CostSource::Gateway if cost_known => "gateway",
        _ => "local",
    };
    let mut stmt = conn.prepare_cached(INSERT_USAGE).map_err(sqlite("recording usage"))?;
    stmt.execute(params![
        row.session_id,
        row.message_id,
        row.agent,
        row.provider,
        row.model,
        counts[0],
        counts[1],
        counts[2],
        counts[3],
        counts[4],
        row.estimated,
        cost_known,
        usd[0],
        usd[1],
        usd[2],
        usd[3],
        usd[4],
        row.started_at_ms,
        row.duration_ms,
        row.created_at_ms,
        source,
    ])
    .map_err(sqlite("recording usage"))?;
    Ok(conn.last_insert_rowid())
}

fn checkpoint(conn: &Connection, path: &Path) -> Outcome {
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .map_err(|e| from_sqlite(path, "checkpointing", &e))?;
    Ok(0)
}
