//! Checkpoints as Lua sees them: `checkpoints(session_id)` lists a
//! session's checkpoints, `checkpoint_undo(session_id)` puts the files of
//! the latest one back. Both are jobs: the file I/O runs on the blocking pool.

use mlua::prelude::*;

use super::{start_job, StreamHandle};
use crate::nvim::app;
use mia_engine::checkpoint::Checkpoints;
use mia_llm::error::{ErrorClass, LlmError};

fn error(message: impl std::fmt::Display) -> LlmError {
    LlmError::new(ErrorClass::InvalidRequest, None, format!("mia: {message}"))
}

fn store() -> Result<Checkpoints, LlmError> {
    let settings = app().agent_settings();
    let dir = settings
        .data_dir
        .ok_or_else(|| error(mia_engine::checkpoint::CheckpointError::NoDataDir))?;
    Ok(Checkpoints::new(&dir, settings.checkpoints).with_secrets(app().providers().secrets()))
}

/// `checkpoints(session_id)` -> handle; its result lists the checkpoints,
/// newest first, with the files each covers.
pub fn checkpoints(_: &Lua, id: String) -> LuaResult<StreamHandle> {
    start_job("checkpoints", move |_| async move {
        let store = store()?;
        let root = app().sessions().get(&id).map(|s| s.info().cwd).unwrap_or_default();
        let root = std::fs::canonicalize(&root).unwrap_or(root);
        let listed = tokio::task::spawn_blocking(move || store.list(&id, &root))
            .await
            .map_err(error)?
            .map_err(error)?;
        Ok(serde_json::to_value(listed).unwrap_or(serde_json::Value::Null))
    })
}

/// `checkpoint_undo(session_id)` -> handle; its result says which files were
/// restored (and which not, and why). Refused while the session's turn runs.
pub fn checkpoint_undo(_: &Lua, id: String) -> LuaResult<StreamHandle> {
    start_job("checkpoint_undo", move |_| async move {
        if app().sessions().get(&id).is_some_and(|s| s.is_running()) {
            return Err(error(
                "an answer is still running in this session; wait for it to finish or :Mia stop, then undo",
            ));
        }
        let store = store()?;
        let restored = tokio::task::spawn_blocking(move || store.undo(&id))
            .await
            .map_err(error)?
            .map_err(error)?;
        Ok(serde_json::to_value(restored).unwrap_or(serde_json::Value::Null))
    })
}
