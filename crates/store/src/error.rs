//! What can go wrong with the store, phrased as what the user can do about it.

use std::path::{Path, PathBuf};

use rusqlite::ffi;

/// An error from the store. Every message names the file involved (where
/// there is one) and the way out, because these reach the user through
/// `vim.notify` with nobody around to interpret a bare SQLite code.
///
/// Variants carry text rather than the underlying `rusqlite::Error` so that
/// one failed transaction can report the same error to every caller whose
/// write was batched into it (`Clone`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    /// The directory that should hold the database could not be created.
    #[error(
        "cannot create {dir}, the directory for mia's database: {detail}; create it by hand or point data_dir at a \
         writable directory"
    )]
    CreateDir { dir: PathBuf, detail: String },

    /// SQLite could not open the file at all (permissions, a directory in the way...).
    #[error(
        "cannot open mia's database {path}: {detail}; check that the file and its directory are readable and writable"
    )]
    Open { path: PathBuf, detail: String },

    /// The file is not an SQLite database, or its pages are damaged.
    #[error(
        "{path} is not a usable mia database ({detail}); move it away (e.g. rename it to {path}.broken) and mia will \
         start a new one on next open"
    )]
    Corrupt { path: PathBuf, detail: String },

    /// The file was last migrated by a newer mia than this one. Refusing is
    /// the only safe answer: an older build does not know what the newer
    /// columns mean, and downgrading the schema would destroy data.
    #[error(
        "{path} was written by a newer mia (schema version {found}; this build knows versions up to {supported}); \
         update mia, or move the file away to start a new database"
    )]
    NewerSchema { path: PathBuf, found: i64, supported: i64 },

    /// Another connection (usually another Neovim) held the write lock for
    /// longer than we were willing to wait, retries included.
    #[error(
        "{path} stayed locked by another process for {waited_ms} ms; another Neovim may be stuck in a long write: \
         retry, or close the other instance"
    )]
    Busy { path: PathBuf, waited_ms: u64 },

    /// The disk (or a quota) ran out while writing.
    #[error("the disk holding {path} is full; free some space and retry")]
    DiskFull { path: PathBuf },

    /// The file or its directory is not writable by this process.
    #[error(
        "mia cannot write to {path} (read-only file or directory); fix its permissions or point data_dir elsewhere"
    )]
    ReadOnly { path: PathBuf },

    /// The write names a session that does not exist (never created, or
    /// deleted meanwhile, possibly by another Neovim instance).
    #[error("no session with id {id:?}; it may have been deleted (possibly from another Neovim); start a new session")]
    SessionNotFound { id: String },

    /// Two different messages claimed the same position in a session.
    #[error(
        "message {id:?} cannot take position {seq} in session {session_id:?}: another message already has it; give it \
         the next free seq"
    )]
    SeqTaken { id: String, session_id: String, seq: i64 },

    /// A value handed to the store cannot be stored or used as given.
    #[error("invalid input for the store: {detail}")]
    InvalidInput { detail: String },

    /// A `list_sessions` cursor that this store did not hand out, or that was
    /// altered on the way back.
    #[error("invalid session list cursor: {reason}; list again from the first page (no cursor)")]
    InvalidCursor { reason: String },

    /// A stored value could not be turned back into its Rust type.
    #[error(
        "stored {what} could not be read back ({detail}); the row was written by another program or damaged; \
         deleting the session removes it"
    )]
    Decode { what: &'static str, detail: String },

    /// Any other SQLite failure; `op` says what the store was doing.
    #[error("database error while {op} on {path}: {detail}")]
    Sqlite {
        op: &'static str,
        path: PathBuf,
        detail: String,
    },

    /// The writer thread is gone (it panicked); no further writes can happen
    /// through this `Store`.
    #[error(
        "the database writer for {path} has stopped (it crashed; see mia's log); restart Neovim to reopen the store"
    )]
    WriterStopped { path: PathBuf },

    /// A read task was cancelled or panicked before it could answer.
    #[error("a database read on {path} did not finish: {detail}")]
    ReadFailed { path: PathBuf, detail: String },
}

/// The extended result codes we tell apart (SQLite's `SQLITE_CONSTRAINT_*`).
pub(crate) const CONSTRAINT_FOREIGNKEY: i32 = ffi::SQLITE_CONSTRAINT_FOREIGNKEY;
pub(crate) const CONSTRAINT_UNIQUE: i32 = ffi::SQLITE_CONSTRAINT_UNIQUE;

/// Maps a SQLite failure to the variant the user can act on; `op` names what
/// the store was doing, for the catch-all case.
pub(crate) fn from_sqlite(path: &Path, op: &'static str, err: &rusqlite::Error) -> StoreError {
    let path = path.to_path_buf();
    match err.sqlite_error_code() {
        Some(ffi::ErrorCode::DatabaseBusy | ffi::ErrorCode::DatabaseLocked) => StoreError::Busy {
            path,
            waited_ms: crate::schema::BUSY_TIMEOUT.as_millis() as u64,
        },
        Some(ffi::ErrorCode::DatabaseCorrupt | ffi::ErrorCode::NotADatabase) => StoreError::Corrupt {
            path,
            detail: err.to_string(),
        },
        Some(ffi::ErrorCode::DiskFull) => StoreError::DiskFull { path },
        Some(ffi::ErrorCode::ReadOnly) => StoreError::ReadOnly { path },
        Some(ffi::ErrorCode::CannotOpen | ffi::ErrorCode::PermissionDenied) => StoreError::Open {
            path,
            detail: err.to_string(),
        },
        _ => StoreError::Sqlite {
            op,
            path,
            detail: err.to_string(),
        },
    }
}

/// True when the error means "someone else holds the lock; try again later".
pub(crate) fn is_busy(err: &rusqlite::Error) -> bool {
    matches!(
        err.sqlite_error_code(),
        Some(ffi::ErrorCode::DatabaseBusy | ffi::ErrorCode::DatabaseLocked)
    )
}

/// The extended result code of a SQLite failure, if it is one.
pub(crate) fn extended_code(err: &rusqlite::Error) -> Option<i32> {
    err.sqlite_error().map(|e| e.extended_code)
}
