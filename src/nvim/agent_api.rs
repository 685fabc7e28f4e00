//! The Lua functions for the agent the chat talks to, mia's own or an
//! external ACP agent alike (`mia_engine::agent::iface`): Lua values in,
//! the agent's work started on the runtime, handles out. The first argument
//! names the agent: nil (or "mia") for mia's own, else an external agent's
//! spec as `mia.agents.spec` builds it.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mlua::prelude::*;
use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::error::NvimError;
use super::{guarded, lua_error, new_stream, runtime_and_queue, start_job, to_lua, StreamHandle, NEXT_STREAM};
use crate::nvim::app;
use mia_engine::acp::client::{self, AgentSpec};
use mia_engine::acp::client_sessions::Ask;
use mia_engine::agent::iface::{self, Agent, ModeSwitch, NewSession};
use mia_engine::agent::listing::ListQuery;
use mia_llm::error::{ErrorClass, LlmError};

fn spec_of(lua: &Lua, spec: LuaValue) -> LuaResult<AgentSpec> {
    lua.from_value(spec).map_err(|e| NvimError::config("agent", e).into())
}

/// The agent `target` names: nil or "mia" for mia's own, a spec for an
/// external one (its process made on first use, not started).
fn agent(lua: &Lua, target: LuaValue) -> LuaResult<Agent> {
    match target {
        LuaValue::Nil => Ok(Agent::Own(app().clone())),
        LuaValue::String(s) if s.as_bytes().as_ref() == b"mia" => Ok(Agent::Own(app().clone())),
        spec => Ok(Agent::External(app().clone(), agent_of(&spec_of(lua, spec)?)?)),
    }
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

/// A Lua table as `T`, or one clear error naming `what` it should have been.
fn arg<T: serde::de::DeserializeOwned>(lua: &Lua, value: LuaValue, what: &'static str) -> LuaResult<T> {
    lua.from_value(value)
        .map_err(|e| NvimError::argument_raw("mia", what, e).into())
}

/// `agent_connect(agent)` -> stream id | nil: starts an external agent (if
/// it is not running) without waiting; status, warnings and updates that
/// arrive outside a turn come on the returned stream. mia's own agent has
/// nothing to start (nil).
pub(super) fn agent_connect(lua: &Lua, target: LuaValue) -> LuaResult<Option<u64>> {
    guarded("agent_connect", || match agent(lua, target)? {
        Agent::Own(_) => Ok(None),
        Agent::External(_, proc) => {
            let (rt, _) = runtime_and_queue()?;
            let stream = proc.stream;
            rt.spawn(proc.connect());
            Ok(Some(stream))
        }
    })
}

/// `agent_info(name?)` -> `{ agentInfo, modes, configOptions, commands,
/// capabilities }` as the agent last said them (mia's own: now), or nil
/// for an external agent that never started.
pub(super) fn agent_info(lua: &Lua, name: Option<String>) -> LuaResult<LuaValue> {
    guarded("agent_info", || match name.as_deref() {
        None | Some("mia") => to_lua(lua, &Agent::Own(app().clone()).info()),
        Some(name) => match client::existing(app(), name) {
            Some(a) => to_lua(lua, &a.info()),
            None => Ok(LuaValue::Nil),
        },
    })
}

/// `agent_new_session(agent, { cwd, mode?, model, title? })` -> `{
/// sessionId, modes }`: the chat's new, empty session, owned by the core
/// (stored at its first prompt), and the modes the agent offers (ACP's
/// `session/new` answer).
pub(super) fn agent_new_session(lua: &Lua, (target, opts): (LuaValue, LuaValue)) -> LuaResult<LuaValue> {
    guarded("agent_new_session", || {
        let opts: NewSession = arg(lua, opts, "session options")?;
        let started = agent(lua, target)?.new_session(opts).map_err(lua_error)?;
        to_lua(lua, &started)
    })
}

/// `agent_prompt(agent, session_id, { content, model?, mode?, system?,
/// title?, attachments?, ... })` -> handle: one prompt turn of the chat's
/// session. Its ACP updates and its end arrive as events; Lua never sends
/// the history. Refused while the session has a turn in flight.
pub(super) fn agent_prompt(lua: &Lua, (target, id, prompt): (LuaValue, String, LuaValue)) -> LuaResult<StreamHandle> {
    guarded("agent_prompt", || {
        let prompt: mia_engine::agent::Prompt = lua
            .from_value(prompt)
            .map_err(|e| LuaError::from(NvimError::argument("mia.prompt", "request", e)))?;
        let cancel = CancellationToken::new();
        let stream = agent(lua, target)?
            .prompt(id, prompt, new_stream, cancel.clone())
            .map_err(lua_error)?;
        Ok(StreamHandle { id: stream, cancel })
    })
}

/// `agent_context(agent, session_id, prompt)` -> handle whose result is
/// what the session's next request would carry if `prompt` (the table
/// `agent_prompt` takes) were sent now, part by part with token counts
/// (`:Mia context`). Nothing is sent to the model or stored.
pub(super) fn agent_context(lua: &Lua, (target, id, prompt): (LuaValue, String, LuaValue)) -> LuaResult<StreamHandle> {
    guarded("agent_context", || {
        let prompt: mia_engine::agent::Prompt = lua
            .from_value(prompt)
            .map_err(|e| LuaError::from(NvimError::argument("mia.context", "request", e)))?;
        let cancel = CancellationToken::new();
        let stream = agent(lua, target)?
            .context(&id, prompt, new_stream, cancel.clone())
            .map_err(lua_error)?;
        Ok(StreamHandle { id: stream, cancel })
    })
}

/// `agent_set_mode(agent, session_id?, mode)` -> `{ update }` when the
/// agent switched at once (mia's own: its `current_mode_update`, with
/// `_meta.mia.previousModeId`), or `{ pending = handle }` when it was asked
/// (an external agent, which announces the switch on its stream). A mode
/// the agent does not offer is refused with the ones it does.
pub(super) fn agent_set_mode(lua: &Lua, (target, id, mode): (LuaValue, Option<String>, String)) -> LuaResult<LuaTable> {
    guarded("agent_set_mode", || {
        let out = lua.create_table()?;
        match agent(lua, target)?.set_mode(id.as_deref(), &mode).map_err(lua_error)? {
            ModeSwitch::Announced(update) => out.set("update", to_lua(lua, update.as_ref())?)?,
            ModeSwitch::Asked(asked) => {
                let handle = start_job("agent_set_mode", move |_| async move {
                    asked.await.map(|()| Value::Null).map_err(agent_error)
                })?;
                out.set("pending", handle)?;
            }
        }
        Ok(out)
    })
}

/// `agent_set_config(agent, config_id, value)` -> handle whose result is the
/// agent's config options after the change (`session/set_config_option`);
/// `value` is a select's value id, or "true"/"false" for a boolean. A
/// setting or value the agent does not offer is refused with what it does.
pub(super) fn agent_set_config(
    lua: &Lua,
    (target, config_id, value): (LuaValue, String, String),
) -> LuaResult<StreamHandle> {
    let set = agent(lua, target)?
        .set_config_option(&config_id, &value)
        .map_err(lua_error)?;
    start_job(
        "agent_set_config",
        move |_| async move { set.await.map_err(agent_error) },
    )
}

/// `agent_load(agent, session_id, cwd?)` -> handle. mia's own agent: its
/// result is `{ session, items, cost_usd }`, the stored session (now owned
/// by the core) and every update it sent, in order. An external agent: its
/// result is `{ sessionId }` once it replayed the session (its updates come
/// on the agent's own stream, as `agent_connect` returned it).
pub(super) fn agent_load(lua: &Lua, (target, id, cwd): (LuaValue, String, Option<String>)) -> LuaResult<StreamHandle> {
    let loaded = agent(lua, target)?.load(id, cwd.map(PathBuf::from));
    start_job("agent_load", move |_| async move { loaded.await.map_err(agent_error) })
}

/// The longest an external agent may take to list, whatever Lua asks.
fn list_timeout(ms: Option<u64>) -> Duration {
    ms.map_or(iface::LIST_TIMEOUT, |ms| Duration::from_millis(ms.clamp(100, 60_000)))
}

/// What `agent_list` takes: ACP's `cwd`, `cursor` and page size, and how
/// long an external agent may take.
#[derive(Deserialize, Default)]
#[serde(default)]
struct ListOpts {
    cwd: Option<String>,
    cursor: Option<String>,
    limit: Option<usize>,
    timeout_ms: Option<u64>,
}

/// `agent_list(agent, { cwd?, cursor?, limit?, timeout_ms? })` -> handle
/// whose result is ACP's ListSessionsResponse: mia's own one page from the
/// store (`{ sessions, nextCursor? }`); an external agent's every page in
/// its cwd (`{ sessions }`), the agent started if need be.
pub(super) fn agent_list(lua: &Lua, (target, query): (LuaValue, LuaValue)) -> LuaResult<StreamHandle> {
    let opts: ListOpts = match query {
        LuaValue::Nil => ListOpts::default(),
        q => arg(lua, q, "sessions query")?,
    };
    let query = ListQuery {
        cwd: opts.cwd,
        cursor: opts.cursor,
        limit: opts.limit,
    };
    let listed = agent(lua, target)?.list(query, list_timeout(opts.timeout_ms));
    start_job("agent_list", move |_| async move { listed.await.map_err(agent_error) })
}

/// What `agent_list_all` lists.
#[derive(Deserialize)]
struct EverywhereQuery {
    cwd: PathBuf,
    /// Every configured agent; only running ones (and `current`) are asked.
    #[serde(default)]
    agents: Vec<AgentSpec>,
    /// The chat's agent: started if it does not run.
    #[serde(default)]
    current: Option<String>,
    #[serde(default)]
    timeout_ms: Option<u64>,
}

/// `agent_list_all({ cwd, agents, current?, timeout_ms? })` -> handle whose
/// result is `{ sessions, failed = { { agent, reason } } }`: mia's stored
/// sessions merged with the external agents' (`session/list`), each agent
/// bounded by `timeout_ms` (`:Mia sessions`).
pub(super) fn agent_list_all(lua: &Lua, query: LuaValue) -> LuaResult<StreamHandle> {
    let q: EverywhereQuery = arg(lua, query, "sessions query")?;
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
    let cwd = q.cwd.display().to_string();
    let listed = iface::list_everywhere(app().clone(), cwd, true, ask, list_timeout(q.timeout_ms));
    start_job(
        "agent_list_all",
        move |_| async move { listed.await.map_err(agent_error) },
    )
}

/// `agent_compact(agent, session_id)` -> handle: `/compact`. Its
/// `compaction_update` arrives as an event, then an empty result. Refused
/// while a turn runs.
pub(super) fn agent_compact(lua: &Lua, (target, id): (LuaValue, String)) -> LuaResult<StreamHandle> {
    guarded("agent_compact", || {
        let cancel = CancellationToken::new();
        let stream = agent(lua, target)?
            .compact(&id, new_stream, cancel.clone())
            .map_err(lua_error)?;
        Ok(StreamHandle { id: stream, cancel })
    })
}

/// `agent_set_session(session_id, { mode?, model?, title? })`: later
/// requests of the chat's session (the turn in flight included) use them.
pub(super) fn agent_set_session(lua: &Lua, (id, opts): (String, LuaValue)) -> LuaResult<()> {
    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct Set {
        mode: Option<String>,
        model: Option<String>,
        title: Option<String>,
    }
    guarded("agent_set_session", || {
        let set: Set = lua.from_value(opts).map_err(lua_error)?;
        let session = app().session(&id).map_err(lua_error)?;
        session.update_info(set.mode.as_deref(), set.model.as_deref(), set.title.as_deref());
        Ok(())
    })
}

/// `agent_messages(session_id)` -> handle whose result is what the session's
/// next request would send (a Lua tool's `ctx.conversation()`); empty for an unknown id.
pub(super) fn agent_messages(_: &Lua, id: String) -> LuaResult<StreamHandle> {
    start_job("agent_messages", move |_| async move {
        let messages = app()
            .sessions()
            .get(&id)
            .map(|s| s.request_messages())
            .unwrap_or_default();
        Ok(serde_json::to_value(messages).unwrap_or(Value::Null))
    })
}

/// `agent_close_session(session_id)`: the core forgets the chat's session
/// (its turn, if any, is cancelled).
pub(super) fn agent_close_session(_: &Lua, id: String) -> LuaResult<()> {
    guarded("agent_close_session", || {
        app().sessions().close(&id);
        Ok(())
    })
}

/// `agent_probe(spec, timeout_ms)` -> handle whose result is what the agent
/// answered to `initialize` (`:checkhealth mia`).
pub(super) fn agent_probe(lua: &Lua, (spec, timeout_ms): (LuaValue, Option<u64>)) -> LuaResult<StreamHandle> {
    let spec = spec_of(lua, spec)?;
    let timeout = Duration::from_millis(timeout_ms.unwrap_or(5000).clamp(100, 60_000));
    start_job("agent_probe", move |_| async move {
        client::probe(spec, timeout)
            .await
            .map_err(|e| LlmError::new(ErrorClass::InvalidRequest, None, e.to_string()))
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

/// Registers the family on the module table `m`.
pub(super) fn register(lua: &Lua, m: &LuaTable) -> LuaResult<()> {
    m.set("agent_connect", lua.create_function(agent_connect)?)?;
    m.set("agent_info", lua.create_function(agent_info)?)?;
    m.set("agent_new_session", lua.create_function(agent_new_session)?)?;
    m.set("agent_prompt", lua.create_function(agent_prompt)?)?;
    m.set("agent_context", lua.create_function(agent_context)?)?;
    m.set("agent_set_mode", lua.create_function(agent_set_mode)?)?;
    m.set("agent_set_config", lua.create_function(agent_set_config)?)?;
    m.set("agent_load", lua.create_function(agent_load)?)?;
    m.set("agent_list", lua.create_function(agent_list)?)?;
    m.set("agent_list_all", lua.create_function(agent_list_all)?)?;
    m.set("agent_compact", lua.create_function(agent_compact)?)?;
    m.set("agent_set_session", lua.create_function(agent_set_session)?)?;
    m.set("agent_messages", lua.create_function(agent_messages)?)?;
    m.set("agent_close_session", lua.create_function(agent_close_session)?)?;
    m.set("agent_probe", lua.create_function(agent_probe)?)?;
    m.set("agent_stop", lua.create_function(agent_stop)?)?;
    Ok(())
}
