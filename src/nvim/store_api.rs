//! The store as Lua sees it: cost reports and sessions in the Agent Client
//! Protocol's shapes (SessionInfo, ListSessionsResponse). Conversions only;
//! the queries live in `store/` and the report math in `cost/`.

use mlua::prelude::*;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{start_job, StreamHandle};
use crate::agent::record::{local_day, now_ms};
use crate::llm::error::{ErrorClass, LlmError};
use crate::runtime;
use crate::store::ReportQuery;

const DAY_MS: i64 = 86_400_000;

fn no_store() -> LlmError {
    LlmError::new(
        ErrorClass::Internal,
        None,
        "mia: the store is not available (see :checkhealth mia and the log); history and costs need it",
    )
}

fn store_error(e: crate::store::StoreError) -> LlmError {
    LlmError::new(ErrorClass::InvalidRequest, None, format!("mia: {e}"))
}

/// ISO 8601 (UTC) for ACP's `updatedAt`.
fn iso(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_default()
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct CostQuery {
    scope: String,
    session_id: Option<String>,
    model: Option<String>,
    provider: Option<String>,
    days: Option<u32>,
    utc_offset_s: i32,
    /// Estimated tokens of the system prompt sent with every request (for the caching suggestion).
    system_tokens: Option<u64>,
}

/// `costs(query)` -> handle; its result is the report with `daily` (30 days) and `suggestions`.
pub fn costs(lua: &Lua, query: LuaValue) -> LuaResult<StreamHandle> {
    let q: CostQuery = lua
        .from_value(query)
        .map_err(|e| LuaError::RuntimeError(format!("mia.costs: invalid query: {e}")))?;
    start_job("costs", move |providers| async move {
        let store = runtime::store().await.ok_or_else(no_store)?;
        let (today, _) = local_day(now_ms(), q.utc_offset_s);
        let from_ms = match q.scope.as_str() {
            "session" => None,
            "daily" => Some(today),
            "weekly" => Some(today - 6 * DAY_MS),
            "days" => Some(today - i64::from(q.days.unwrap_or(30).max(1) - 1) * DAY_MS),
            other => {
                return Err(LlmError::new(
                    ErrorClass::InvalidRequest,
                    None,
                    format!("mia.costs: unknown scope `{other}`; use session, daily, weekly or days"),
                ))
            }
        };
        let session_id = if q.scope == "session" {
            q.session_id.clone()
        } else {
            None
        };
        let query = ReportQuery {
            from_ms,
            to_ms: None,
            session_id: session_id.clone(),
            model: q.model.clone(),
            provider: q.provider.clone(),
        };
        let report = store.usage_report(&query).await.map_err(store_error)?;
        let daily = store
            .daily_costs(today - 29 * DAY_MS, 30, q.utc_offset_s)
            .await
            .map_err(store_error)?;
        let mut suggestions = Vec::new();
        if let Some(session) = session_id {
            let mut stats = crate::cost::SessionStats::default();
            for m in &report.by_model {
                let one = ReportQuery {
                    session_id: Some(session.clone()),
                    model: Some(m.key.clone()),
                    ..Default::default()
                };
                let r = store.usage_report(&one).await.map_err(store_error)?;
                let requests = r.totals.requests.max(1);
                stats.per_model.push(crate::cost::ModelStats {
                    provider: r.by_provider.first().map(|p| p.key.clone()).unwrap_or_default(),
                    model: m.key.clone(),
                    requests: r.totals.requests,
                    input_tokens: r.totals.input_tokens,
                    output_tokens: r.totals.output_tokens,
                    cache_read_tokens: r.totals.cache_read_tokens,
                    cache_write_tokens: r.totals.cache_write_tokens,
                    cost_usd: r.totals.cost_usd,
                    max_output_tokens_seen: m.max_output_tokens,
                    avg_output_tokens: r.totals.output_tokens as f64 / requests as f64,
                    system_prompt_tokens_per_request: q.system_tokens,
                });
            }
            suggestions = crate::cost::suggest(&providers.pricing, &stats);
        }
        let mut out = serde_json::to_value(&report).unwrap_or(Value::Null);
        out["scope"] = json!(q.scope);
        out["daily"] = serde_json::to_value(&daily).unwrap_or(Value::Null);
        out["suggestions"] = serde_json::to_value(&suggestions).unwrap_or(Value::Null);
        Ok(out)
    })
}

fn session_info(s: &crate::store::SessionSummary) -> Value {
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

#[derive(Deserialize, Default)]
#[serde(default)]
struct ListQuery {
    cwd: Option<String>,
    cursor: Option<String>,
    limit: Option<usize>,
}

/// `sessions_list({ cwd, cursor, limit })` -> handle; ACP ListSessionsResponse.
pub fn sessions_list(lua: &Lua, query: LuaValue) -> LuaResult<StreamHandle> {
    let q: ListQuery = lua.from_value(query).unwrap_or_default();
    start_job("sessions_list", move |_| async move {
        let store = runtime::store().await.ok_or_else(no_store)?;
        let page = store
            .list_sessions(q.cwd.as_deref(), q.cursor.as_deref(), q.limit.unwrap_or(50))
            .await
            .map_err(store_error)?;
        let mut out = json!({ "sessions": page.sessions.iter().map(session_info).collect::<Vec<_>>() });
        if let Some(next) = page.next_cursor {
            out["nextCursor"] = json!(next);
        }
        Ok(out)
    })
}

/// `session_rename(id, title)` and `session_delete(id)` -> handles.
pub fn session_rename(_: &Lua, (id, title): (String, String)) -> LuaResult<StreamHandle> {
    start_job("session_rename", move |_| async move {
        let store = runtime::store().await.ok_or_else(no_store)?;
        store.rename_session(&id, Some(&title)).await.map_err(store_error)?;
        Ok(json!(true))
    })
}

pub fn session_delete(_: &Lua, id: String) -> LuaResult<StreamHandle> {
    start_job("session_delete", move |_| async move {
        let store = runtime::store().await.ok_or_else(no_store)?;
        store.delete_session(&id).await.map_err(store_error)?;
        Ok(json!(true))
    })
}
