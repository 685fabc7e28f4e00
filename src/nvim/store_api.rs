//! The store as Lua sees it: cost reports and sessions in the Agent Client
//! Protocol's shapes (SessionInfo, ListSessionsResponse). Conversions only;
//! the queries live in `store/` and the report math in `cost/`.

use mlua::prelude::*;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::NvimError;
use super::{start_job, StreamHandle};
use crate::nvim::app;
use mia_llm::error::{ErrorClass, LlmError};
use mia_store::CostScope;

fn no_store() -> LlmError {
    LlmError::new(
        ErrorClass::Internal,
        None,
        "mia: the store is not available (see :checkhealth mia and the log); history and costs need it",
    )
}

fn store_error(e: mia_store::StoreError) -> LlmError {
    LlmError::new(ErrorClass::InvalidRequest, None, format!("mia: {e}"))
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
    system_tokens: Option<u64>,
    /// Characters of the configured system prompt: with no `system_tokens`,
    /// the estimate adds every registered tool's name, description and
    /// schema (what each request sends), ~4 characters a token.
    system_chars: Option<u64>,
}

impl CostQuery {
    /// The store's query, or the error naming the scopes there are.
    fn into_core(self) -> Result<mia_store::CostQuery, LlmError> {
        let scope = match self.scope.as_str() {
            "session" => CostScope::Session,
            "daily" => CostScope::Daily,
            "weekly" => CostScope::Weekly,
            "days" => CostScope::Days(self.days.unwrap_or(30)),
            other => {
                return Err(LlmError::new(
                    ErrorClass::InvalidRequest,
                    None,
                    format!("mia.costs: unknown scope `{other}`; use session, daily, weekly or days"),
                ))
            }
        };
        Ok(mia_store::CostQuery {
            scope,
            session_id: self.session_id,
            model: self.model,
            provider: self.provider,
            utc_offset_s: self.utc_offset_s,
            system_tokens: self.system_tokens.or_else(|| self.system_chars.map(with_tools)),
        })
    }
}

/// Tokens a request's fixed part takes, estimated at ~4 characters a token:
/// the system prompt's `system_chars` and every registered tool as the
/// request lists it (name, description, schema). Runs on a worker: the
/// registry's lock is never taken on the main thread for this.
fn with_tools(system_chars: u64) -> u64 {
    let tools: usize = app()
        .registry()
        .list()
        .iter()
        .map(|t| t.name.len() + t.description.len() + t.parameters.to_string().len())
        .sum();
    system_chars.saturating_add(u64::try_from(tools).unwrap_or(u64::MAX)) / 4
}

/// `costs(query)` -> handle; its result is the report with `daily` (30 days) and `suggestions`.
pub fn costs(lua: &Lua, query: LuaValue) -> LuaResult<StreamHandle> {
    let q: CostQuery = lua
        .from_value(query)
        .map_err(|e| NvimError::argument_raw("mia.costs", "query", e))?;
    start_job("costs", move |providers| async move {
        let store = app().store().await.ok_or_else(no_store)?;
        let query = q.into_core()?;
        let report = store
            .cost_report(&query, providers.pricing(), mia_cost::now_ms())
            .await
            .map_err(store_error)?;
        Ok(serde_json::to_value(&report).unwrap_or(Value::Null))
    })
}

#[derive(Deserialize)]
struct ExportArgs {
    format: String,
    since: Option<String>,
    until: Option<String>,
    #[serde(default)]
    utc_offset_s: i32,
}

/// Finished exports whose chunks Lua has not taken yet, by export id (kept
/// by the front-end, `Front::exports`). Handing Lua the whole text as one
/// result would convert it all on the main thread at once (1.8 s for a
/// million rows); Lua takes one chunk per tick instead ([`costs_export_take`]).
pub(crate) type Exports = Vec<(u64, std::collections::VecDeque<String>)>;
static NEXT_EXPORT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn exports() -> std::sync::MutexGuard<'static, Exports> {
    crate::nvim::front().exports.lock().unwrap_or_else(|p| p.into_inner())
}

/// `costs_export_take(id)` -> the export's next chunk of lines, or nil once
/// it is all taken (the export is then forgotten).
pub fn costs_export_take(_: &Lua, id: u64) -> LuaResult<Option<String>> {
    let mut all = exports();
    let Some(i) = all.iter().position(|(e, _)| *e == id) else {
        return Ok(None);
    };
    let chunk = all[i].1.pop_front();
    if chunk.is_none() || all[i].1.is_empty() {
        all.remove(i);
    }
    Ok(chunk)
}

/// `costs_export_drop(id)`: forgets an export Lua no longer wants.
pub fn costs_export_drop(_: &Lua, id: u64) -> LuaResult<()> {
    exports().retain(|(e, _)| *e != id);
    Ok(())
}

/// `costs_export({ format, since, until, utc_offset_s })` -> handle; its
/// result is `{ id = n, rows = n }`: the text waits in the core, taken a
/// chunk at a time with `costs_export_take(id)` (see `store::export`).
pub fn costs_export(lua: &Lua, query: LuaValue) -> LuaResult<StreamHandle> {
    use mia_store::export::{self, ExportFormat, ExportQuery};
    let q: ExportArgs = lua
        .from_value(query)
        .map_err(|e| NvimError::argument_raw("mia.costs_export", "query", e))?;
    let invalid = |m: String| LuaError::from(NvimError::Refused(m));
    let format = match q.format.as_str() {
        "csv" => ExportFormat::Csv,
        "json" => ExportFormat::Json,
        other => return Err(invalid(format!("unknown export format `{other}`; use csv or json"))),
    };
    let (from_ms, to_ms) = export::range(q.since.as_deref(), q.until.as_deref(), q.utc_offset_s).map_err(invalid)?;
    start_job("costs_export", move |_| async move {
        let store = app().store().await.ok_or_else(no_store)?;
        let out = store
            .export_usage(ExportQuery { format, from_ms, to_ms })
            .await
            .map_err(store_error)?;
        let id = NEXT_EXPORT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        exports().push((id, out.chunks.into()));
        Ok(json!({ "id": id, "rows": out.rows }))
    })
}

/// `session_rename(id, title)` and `session_delete(id)` -> handles.
pub fn session_rename(_: &Lua, (id, title): (String, String)) -> LuaResult<StreamHandle> {
    start_job("session_rename", move |_| async move {
        let store = app().store().await.ok_or_else(no_store)?;
        store.rename_session(&id, Some(&title)).await.map_err(store_error)?;
        Ok(json!(true))
    })
}

pub fn session_delete(_: &Lua, id: String) -> LuaResult<StreamHandle> {
    start_job("session_delete", move |_| async move {
        let store = app().store().await.ok_or_else(no_store)?;
        store.delete_session(&id).await.map_err(store_error)?;
        Ok(json!(true))
    })
}
