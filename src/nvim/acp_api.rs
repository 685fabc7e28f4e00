//! The Lua functions for external ACP agents (`src/acp/client.rs`): Lua
//! values in, the agent's work spawned on the runtime, handles out.

use std::sync::atomic::Ordering;
use std::time::Duration;

use mlua::prelude::*;
use tokio_util::sync::CancellationToken;

use super::{guarded, lua_error, runtime_and_queue, to_lua, StreamHandle, NEXT_STREAM};
use crate::acp::client::{self, AgentPrompt, AgentSpec, TurnDeps};
use crate::runtime;

fn spec_of(lua: &Lua, spec: LuaValue) -> LuaResult<AgentSpec> {
    lua.from_value(spec).map_err(|e| {
        lua_error(format!(
            "mia: invalid agent configuration: {}",
            e.to_string().trim_start_matches("deserialize error: ")
        ))
    })
}

fn agent_of(spec: &AgentSpec) -> LuaResult<std::sync::Arc<client::AgentProc>> {
    let (_, queue) = runtime_and_queue()?;
    let bridge = crate::calls::LuaBridge::new(queue, crate::calls::pending());
    Ok(client::agent(spec, &bridge, || {
        NEXT_STREAM.fetch_add(1, Ordering::Relaxed)
    }))
}

/// `agent_connect(spec)` -> stream id: starts the agent (if it is not
/// running) without waiting; status, warnings and updates that arrive
/// outside a turn come on the returned stream.
pub(super) fn agent_connect(lua: &Lua, spec: LuaValue) -> LuaResult<u64> {
    guarded("agent_connect", || {
        let spec = spec_of(lua, spec)?;
        let (rt, _) = runtime_and_queue()?;
        let agent = agent_of(&spec)?;
        let stream = agent.stream;
        rt.spawn(agent.connect());
        Ok(stream)
    })
}

/// `agent_prompt(spec, { content, session_id?, utc_offset_s? })` -> handle:
/// one prompt turn; its updates and its end arrive as events.
pub(super) fn agent_prompt(lua: &Lua, (spec, prompt): (LuaValue, LuaValue)) -> LuaResult<StreamHandle> {
    guarded("agent_prompt", || {
        let spec = spec_of(lua, spec)?;
        let prompt: AgentPrompt = lua
            .from_value(prompt)
            .map_err(|e| lua_error(format!("mia: invalid agent prompt: {e}")))?;
        let (rt, _) = runtime_and_queue()?;
        let agent = agent_of(&spec)?;
        let id = NEXT_STREAM.fetch_add(1, Ordering::Relaxed);
        let cancel = CancellationToken::new();
        let budgets = runtime::agent_settings().costs;
        let token = cancel.clone();
        rt.spawn(async move {
            let deps = TurnDeps {
                store: runtime::store().await,
                budgets,
            };
            agent.prompt(deps, id, prompt, token).await;
        });
        Ok(StreamHandle { id, cancel })
    })
}

/// `agent_info(name)` -> `{ agentInfo, authMethods, modes, configOptions,
/// commands }` as the agent last said them, or nil when it never started.
pub(super) fn agent_info(lua: &Lua, name: String) -> LuaResult<LuaValue> {
    guarded("agent_info", || match client::existing(&name) {
        Some(a) => to_lua(lua, &a.info()),
        None => Ok(LuaValue::Nil),
    })
}

/// `agent_set_mode(spec, mode)` -> handle whose result is empty (or an error).
pub(super) fn agent_set_mode(lua: &Lua, (spec, mode): (LuaValue, String)) -> LuaResult<StreamHandle> {
    let spec = spec_of(lua, spec)?;
    let agent = agent_of(&spec)?;
    super::start_job("agent_set_mode", move |_| async move {
        agent
            .set_mode(mode)
            .await
            .map(|()| serde_json::Value::Null)
            .map_err(|e| {
                crate::llm::error::LlmError::new(crate::llm::error::ErrorClass::InvalidRequest, None, e.to_string())
            })
    })
}

/// `agent_probe(spec, timeout_ms)` -> handle whose result is what the agent
/// answered to `initialize` (`:checkhealth mia`).
pub(super) fn agent_probe(lua: &Lua, (spec, timeout_ms): (LuaValue, Option<u64>)) -> LuaResult<StreamHandle> {
    let spec = spec_of(lua, spec)?;
    let timeout = Duration::from_millis(timeout_ms.unwrap_or(5000).clamp(100, 60_000));
    super::start_job("agent_probe", move |_| async move {
        client::probe(spec, timeout).await.map_err(|e| {
            crate::llm::error::LlmError::new(crate::llm::error::ErrorClass::InvalidRequest, None, e.to_string())
        })
    })
}

/// `agent_stop(name)`: ends the agent's process (the next prompt starts it again).
pub(super) fn agent_stop(_: &Lua, name: String) -> LuaResult<()> {
    guarded("agent_stop", || {
        if let Some(a) = client::existing(&name) {
            let (rt, _) = runtime_and_queue()?;
            rt.spawn(async move { a.stop().await });
        }
        Ok(())
    })
}
