//! The Lua functions for MCP servers beyond their tools (`crates/engine/src/mcp/`):
//! starting and restarting them, reading resources, getting prompts. Each
//! returns a job handle at once; its value arrives as one `result` event.

use mlua::prelude::*;
use serde_json::{json, Map, Value};

use super::error::NvimError;
use super::{start_job, StreamHandle};
use crate::nvim::app;
use mia_engine::mcp::McpServerSpec;
use mia_llm::error::{ErrorClass, LlmError};

fn job_error(e: String) -> LlmError {
    LlmError::new(ErrorClass::InvalidRequest, None, e)
}

/// The configured servers, as `mcp_status` takes them.
pub(super) fn specs_of(lua: &Lua, servers: LuaValue) -> LuaResult<Vec<McpServerSpec>> {
    match servers {
        LuaValue::Nil => Ok(Vec::new()),
        v => lua
            .from_value(v)
            .map_err(|e| LuaError::from(NvimError::bad("mia", "mcp servers", e))),
    }
}

/// `mcp_start(servers)` -> handle: starts the servers not started yet; its
/// result is the list of warnings (one per server that failed).
pub(super) fn mcp_start(lua: &Lua, servers: LuaValue) -> LuaResult<StreamHandle> {
    let specs = specs_of(lua, servers)?;
    start_job("mcp_start", move |_| async move {
        let warnings = mia_engine::mcp::ensure_started(&app().mcp(), &app().registry(), &specs).await;
        Ok(json!(warnings))
    })
}

/// `mcp_restart(servers, name)` -> handle: stops server `name` and starts
/// it again; its result is the server's new status, its error why it failed.
pub(super) fn mcp_restart(lua: &Lua, (servers, name): (LuaValue, String)) -> LuaResult<StreamHandle> {
    let specs = specs_of(lua, servers)?;
    start_job("mcp_restart", move |_| async move {
        let state = mia_engine::mcp::restart(&app().mcp(), &app().registry(), &specs, &name)
            .await
            .map_err(|e| job_error(format!("MCP server `{name}` did not start again: {e}")))?;
        let mut v = serde_json::to_value(state).unwrap_or_default();
        v["name"] = Value::from(name);
        Ok(v)
    })
}

/// `mcp_read(servers, mentions)` -> handle: reads each `{ server, uri }`;
/// its result is their text, delimited, ready to attach to a message.
pub(super) fn mcp_read(lua: &Lua, (servers, mentions): (LuaValue, LuaValue)) -> LuaResult<StreamHandle> {
    #[derive(serde::Deserialize)]
    struct Mention {
        server: String,
        uri: String,
    }
    let specs = specs_of(lua, servers)?;
    let mentions: Vec<Mention> = lua
        .from_value(mentions)
        .map_err(|e| LuaError::from(NvimError::bad("mia", "resource mentions", e)))?;
    let pairs: Vec<(String, String)> = mentions.into_iter().map(|m| (m.server, m.uri)).collect();
    start_job("mcp_read", move |_| async move {
        let text = mia_engine::mcp::read_resource(&app().mcp(), &app().registry(), &specs, &pairs)
            .await
            .map_err(job_error)?;
        Ok(Value::from(text))
    })
}

/// `mcp_prompt(servers, server, name, args)` -> handle: `prompts/get`; its
/// result is the prompt's messages as one user message's text.
pub(super) fn mcp_prompt(
    lua: &Lua,
    (servers, server, name, args): (LuaValue, String, String, LuaValue),
) -> LuaResult<StreamHandle> {
    let specs = specs_of(lua, servers)?;
    let args: Map<String, Value> = match args {
        LuaValue::Nil => Map::new(),
        LuaValue::Table(t) if t.is_empty() => Map::new(),
        v => lua
            .from_value(v)
            .map_err(|e| LuaError::from(NvimError::bad("mia", "prompt arguments", e)))?,
    };
    start_job("mcp_prompt", move |_| async move {
        let text = mia_engine::mcp::get_prompt(&app().mcp(), &app().registry(), &specs, &server, &name, args)
            .await
            .map_err(job_error)?;
        Ok(Value::from(text))
    })
}
