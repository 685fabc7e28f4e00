//! `edit_stream(spec, opts)`: `:Mia edit`'s request (`crates/engine/src/edit.rs`).
//! The core makes it off the editor's thread (rules files, the deny
//! rules, the mentions' files), then streams it as `mia.stream` does: the
//! same provider path, transform hooks, budgets and usage row (under
//! `opts.agent`, "edit" by default, and `opts.session_id`).

use mlua::prelude::*;
use tokio_util::sync::CancellationToken;

use super::error::NvimError;
use super::{app, runtime_and_queue, RequestOpts, StreamHandle, NEXT_STREAM};
use mia_engine::edit::{prepare, EditSpec};
use mia_engine::stream_task;
use mia_llm::error::{ErrorClass, LlmError};
use std::sync::atomic::Ordering;

pub(super) fn edit_stream(lua: &Lua, (spec, opts): (LuaValue, LuaValue)) -> LuaResult<StreamHandle> {
    super::guarded("edit_stream", || {
        let spec: EditSpec = lua
            .from_value(spec)
            .map_err(|e| NvimError::argument("mia.edit", "spec", e))?;
        let opts: RequestOpts = match opts {
            LuaValue::Nil => RequestOpts::default(),
            v => lua
                .from_value(v)
                .map_err(|e| NvimError::argument("mia.edit", "opts", e))?,
        };
        let agent = match opts.agent.as_deref().map(str::trim) {
            None | Some("") => "edit".to_string(),
            Some(name) => name.chars().take(super::MAX_AGENT_NAME).collect(),
        };
        let settings = app().agent_settings();
        let api = stream_task::ApiCall {
            agent,
            utc_offset_s: opts.utc_offset_s.clamp(-86_400, 86_400),
            budgets: settings.costs,
            session_id: opts.session_id.filter(|s| !s.is_empty()),
            hooks: app().hooks(),
            telemetry: app().telemetry(),
            ledger: app().store_slot().ledger(),
        };
        let providers = app().providers();
        let secrets = providers.secrets();
        let made = async move {
            tokio::task::spawn_blocking(move || prepare(&spec, &settings, &secrets))
                .await
                .map_err(|e| {
                    LlmError::new(
                        ErrorClass::Internal,
                        None,
                        format!("mia: making the edit's request failed: {e}"),
                    )
                })?
                .map_err(|e| LlmError::new(ErrorClass::InvalidRequest, None, e.to_string()))
        };
        let (rt, queue) = runtime_and_queue()?;
        let id = NEXT_STREAM.fetch_add(1, Ordering::Relaxed);
        let cancel = CancellationToken::new();
        stream_task::spawn_prepared_stream(
            &rt,
            queue,
            providers,
            app().calls(),
            app().store(),
            id,
            made,
            true,
            api,
            cancel.clone(),
        );
        Ok(StreamHandle { id, cancel })
    })
}
