//! The database layout and how a file gets there: connection settings and
//! migrations keyed by `PRAGMA user_version`.
//!
//! A migration is one SQL script; `MIGRATIONS[i]` turns a version-`i` file
//! into a version-`i + 1` one. Append new steps, never edit shipped ones:
//! users' files already ran them.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use super::error::{from_sqlite, StoreError};

/// How long one statement waits for another connection's lock before SQLite
/// reports `SQLITE_BUSY`. Several Neovim instances share the file; their
/// write transactions are short, so 5 s only runs out when one is stuck.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The schema version this build writes; files at a higher version are refused.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Version 1: sessions, their messages, and one usage row per provider call.
///
/// - `usage.session_id` is deliberately not a foreign key: money spent stays
///   spent when a session is deleted, and budgets (`spend`) and reports must
///   keep counting it.
/// - `usage_by_time` covers the day-spend and daily-cost queries (range on
///   time, filter on `cost_known`, sum `total_usd`) without touching the table.
/// - Reports over a time range walk `usage_by_time` and read the table rows
///   it points to. Rows are appended in time order, so those reads are
///   sequential: a covering index of every report column was measured at
///   under 10% faster (1M rows, 78k in the week) for twice the disk and
///   slower inserts, and is not worth it.
/// - `usage_by_session` covers per-session spend and list summaries.
/// - `sessions_by_cwd_recent` / `sessions_recent` serve keyset pagination
///   with and without a cwd filter.
const V1: &str = "
CREATE TABLE sessions (
    id            TEXT PRIMARY KEY NOT NULL,
    cwd           TEXT NOT NULL,
    title         TEXT,
    mode          TEXT NOT NULL,
    model         TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    meta          TEXT NOT NULL DEFAULT '{}'
) STRICT;
CREATE INDEX sessions_by_cwd_recent ON sessions (cwd, updated_at_ms DESC, id DESC);
CREATE INDEX sessions_recent ON sessions (updated_at_ms DESC, id DESC);

CREATE TABLE messages (
    id            TEXT PRIMARY KEY NOT NULL,
    session_id    TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq           INTEGER NOT NULL,
    role          TEXT NOT NULL,
    parts         TEXT NOT NULL,
    state         TEXT NOT NULL CHECK (state IN ('streaming', 'complete', 'cancelled', 'error')),
    meta          TEXT NOT NULL DEFAULT '{}',
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    UNIQUE (session_id, seq)
) STRICT;

CREATE TABLE usage (
    id                 INTEGER PRIMARY KEY,
    session_id         TEXT,
    message_id         TEXT,
    agent              TEXT NOT NULL,
    provider           TEXT NOT NULL,
    model              TEXT NOT NULL,
    input_tokens       INTEGER NOT NULL DEFAULT 0,
    output_tokens      INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens  INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens   INTEGER NOT NULL DEFAULT 0,
    estimated          INTEGER NOT NULL DEFAULT 0 CHECK (estimated IN (0, 1)),
    cost_known         INTEGER NOT NULL CHECK (cost_known IN (0, 1)),
    input_usd          REAL NOT NULL DEFAULT 0,
    output_usd         REAL NOT NULL DEFAULT 0,
    cache_read_usd     REAL NOT NULL DEFAULT 0,
    cache_write_usd    REAL NOT NULL DEFAULT 0,
    total_usd          REAL NOT NULL DEFAULT 0,
    started_at_ms      INTEGER NOT NULL,
    duration_ms        INTEGER NOT NULL,
    created_at_ms      INTEGER NOT NULL
) STRICT;
CREATE INDEX usage_by_time ON usage (created_at_ms, cost_known, total_usd);
CREATE INDEX usage_by_session ON usage (session_id, cost_known, total_usd);
";

/// Version 2: compaction is a message of its own.
///
/// - `kind` says what a row is: `'message'` (a prompt, answer or tool
///   results, as before) or `'compaction'` (a summary that stands for the
///   messages `covers_from..=covers_to` of its session in requests to the
///   model; those messages stay for display and resume).
/// - The range columns are set exactly on compaction rows (the CHECK says so),
///   so a reader never has to guess from the text what a row is.
/// - `messages_compactions` (partial: compaction rows only) lets listings
///   count a session's messages without its compactions while still
///   counting from the `UNIQUE (session_id, seq)` index alone.
/// - A session's next `seq` (`max(seq) + 1`, taken inside the write
///   transaction) comes from the `UNIQUE (session_id, seq)` index; no new
///   index is needed.
const V2: &str = "
ALTER TABLE messages ADD COLUMN kind TEXT NOT NULL DEFAULT 'message' CHECK (kind IN ('message', 'compaction'));
ALTER TABLE messages ADD COLUMN covers_from INTEGER;
ALTER TABLE messages ADD COLUMN covers_to INTEGER CHECK (
    (kind = 'compaction') = (covers_from IS NOT NULL AND covers_to IS NOT NULL AND covers_from <= covers_to)
);
CREATE INDEX messages_compactions ON messages (session_id, seq) WHERE kind = 'compaction';
";

/// Every migration step in order (see the module docs).
pub(crate) const MIGRATIONS: &[&str] = &[V1, V2];

/// Opens the connection that writes: WAL (readers never block the writer nor
/// each other, across processes), `synchronous=NORMAL` (durable at every
/// checkpoint, and a crash loses at most the last transactions, never
/// consistency), foreign keys (message cascade), and the busy timeout.
/// Migrates the file to [`SCHEMA_VERSION`] or refuses a newer one.
pub(crate) fn open_writer(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open(path).map_err(|e| from_sqlite(path, "opening", &e))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|e| from_sqlite(path, "setting the busy timeout", &e))?;
    // journal_mode answers with the mode in effect; anything but "wal" means
    // the file cannot be shared safely (e.g. a filesystem without shared memory).
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .map_err(|e| from_sqlite(path, "switching to WAL mode", &e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Open {
            path: path.to_path_buf(),
            detail: format!(
                "SQLite kept journal mode {mode:?} instead of WAL (the filesystem may not support shared memory, \
                 e.g. a network mount); put data_dir on a local disk"
            ),
        });
    }
    conn.execute_batch(
        "PRAGMA synchronous = NORMAL;
         PRAGMA foreign_keys = ON;
         PRAGMA journal_size_limit = 67108864;",
    )
    .map_err(|e| from_sqlite(path, "configuring the connection", &e))?;
    migrate(&conn, path, MIGRATIONS)?;
    Ok(conn)
}

/// Opens a connection for reads only. Query-only mode makes a bug that
/// writes through a reader fail loudly instead of racing the writer thread.
pub(crate) fn open_reader(path: &Path) -> Result<Connection, StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| from_sqlite(path, "opening for reading", &e))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|e| from_sqlite(path, "setting the busy timeout", &e))?;
    conn.execute_batch("PRAGMA query_only = ON;")
        .map_err(|e| from_sqlite(path, "configuring a reader", &e))?;
    Ok(conn)
}

/// Brings the file from its `user_version` to `steps.len()`, one transaction
/// per step so a failure leaves the file at a consistent older version.
///
/// The version is read again inside each write transaction: two Neovims
/// opening a fresh file at the same moment must not both run step 1.
pub(crate) fn migrate(conn: &Connection, path: &Path, steps: &[&str]) -> Result<(), StoreError> {
    let supported = steps.len() as i64;
    loop {
        let tx = rusqlite::Transaction::new_unchecked(conn, TransactionBehavior::Immediate)
            .map_err(|e| from_sqlite(path, "starting a migration", &e))?;
        let found = user_version(&tx, path)?;
        if found > supported {
            return Err(StoreError::NewerSchema {
                path: path.to_path_buf(),
                found,
                supported,
            });
        }
        if found == supported {
            return Ok(());
        }
        let Some(step) = usize::try_from(found).ok().and_then(|i| steps.get(i)) else {
            return Err(StoreError::Corrupt {
                path: path.to_path_buf(),
                detail: format!("negative schema version {found}"),
            });
        };
        tx.execute_batch(step)
            .map_err(|e| from_sqlite(path, "migrating the schema", &e))?;
        tx.pragma_update(None, "user_version", found + 1)
            .map_err(|e| from_sqlite(path, "recording the schema version", &e))?;
        tx.commit()
            .map_err(|e| from_sqlite(path, "committing a migration", &e))?;
        tracing::info!(path = %path.display(), version = found + 1, "store: migrated schema");
    }
}

/// The file's `PRAGMA user_version`; this is also the first read of a newly
/// opened file, so a non-database file surfaces here as `Corrupt`.
fn user_version(conn: &Connection, path: &Path) -> Result<i64, StoreError> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| from_sqlite(path, "reading the schema version", &e))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STEPS: &[&str] = &[
        "CREATE TABLE a (x INTEGER);",
        "ALTER TABLE a ADD COLUMN y INTEGER DEFAULT 7;",
    ];

    #[test]
    fn migration_runs_only_the_missing_steps() {
        let conn = Connection::open_in_memory().unwrap();
        let path = Path::new(":memory:");
        migrate(&conn, path, &STEPS[..1]).unwrap();
        conn.execute("INSERT INTO a (x) VALUES (1)", []).unwrap();
        migrate(&conn, path, STEPS).unwrap();
        let (x, y): (i64, i64) = conn
            .query_row("SELECT x, y FROM a", [], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap();
        assert_eq!((x, y), (1, 7));
        assert_eq!(user_version(&conn, path).unwrap(), 2);
        // Running again is a no-op rather than a duplicate-column error.
        migrate(&conn, path, STEPS).unwrap();
    }

    #[test]
    fn failed_step_leaves_the_previous_version() {
        let conn = Connection::open_in_memory().unwrap();
        let path = Path::new(":memory:");
        let err = migrate(&conn, path, &[STEPS[0], "CREATE TABLE b (; nonsense"]).unwrap_err();
        assert!(matches!(err, StoreError::Sqlite { .. }), "{err}");
        assert_eq!(user_version(&conn, path).unwrap(), 1);
    }

    #[test]
    fn newer_file_is_refused() {
        let conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "user_version", 5).unwrap();
        let err = migrate(&conn, Path::new("x.db"), STEPS).unwrap_err();
        assert_eq!(
            err,
            StoreError::NewerSchema {
                path: "x.db".into(),
                found: 5,
                supported: 2
            }
        );
    }
}
