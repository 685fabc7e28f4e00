//! The Lua functions for external ACP agents (`crates/engine/src/acp/client.rs`): Lua
//! values in, the agent's work spawned on the runtime, handles out.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mlua::prelude::*;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::error::NvimError;
use super::{guarded, lua_error, runtime_and_queue, to_lua, StreamHandle, NEXT_STREAM};
use crate::nvim::app;
use mia_engine::acp::client::{self, AgentPrompt, AgentSpec};
use mia_engine::acp::client_sessions::{self, Ask};
use mia_engine::acp::session_list;
use mia_engine::agent::iface::{self, Agent};
use mia_llm::error::{ErrorClass, LlmError};

fn spec_of(lua: &Lua, spec: LuaValue) -> LuaResult<AgentSpec> {
    lua.from_value(spec).map_err(|e| NvimError::config("agent", e).into())
}

/// The external agent `spec` names, behind the one agent interface.
fn external(spec: &AgentSpec) -> LuaResult<Agent> {
    Ok(Agent::External(app().clone(), agent_of(spec)?))
}

fn agent_error(e: iface::AgentError) -> LlmError {
    LlmError::new(ErrorClass::InvalidRequest, None, e.to_string())
}

fn agent_of(spec: &AgentSpec) -> LuaResult<std::sync::Arc<client::AgentProc>> {
    let (_, queue) = runtime_and_queue()?;
    let bridge = mia_engine::calls::LuaBridge::new(queue, app().calls());
    Ok(client::agent(app(), spec, &bridge, || {
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
            .map_err(|e| LuaError::from(NvimError::argument_raw("mia", "agent prompt", e)))?;
        let agent = external(&spec)?;
        let cancel = CancellationToken::new();
        let id = agent
            .prompt(
                iface::Prompt::External(prompt),
                || NEXT_STREAM.fetch_add(1, Ordering::Relaxed),
                cancel.clone(),
            )
            .map_err(lua_error)?;
        Ok(StreamHandle { id, cancel })
    })
}

/// `agent_info(name)` -> `{ agentInfo, authMethods, modes, configOptions,
/// commands }` as the agent last said them, or nil when it never started.
pub(super) fn agent_info(lua: &Lua, name: String) -> LuaResult<LuaValue> {
    guarded("agent_info", || match client::existing(app(), &name) {
        Some(a) => to_lua(lua, &a.info()),
        None => Ok(LuaValue::Nil),
    })
}

/// `agent_set_mode(spec, mode)` -> handle whose result is empty (or an error).
pub(super) fn agent_set_mode(lua: &Lua, (spec, mode): (LuaValue, String)) -> LuaResult<StreamHandle> {
    let spec = spec_of(lua, spec)?;
    let asked = match external(&spec)?.set_mode(None, &mode, "").map_err(lua_error)? {
        iface::ModeSwitch::Asked(asked) => asked,
        // (An external agent is always asked; nothing to wait for otherwise.)
        iface::ModeSwitch::Announced(_) => Box::pin(async { Ok(()) }),
    };
    super::start_job("agent_set_mode", move |_| async move {
        asked.await.map(|()| serde_json::Value::Null).map_err(agent_error)
    })
}

/// What `sessions_everywhere` lists.
#[derive(Deserialize)]
struct SessionsQuery {
    cwd: PathBuf,
    /// Every configured agent; only running ones (and `current`) are asked.
    #[serde(default)]
    agents: Vec<AgentSpec>,
    /// The chat's agent: started if it does not run.
    #[serde(default)]
    current: Option<String>,
    #[serde(default)]
    timeout_ms: Option<u64>,
    /// Also mia's own stored sessions (`:Mia sessions`); false for one agent's list.
    #[serde(default = "yes")]
    own: bool,
}

fn yes() -> bool {
    true
}

/// `sessions_everywhere({ cwd, agents, current?, timeout_ms?, own? })` ->
/// handle whose result is `{ sessions, failed = { { agent, reason } } }`:
/// mia's stored sessions merged with the external agents' (`session/list`,
/// see `session_list::merge`), each agent bounded by `timeout_ms`.
pub(super) fn sessions_everywhere(lua: &Lua, query: LuaValue) -> LuaResult<StreamHandle> {
    let q: SessionsQuery = lua
        .from_value(query)
        .map_err(|e| LuaError::from(NvimError::argument_raw("mia", "sessions query", e)))?;
    let mut ask = Vec::new();
    for spec in &q.agents {
        if q.current.as_deref() == Some(spec.name.as_str()) {
            ask.push(Ask {
                agent: agent_of(spec)?,
                start: true,
            });
        } else if let Some(a) = client::existing(app(), &spec.name).filter(|a| a.spec == *spec) {
            ask.push(Ask { agent: a, start: false });
        }
    }
    let timeout = Duration::from_millis(q.timeout_ms.unwrap_or(5000).clamp(100, 60_000));
    super::start_job("sessions_everywhere", move |_| async move {
        let cwd_text = q.cwd.display().to_string();
        let own = async {
            if !q.own {
                return Ok((Vec::new(), Vec::new()));
            }
            let Some(store) = app().store().await else {
                return Ok((Vec::new(), Vec::new()));
            };
            let limit = session_list::MAX_ENTRIES;
            let here = store.list_sessions(Some(&cwd_text), None, limit).await;
            let all = store.list_sessions(None, None, limit).await;
            let infos = |p: mia_store::SessionPage| p.sessions.iter().map(super::store_api::session_info).collect();
            match (here, all) {
                (Ok(h), Ok(a)) => Ok((infos(h), infos(a))),
                (Err(e), _) | (_, Err(e)) => Err(super::store_api::store_error(e)),
            }
        };
        let (own, listed) = tokio::join!(own, client_sessions::list_everywhere(ask, timeout));
        let (here, elsewhere) = own?;
        let failed: Vec<Value> = listed
            .failed
            .iter()
            .map(|(agent, reason)| json!({ "agent": agent, "reason": reason }))
            .collect();
        Ok(json!({
            "sessions": session_list::merge(here, listed.sessions, elsewhere),
            "failed": failed,
        }))
    })
}

/// `agent_load(spec, session_id, cwd?)` -> handle whose result is
/// `{ sessionId }` once the agent replayed it (its updates come on the
/// agent's own stream, as `agent_connect` returned it).
pub(super) fn agent_load(lua: &Lua, (spec, id, cwd): (LuaValue, String, Option<String>)) -> LuaResult<StreamHandle> {
    let spec = spec_of(lua, spec)?;
    let loaded = external(&spec)?.load(id, cwd.map(PathBuf::from));
    super::start_job("agent_load", move |_| async move { loaded.await.map_err(agent_error) })
}

/// `agent_set_config(spec, config_id, value)` -> handle whose result is the
/// agent's config options after the change (`session/set_config_option`).
pub(super) fn agent_set_config(
    lua: &Lua,
    (spec, config_id, value): (LuaValue, String, LuaValue),
) -> LuaResult<StreamHandle> {
    let spec = spec_of(lua, spec)?;
    let value: Value = lua
        .from_value(value)
        .map_err(|e| LuaError::from(NvimError::argument_raw("mia", "config value", e)))?;
    let set = external(&spec)?.set_config_option(config_id, value);
    super::start_job(
        "agent_set_config",
        move |_| async move { set.await.map_err(agent_error) },
    )
}

/// `agent_probe(spec, timeout_ms)` -> handle whose result is what the agent
/// answered to `initialize` (`:checkhealth mia`).
pub(super) fn agent_probe(lua: &Lua, (spec, timeout_ms): (LuaValue, Option<u64>)) -> LuaResult<StreamHandle> {
    let spec = spec_of(lua, spec)?;
    let timeout = Duration::from_millis(timeout_ms.unwrap_or(5000).clamp(100, 60_000));
    super::start_job("agent_probe", move |_| async move {
        client::probe(spec, timeout)
            .await
            .map_err(|e| mia_llm::error::LlmError::new(mia_llm::error::ErrorClass::InvalidRequest, None, e.to_string()))
    })
}

/// `agent_stop(name)`: ends the agent's process (the next prompt starts it again).
pub(super) fn agent_stop(_: &Lua, name: String) -> LuaResult<()> {
    guarded("agent_stop", || {
        if let Some(a) = client::existing(app(), &name) {
            let (rt, _) = runtime_and_queue()?;
            rt.spawn(async move { a.stop().await });
        }
        Ok(())
    })
}
