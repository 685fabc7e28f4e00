//! Reading sessions and messages back: one session, a session's messages in
//! order, and keyset-paginated listings.
//!
//! Listings order by `(updated_at_ms DESC, id DESC)` and each page starts
//! strictly after the previous page's last key, so sessions created or
//! touched during a walk land before the cursor and never repeat or shift
//! the rest of the walk (unlike OFFSET paging). A session that is touched
//! before the walk reaches it moves to the top, where the next refresh shows
//! it, and is not listed again later in that walk.

use std::path::Path;

use rusqlite::{params_from_iter, Connection, OptionalExtension, Row, ToSql};

use super::cursor::{self, Cursor};
use super::error::{from_sqlite, StoreError};
use super::rows::{MessageKind, MessageRow, MessageState, SessionPage, SessionRow, SessionSummary};

/// Largest page `list_sessions` returns, whatever was asked.
pub const MAX_PAGE: usize = 500;

pub(crate) fn session(conn: &Connection, path: &Path, id: &str) -> Result<Option<SessionRow>, StoreError> {
    let row = conn
        .prepare_cached(
            "SELECT id, cwd, title, mode, model, created_at_ms, updated_at_ms, meta FROM sessions WHERE id = ?1",
        )
        .and_then(|mut s| {
            s.query_row([id], |r| {
                Ok((
                    SessionRow {
                        id: r.get(0)?,
                        cwd: r.get(1)?,
                        title: r.get(2)?,
                        mode: r.get(3)?,
                        model: r.get(4)?,
                        created_at_ms: r.get(5)?,
                        updated_at_ms: r.get(6)?,
                        meta: serde_json::Value::Null,
                    },
                    r.get::<_, String>(7)?,
                ))
            })
            .optional()
        })
        .map_err(|e| from_sqlite(path, "reading a session", &e))?;
    row.map(|(mut session, meta)| {
        session.meta = parse_json("session meta", &meta)?;
        Ok(session)
    })
    .transpose()
}

pub(crate) fn messages(conn: &Connection, path: &Path, session_id: &str) -> Result<Vec<MessageRow>, StoreError> {
    let raw = conn
        .prepare_cached(
            "SELECT id, session_id, seq, role, parts, state, meta, created_at_ms, updated_at_ms,
                    kind, covers_from, covers_to
             FROM messages WHERE session_id = ?1 ORDER BY seq",
        )
        .and_then(|mut s| {
            s.query_map([session_id], RawMessage::from_row)?
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(|e| from_sqlite(path, "reading messages", &e))?;
    raw.into_iter().map(RawMessage::decode).collect()
}

/// The rows a request to the model is built from, in order: with no
/// compaction, every message that has parts; otherwise the latest
/// compaction's summary in place of the messages it covers, and the plain
/// messages outside its range around it. Earlier compactions are left out
/// (a later summary summarizes them too).
pub fn request_rows(rows: &[MessageRow]) -> Vec<&MessageRow> {
    request_positions(rows)
        .into_iter()
        .filter_map(|i| rows.get(i))
        .collect()
}

/// [`request_rows`] as positions (0-based) in `rows`.
pub fn request_positions(rows: &[MessageRow]) -> Vec<usize> {
    let has_parts = |r: &MessageRow| r.parts.as_array().is_some_and(|p| !p.is_empty());
    let latest = rows.iter().enumerate().rev().find_map(|(i, r)| match r.kind {
        MessageKind::Compaction { covers_from, covers_to } => Some((i, covers_from, covers_to)),
        MessageKind::Message => None,
    });
    let plain = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.kind == MessageKind::Message && has_parts(r));
    let Some((summary, from, to)) = latest else {
        return plain.map(|(i, _)| i).collect();
    };
    let mut out: Vec<usize> = plain.clone().filter(|(_, r)| r.seq < from).map(|(i, _)| i).collect();
    out.push(summary);
    out.extend(plain.filter(|(_, r)| r.seq > to).map(|(i, _)| i));
    out
}

/// A message row as stored, before its JSON and enum columns are checked.
struct RawMessage {
    id: String,
    session_id: String,
    seq: i64,
    role: String,
    parts: String,
    state: String,
    meta: String,
    created_at_ms: i64,
    updated_at_ms: i64,
    kind: String,
    covers_from: Option<i64>,
    covers_to: Option<i64>,
}

impl RawMessage {
    fn from_row(r: &Row<'_>) -> rusqlite::Result<RawMessage> {
        Ok(RawMessage {
            id: r.get(0)?,
            session_id: r.get(1)?,
            seq: r.get(2)?,
            role: r.get(3)?,
            parts: r.get(4)?,
            state: r.get(5)?,
            meta: r.get(6)?,
            created_at_ms: r.get(7)?,
            updated_at_ms: r.get(8)?,
            kind: r.get(9)?,
            covers_from: r.get(10)?,
            covers_to: r.get(11)?,
        })
    }

    fn decode(self) -> Result<MessageRow, StoreError> {
        let role =
            serde_json::from_value(serde_json::Value::String(self.role.clone())).map_err(|_| StoreError::Decode {
                what: "message role",
                detail: format!("unknown role {:?} in message {:?}", self.role, self.id),
            })?;
        let state = MessageState::parse(&self.state).ok_or_else(|| StoreError::Decode {
            what: "message state",
            detail: format!("unknown state {:?} in message {:?}", self.state, self.id),
        })?;
        let kind =
            MessageKind::parse(&self.kind, self.covers_from, self.covers_to).ok_or_else(|| StoreError::Decode {
                what: "message kind",
                detail: format!(
                    "unknown kind {:?} (covers {:?}..={:?}) in message {:?}",
                    self.kind, self.covers_from, self.covers_to, self.id
                ),
            })?;
        Ok(MessageRow {
            kind,
            parts: parse_json("message parts", &self.parts)?,
            meta: parse_json("message meta", &self.meta)?,
            id: self.id,
            session_id: self.session_id,
            seq: self.seq,
            role,
            state,
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
        })
    }
}

fn parse_json(what: &'static str, text: &str) -> Result<serde_json::Value, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Decode {
        what,
        detail: e.to_string(),
    })
}

/// One page after `after` (or the first page). `limit` is clamped to
/// `1..=MAX_PAGE`; one extra row is fetched to learn whether a next page exists.
pub(crate) fn list(
    conn: &Connection,
    path: &Path,
    cwd: Option<&str>,
    after: Option<&Cursor>,
    limit: usize,
) -> Result<SessionPage, StoreError> {
    let limit = limit.clamp(1, MAX_PAGE);
    let mut filters = Vec::new();
    let mut args: Vec<&dyn ToSql> = Vec::new();
    if let Some(cwd) = &cwd {
        filters.push("s.cwd = ?");
        args.push(cwd);
    }
    if let Some(after) = after {
        // Spelled out rather than as a row value so both index columns drive
        // the range scan.
        filters.push("(s.updated_at_ms < ? OR (s.updated_at_ms = ? AND s.id < ?))");
        args.push(&after.updated_at_ms);
        args.push(&after.updated_at_ms);
        args.push(&after.id);
    }
    let fetch = (limit + 1) as i64;
    args.push(&fetch);
    let where_clause = if filters.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", filters.join(" AND "))
    };
    let sql = format!(
        "SELECT s.id, s.cwd, s.title, s.mode, s.model, s.created_at_ms, s.updated_at_ms,
             (SELECT count(*) FROM messages m WHERE m.session_id = s.id AND m.kind = 'message' AND m.parts <> '[]'),
             (SELECT total(u.total_usd) FROM usage u WHERE u.session_id = s.id AND u.cost_known = 1)
         FROM sessions s {where_clause}
         ORDER BY s.updated_at_ms DESC, s.id DESC
         LIMIT ?"
    );
    let mut sessions = conn
        .prepare_cached(&sql)
        .and_then(|mut s| {
            s.query_map(params_from_iter(args), |r| {
                Ok(SessionSummary {
                    id: r.get(0)?,
                    cwd: r.get(1)?,
                    title: r.get(2)?,
                    mode: r.get(3)?,
                    model: r.get(4)?,
                    created_at_ms: r.get(5)?,
                    updated_at_ms: r.get(6)?,
                    message_count: r.get::<_, i64>(7)?.max(0) as u64,
                    cost_usd: r.get(8)?,
                })
            })?
            .collect::<Result<Vec<_>, _>>()
        })
        .map_err(|e| from_sqlite(path, "listing sessions", &e))?;
    let next_cursor = if sessions.len() > limit {
        sessions.truncate(limit);
        sessions.last().map(|last| {
            cursor::encode(
                &Cursor {
                    updated_at_ms: last.updated_at_ms,
                    id: last.id.clone(),
                },
                cwd,
            )
        })
    } else {
        None
    };
    Ok(SessionPage { sessions, next_cursor })
}
