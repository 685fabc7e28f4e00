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

/// The rollup's bucket of a time in ms: `floor(t / len)` for any sign of
/// `t` (SQLite's `/` and `%` truncate toward zero). `hour!` and `day!` name
/// the two lengths. Shared by the trigger, the backfill and the readers.
macro_rules! bucket {
    ($t:literal, $len:literal) => {
        concat!("((", $t, " - ((", $t, " % ", $len, ") + ", $len, ") % ", $len, ") / ", $len, ")")
    };
}
macro_rules! hour {
    ($t:literal) => {
        bucket!($t, "3600000")
    };
}
macro_rules! quarter {
    ($t:literal) => {
        bucket!($t, "900000")
    };
}
macro_rules! day {
    ($t:literal) => {
        bucket!($t, "86400000")
    };
}

/// One USD column of a usage row as whole nano-dollars, the unit every
/// report sums in: integer sums are exact in any order, so a report read
/// from the rollup equals, to the last bit, the same report summed from the
/// rows. A call is capped at $1,000,000 either way (keeps the sums in range;
/// no real call comes near it).
macro_rules! nusd {
    ($c:literal) => {
        concat!("CAST(round(max(min(", $c, ", 1e6), -1e6) * 1e9) AS INTEGER)")
    };
}
pub(crate) use nusd;

/// The columns a rollup bucket sums, after its key columns; the rollup
/// tables list them in this order.
macro_rules! rollup_columns {
    () => {
        "requests, input_tokens, output_tokens, max_output_tokens, cache_read_tokens, cache_write_tokens,
         reasoning_tokens, input_nusd, output_nusd, cache_read_nusd, cache_write_nusd, total_nusd, duration_ms,
         first_at_ms, last_at_ms"
    };
}

/// A rollup table's definition, keyed by `$bucket` (hour or day number).
macro_rules! rollup_table {
    ($name:literal, $bucket:literal) => {
        concat!(
            "CREATE TABLE ",
            $name,
            " (
    ",
            $bucket,
            "               INTEGER NOT NULL,
    agent              TEXT NOT NULL,
    provider           TEXT NOT NULL,
    model              TEXT NOT NULL,
    cost_known         INTEGER NOT NULL,
    requests           INTEGER NOT NULL,
    input_tokens       INTEGER NOT NULL,
    output_tokens      INTEGER NOT NULL,
    max_output_tokens  INTEGER NOT NULL,
    cache_read_tokens  INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    reasoning_tokens   INTEGER NOT NULL,
    input_nusd         INTEGER NOT NULL,
    output_nusd        INTEGER NOT NULL,
    cache_read_nusd    INTEGER NOT NULL,
    cache_write_nusd   INTEGER NOT NULL,
    total_nusd         INTEGER NOT NULL,
    duration_ms        INTEGER NOT NULL,
    first_at_ms        INTEGER NOT NULL,
    last_at_ms         INTEGER NOT NULL,
    PRIMARY KEY (",
            $bucket,
            ", agent, provider, model, cost_known)
) STRICT, WITHOUT ROWID;
"
        )
    };
}

/// The trigger statement that adds the new usage row to one rollup table.
macro_rules! rollup_add {
    ($name:literal, $bucket:literal, $len:literal) => {
        concat!(
            "INSERT INTO ",
            $name,
            " (",
            $bucket,
            ", agent, provider, model, cost_known, ",
            rollup_columns!(),
            ")
    VALUES (",
            bucket!("NEW.created_at_ms", $len),
            ", NEW.agent, NEW.provider, NEW.model, NEW.cost_known, 1,
            max(NEW.input_tokens, 0), max(NEW.output_tokens, 0), max(NEW.output_tokens, 0),
            max(NEW.cache_read_tokens, 0), max(NEW.cache_write_tokens, 0), max(NEW.reasoning_tokens, 0), ",
            nusd!("NEW.input_usd"),
            ", ",
            nusd!("NEW.output_usd"),
            ", ",
            nusd!("NEW.cache_read_usd"),
            ", ",
            nusd!("NEW.cache_write_usd"),
            ", ",
            nusd!("NEW.total_usd"),
            ", max(NEW.duration_ms, 0), NEW.created_at_ms, NEW.created_at_ms)
    ON CONFLICT DO UPDATE SET
        requests = requests + 1,
        input_tokens = input_tokens + excluded.input_tokens,
        output_tokens = output_tokens + excluded.output_tokens,
        max_output_tokens = max(max_output_tokens, excluded.max_output_tokens),
        cache_read_tokens = cache_read_tokens + excluded.cache_read_tokens,
        cache_write_tokens = cache_write_tokens + excluded.cache_write_tokens,
        reasoning_tokens = reasoning_tokens + excluded.reasoning_tokens,
        input_nusd = input_nusd + excluded.input_nusd,
        output_nusd = output_nusd + excluded.output_nusd,
        cache_read_nusd = cache_read_nusd + excluded.cache_read_nusd,
        cache_write_nusd = cache_write_nusd + excluded.cache_write_nusd,
        total_nusd = total_nusd + excluded.total_nusd,
        duration_ms = duration_ms + excluded.duration_ms,
        first_at_ms = min(first_at_ms, excluded.first_at_ms),
        last_at_ms = max(last_at_ms, excluded.last_at_ms);
"
        )
    };
}

/// The keys the new usage row counts under in `usage_ids`: its message and
/// its session (when set), each under the four filter shapes.
macro_rules! new_row_keys {
    () => {
        "(SELECT i.kind AS kind, s.shape AS shape,
                CASE WHEN s.shape IN (1, 3) THEN NEW.provider ELSE '' END AS provider,
                CASE WHEN s.shape IN (2, 3) THEN NEW.model ELSE '' END AS model,
                i.id AS id
         FROM (SELECT 0 AS kind, NEW.message_id AS id UNION ALL SELECT 1, NEW.session_id) AS i,
              (SELECT 0 AS shape UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3) AS s
         WHERE i.id IS NOT NULL)"
    };
}

/// One backfill statement of `usage_ids` for one kind and shape.
macro_rules! ids_backfill {
    ($kind:literal, $id:literal, $shape:literal, $provider:literal, $model:literal, $group:literal) => {
        concat!(
            "INSERT INTO usage_ids (kind, shape, provider, model, id, last_ms)
SELECT ",
            $kind,
            ", ",
            $shape,
            ", ",
            $provider,
            ", ",
            $model,
            ", ",
            $id,
            ", max(created_at_ms) FROM usage WHERE ",
            $id,
            " IS NOT NULL GROUP BY ",
            $group,
            ";
"
        )
    };
}

/// Version 3: the usage rollup, so a report over months reads hours and
/// days instead of a million rows. The usage rows stay the source of truth;
/// the rollup is derived from them, in the same statement that inserts each
/// row (a trigger, so every writer, the store's own or any other, keeps it).
///
/// - `usage_hours` / `usage_days`: per UTC hour / UTC day and per
///   `(agent, provider, model, cost_known)`, what the report sums (money in
///   nano-dollars, see `nusd!`), the longest answer, and the first and last
///   call. Hours let a report start at any local midnight (the rows of a
///   partial hour at its start, e.g. at UTC+5:30, are read from `usage`);
///   days keep months short.
/// - `usage_quarters`: known cost and requests per quarter hour, for the
///   daily chart: every UTC offset in use is a whole number of quarter
///   hours, so a local day is whole quarters and the chart reads no rows.
/// - `usage_ids`: for each message and session id (`kind` 0 / 1), and for
///   each filter a report can have (`shape`: 0 none, 1 provider, 2 model,
///   3 both, the unfiltered parts stored as ''), the last time a row with
///   that id matching that filter was recorded. An id appears in a report
///   from `t` onwards exactly when that time is `>= t`.
/// - `usage_id_hours`: how many ids have their last time in each hour, so
///   counting the distinct messages and sessions since `t` adds up hours
///   (plus the ids of `t`'s partial hour, through `usage_ids_by_last`).
/// - Usage rows are append-only (they are money spent); deleting or
///   changing one is refused, since the rollup could not follow.
const V3: &str = concat!(
    rollup_table!("usage_hours", "hour"),
    rollup_table!("usage_days", "day"),
    "
CREATE TABLE usage_ids (
    kind     INTEGER NOT NULL CHECK (kind IN (0, 1)),
    shape    INTEGER NOT NULL CHECK (shape BETWEEN 0 AND 3),
    provider TEXT NOT NULL,
    model    TEXT NOT NULL,
    id       TEXT NOT NULL,
    last_ms  INTEGER NOT NULL,
    PRIMARY KEY (kind, shape, provider, model, id)
) STRICT, WITHOUT ROWID;
CREATE INDEX usage_ids_by_last ON usage_ids (kind, shape, provider, model, last_ms);
CREATE TABLE usage_quarters (
    quarter    INTEGER PRIMARY KEY NOT NULL,
    known_nusd INTEGER NOT NULL,
    requests   INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE TABLE usage_id_hours (
    kind     INTEGER NOT NULL,
    shape    INTEGER NOT NULL,
    provider TEXT NOT NULL,
    model    TEXT NOT NULL,
    hour     INTEGER NOT NULL,
    n        INTEGER NOT NULL,
    PRIMARY KEY (kind, shape, provider, model, hour)
) STRICT, WITHOUT ROWID;

INSERT INTO usage_hours (hour, agent, provider, model, cost_known, ",
    rollup_columns!(),
    ")
SELECT ",
    hour!("created_at_ms"),
    ", agent, provider, model, cost_known, count(*), sum(max(input_tokens, 0)), sum(max(output_tokens, 0)),
    max(max(output_tokens, 0)), sum(max(cache_read_tokens, 0)), sum(max(cache_write_tokens, 0)),
    sum(max(reasoning_tokens, 0)), sum(",
    nusd!("input_usd"),
    "), sum(",
    nusd!("output_usd"),
    "), sum(",
    nusd!("cache_read_usd"),
    "), sum(",
    nusd!("cache_write_usd"),
    "), sum(",
    nusd!("total_usd"),
    "), sum(max(duration_ms, 0)), min(created_at_ms), max(created_at_ms)
FROM usage GROUP BY 1, 2, 3, 4, 5;
INSERT INTO usage_days (day, agent, provider, model, cost_known, ",
    rollup_columns!(),
    ")
SELECT ",
    day!("first_at_ms"),
    ", agent, provider, model, cost_known, sum(requests), sum(input_tokens), sum(output_tokens),
    max(max_output_tokens), sum(cache_read_tokens), sum(cache_write_tokens), sum(reasoning_tokens),
    sum(input_nusd), sum(output_nusd), sum(cache_read_nusd), sum(cache_write_nusd), sum(total_nusd),
    sum(duration_ms), min(first_at_ms), max(last_at_ms)
FROM usage_hours GROUP BY 1, 2, 3, 4, 5;
INSERT INTO usage_quarters (quarter, known_nusd, requests)
SELECT ",
    quarter!("created_at_ms"),
    ", sum(CASE WHEN cost_known THEN ",
    nusd!("total_usd"),
    " ELSE 0 END), count(*) FROM usage GROUP BY 1;
",
    ids_backfill!("0", "message_id", "0", "''", "''", "message_id"),
    ids_backfill!("0", "message_id", "1", "provider", "''", "provider, message_id"),
    ids_backfill!("0", "message_id", "2", "''", "model", "model, message_id"),
    ids_backfill!(
        "0",
        "message_id",
        "3",
        "provider",
        "model",
        "provider, model, message_id"
    ),
    ids_backfill!("1", "session_id", "0", "''", "''", "session_id"),
    ids_backfill!("1", "session_id", "1", "provider", "''", "provider, session_id"),
    ids_backfill!("1", "session_id", "2", "''", "model", "model, session_id"),
    ids_backfill!(
        "1",
        "session_id",
        "3",
        "provider",
        "model",
        "provider, model, session_id"
    ),
    "INSERT INTO usage_id_hours (kind, shape, provider, model, hour, n)
SELECT kind, shape, provider, model, ",
    hour!("last_ms"),
    ", count(*) FROM usage_ids GROUP BY 1, 2, 3, 4, 5;

CREATE TRIGGER usage_rollup AFTER INSERT ON usage BEGIN
    ",
    rollup_add!("usage_hours", "hour", "3600000"),
    "    ",
    rollup_add!("usage_days", "day", "86400000"),
    "    INSERT INTO usage_quarters (quarter, known_nusd, requests)
    VALUES (",
    quarter!("NEW.created_at_ms"),
    ", CASE WHEN NEW.cost_known THEN ",
    nusd!("NEW.total_usd"),
    " ELSE 0 END, 1)
    ON CONFLICT DO UPDATE SET known_nusd = known_nusd + excluded.known_nusd, requests = requests + 1;
",
    "    UPDATE usage_id_hours SET n = n - 1
    WHERE (kind, shape, provider, model, hour) IN (
        SELECT l.kind, l.shape, l.provider, l.model, ",
    hour!("l.last_ms"),
    "
        FROM usage_ids AS l JOIN ",
    new_row_keys!(),
    " AS k USING (kind, shape, provider, model, id)
        WHERE l.last_ms < NEW.created_at_ms AND ",
    hour!("l.last_ms"),
    " <> ",
    hour!("NEW.created_at_ms"),
    ");
    INSERT INTO usage_id_hours (kind, shape, provider, model, hour, n)
    SELECT k.kind, k.shape, k.provider, k.model, ",
    hour!("NEW.created_at_ms"),
    ", 1
    FROM ",
    new_row_keys!(),
    " AS k LEFT JOIN usage_ids AS l USING (kind, shape, provider, model, id)
    WHERE l.last_ms IS NULL OR (l.last_ms < NEW.created_at_ms AND ",
    hour!("l.last_ms"),
    " <> ",
    hour!("NEW.created_at_ms"),
    ")
    ON CONFLICT DO UPDATE SET n = n + 1;
    INSERT INTO usage_ids (kind, shape, provider, model, id, last_ms)
    SELECT k.kind, k.shape, k.provider, k.model, k.id, NEW.created_at_ms FROM ",
    new_row_keys!(),
    " AS k WHERE true
    ON CONFLICT DO UPDATE SET last_ms = max(last_ms, excluded.last_ms);
END;
CREATE TRIGGER usage_rows_are_kept BEFORE DELETE ON usage BEGIN
    SELECT RAISE(ABORT, 'usage rows are never deleted: they are money spent, and the usage rollup is built from them');
END;
CREATE TRIGGER usage_rows_are_final BEFORE UPDATE ON usage BEGIN
    SELECT RAISE(ABORT, 'usage rows are never changed: they are money spent, and the usage rollup is built from them');
END;
"
);

/// Version 4: who priced each usage row.
///
/// - `cost_source`: `'local'` (mia's price table; every row before this
///   version) or `'gateway'` (the LLM gateway's own cost of the call, e.g.
///   LiteLLM's `x-litellm-response-cost`; a total without parts).
/// - Adding a column with a default changes no row, so the rollup built
///   from the rows stays equal to them (rows stay append-only).
/// - `usage_gateway` (partial: gateway rows only) covers what reports say
///   of them (how many, what they cost) for any filter a report has;
///   stores without a gateway keep it empty.
const V4: &str = "
ALTER TABLE usage ADD COLUMN cost_source TEXT NOT NULL DEFAULT 'local' CHECK (cost_source IN ('local', 'gateway'));
CREATE INDEX usage_gateway ON usage (created_at_ms, session_id, provider, model, total_usd)
    WHERE cost_source = 'gateway';
";

/// Every migration step in order (see the module docs).
pub(crate) const MIGRATIONS: &[&str] = &[V1, V2, V3, V4];

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
    start_log(&conn, path);
    Ok(conn)
}

/// Starts an empty write-ahead log now. The first commit into an empty log
/// writes its header and waits for the disk to sync it (0.7-2 ms measured
/// here). The log is empty whenever the last Neovim checkpointed it on the
/// way out, so without this the first turn's prompt paid that wait when it
/// was stored, and the turn's answer and end are stored after it. Here it
/// falls in the store's opening, which runs while the first command is
/// still busy on the main thread. (Measured again once the prompt no longer
/// held its request back: first turn 15.55 ms with this, 16.33 without.)
///
/// The commit rewrites the schema version with its own value, inside one
/// write transaction so that no other process can move it in between: it
/// changes nothing but puts the first frame in the log. It does not wait
/// for the write lock: another process that holds it is writing, and its
/// commit starts the log. A failure only costs the wait this saves, and is
/// logged.
fn start_log(conn: &Connection, path: &Path) {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    if std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0) {
        return;
    }
    let start = || -> Result<(), StoreError> {
        let tx = rusqlite::Transaction::new_unchecked(conn, TransactionBehavior::Immediate)
            .map_err(|e| from_sqlite(path, "starting the log", &e))?;
        let version = user_version(&tx, path)?;
        tx.pragma_update(None, "user_version", version)
            .and_then(|()| tx.commit())
            .map_err(|e| from_sqlite(path, "starting the log", &e))
    };
    let started = conn
        .busy_timeout(Duration::ZERO)
        .map_err(|e| from_sqlite(path, "setting the busy timeout", &e))
        .and_then(|()| start());
    let restored = conn.busy_timeout(BUSY_TIMEOUT);
    if let Err(e) = started {
        mia_log::wait_ready();
        tracing::debug!("store: the write-ahead log was not started early: {e}");
    }
    if let Err(e) = restored {
        mia_log::wait_ready();
        tracing::warn!(path = %path.display(), "store: cannot restore the busy timeout: {e}");
    }
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
        mia_log::wait_ready();
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

    /// A store with a row in a table of its own, left as a Neovim leaving
    /// leaves it: the log moved into the file and emptied. The directory,
    /// the store's path, its log's path and the open writer connection.
    fn store_with_an_empty_log() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mia.sqlite3");
        let wal = dir.path().join("mia.sqlite3-wal");
        let conn = open_writer(&path).unwrap();
        conn.execute_batch("CREATE TABLE kept (x INTEGER); INSERT INTO kept VALUES (42);")
            .unwrap();
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
        assert_eq!(std::fs::metadata(&wal).unwrap().len(), 0);
        (dir, path, wal, conn)
    }

    #[test]
    fn opening_starts_an_empty_write_ahead_log_and_changes_nothing() {
        let (_dir, path, wal, conn) = store_with_an_empty_log();
        let version = user_version(&conn, &path).unwrap();
        // The next opening puts its first frame in the log before any write.
        let again = open_writer(&path).unwrap();
        let len = std::fs::metadata(&wal).unwrap().len();
        assert!(len > 32, "the log holds its header and a frame: {len} bytes");
        assert_eq!(user_version(&again, &path).unwrap(), version);
        let x: i64 = again.query_row("SELECT x FROM kept", [], |r| r.get(0)).unwrap();
        assert_eq!(x, 42);
        // A log that holds frames already is left as it is.
        drop(again);
        open_writer(&path).unwrap();
        assert_eq!(std::fs::metadata(&wal).unwrap().len(), len);
    }

    #[test]
    fn a_log_another_process_is_writing_is_not_waited_for() {
        let (_dir, path, wal, conn) = store_with_an_empty_log();
        let other = Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        start_log(&conn, &path);
        assert_eq!(
            std::fs::metadata(&wal).unwrap().len(),
            0,
            "nothing written under another's lock"
        );
        let ms: i64 = conn.query_row("PRAGMA busy_timeout", [], |r| r.get(0)).unwrap();
        assert_eq!(ms, BUSY_TIMEOUT.as_millis() as i64, "the busy timeout is back");
        other.execute_batch("COMMIT").unwrap();
        start_log(&conn, &path);
        assert!(std::fs::metadata(&wal).unwrap().len() > 0);
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
