//! Sessions as agents list them (ACP's `session/list` answer): mia's own
//! from the store, one page at a time; an external agent's through its
//! `session/list`; and every agent's together for the picker.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use super::iface::AgentError;
use crate::acp::client_sessions::{self, Ask};
use crate::acp::session_list;
use crate::app::App;

/// What `list` asks (ACP's `ListSessionsRequest`, with a page size).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ListQuery {
    pub cwd: Option<String>,
    pub cursor: Option<String>,
    pub limit: Option<usize>,
}

/// Sessions per page of mia's own list when the caller names no size.
const DEFAULT_PAGE: usize = 50;

/// ISO 8601 (UTC) for ACP's `updatedAt`.
fn iso(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_default()
}

/// One of mia's stored sessions as ACP's `SessionInfo`, its figures in `_meta`.
pub fn session_info(s: &mia_store::SessionSummary) -> Value {
    json!({
        "sessionId": s.id,
        "cwd": s.cwd,
        "title": s.title,
        "updatedAt": iso(s.updated_at_ms),
        "_meta": {
            "messageCount": s.message_count,
            "costUsd": s.cost_usd,
            "mode": s.mode,
            "model": s.model,
            "createdAt": iso(s.created_at_ms),
            "updatedAtMs": s.updated_at_ms,
        }
    })
}

async fn store(app: &App) -> Result<Arc<mia_store::Store>, AgentError> {
    app.store().await.ok_or(AgentError::NoStore)
}

/// One page of mia's own sessions: `{ sessions, nextCursor? }`.
pub async fn own_page(app: &App, q: ListQuery) -> Result<Value, AgentError> {
    let page = store(app)
        .await?
        .list_sessions(q.cwd.as_deref(), q.cursor.as_deref(), q.limit.unwrap_or(DEFAULT_PAGE))
        .await?;
    let mut out = json!({ "sessions": page.sessions.iter().map(session_info).collect::<Vec<_>>() });
    if let Some(next) = page.next_cursor {
        out["nextCursor"] = json!(next);
    }
    Ok(out)
}

/// One external agent's sessions in its cwd, every page (`{ sessions }`),
/// the agent started if it does not run; `timeout` bounds its answer.
pub async fn external(ask: Ask, timeout: Duration) -> Result<Value, AgentError> {
    let agent = ask.agent.spec.name.clone();
    let mut listed = client_sessions::list_everywhere(vec![ask], timeout).await;
    if let Some((_, reason)) = listed.failed.pop() {
        return Err(AgentError::CannotList { agent, reason });
    }
    Ok(json!({ "sessions": listed.sessions }))
}

/// The picker's list: `{ sessions, failed = [{ agent, reason }] }`. With
/// `own`, mia's stored sessions (this directory's, then the others'),
/// merged with the sessions of the agents in `ask` (`session/list`, see
/// [`session_list::merge`]), each agent bounded by `timeout`: one that
/// fails or is slow is named in `failed` and the others are kept.
pub async fn everywhere(
    app: Arc<App>,
    cwd: String,
    own: bool,
    ask: Vec<Ask>,
    timeout: Duration,
) -> Result<Value, AgentError> {
    let mine = async {
        if !own {
            return Ok((Vec::new(), Vec::new()));
        }
        let Some(store) = app.store().await else {
            return Ok((Vec::new(), Vec::new()));
        };
        let limit = session_list::MAX_ENTRIES;
        let here = store.list_sessions(Some(&cwd), None, limit).await;
        let all = store.list_sessions(None, None, limit).await;
        let infos = |p: mia_store::SessionPage| p.sessions.iter().map(session_info).collect();
        match (here, all) {
            (Ok(h), Ok(a)) => Ok((infos(h), infos(a))),
            (Err(e), _) | (_, Err(e)) => Err(AgentError::Store(e)),
        }
    };
    let (mine, listed) = tokio::join!(mine, client_sessions::list_everywhere(ask, timeout));
    let (here, elsewhere) = mine?;
    let failed: Vec<Value> = listed
        .failed
        .iter()
        .map(|(agent, reason)| json!({ "agent": agent, "reason": reason }))
        .collect();
    Ok(json!({
        "sessions": session_list::merge(here, listed.sessions, elsewhere),
        "failed": failed,
    }))
}
