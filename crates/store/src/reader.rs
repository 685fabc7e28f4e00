//! Read-only connections, reused across queries.
//!
//! WAL lets any number of readers run beside the writer, so the pool never
//! makes a query wait for another: it hands out an idle connection or opens
//! a new one, and keeps at most [`MAX_IDLE`] around afterwards. Keeping them
//! matters because each holds its prepared statements and page cache.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::Connection;

use super::error::{from_sqlite, StoreError};
use super::schema::open_reader;

/// Idle connections kept for reuse; Neovim rarely runs more than a couple of
/// queries at once (a picker page and a budget check).
const MAX_IDLE: usize = 2;

pub(crate) struct ReadPool {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
}

impl ReadPool {
    /// Opens one connection now, so a file that cannot be read fails `open`
    /// rather than the first query. It also reads the schema now: a
    /// connection parses the whole schema (the rollup trigger is most of it)
    /// before its first statement, ~0.5 ms that would otherwise fall on the
    /// first query, usually in a turn's wait for its end.
    pub(crate) fn new(path: &Path) -> Result<ReadPool, StoreError> {
        let first = open_reader(path)?;
        first
            .prepare("SELECT 1 FROM usage LIMIT 0")
            .map_err(|e| from_sqlite(path, "reading the schema", &e))?;
        Ok(ReadPool {
            path: path.to_path_buf(),
            idle: Mutex::new(vec![first]),
        })
    }

    /// Runs `f` on a read connection (blocking: call from `spawn_blocking`).
    /// Each statement `f` runs sees the latest committed data; `f` that
    /// needs one consistent view across statements opens its own transaction.
    pub(crate) fn with<T>(&self, f: impl FnOnce(&Connection) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let taken = self.lock().pop();
        let conn = match taken {
            Some(conn) => conn,
            None => open_reader(&self.path)?,
        };
        let result = f(&conn);
        let mut idle = self.lock();
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
        result
    }

    /// The idle list; a panic while holding it cannot leave it inconsistent
    /// (push and pop are atomic), so a poisoned lock is still usable.
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Connection>> {
        self.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
