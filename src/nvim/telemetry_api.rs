//! `telemetry_configure` and `telemetry_status` (issue 18, `:h mia-telemetry`).

use crate::nvim::app;
use mlua::prelude::*;

use super::error::NvimError;
use super::guarded;
use mia_engine::telemetry;

/// `telemetry_configure(cfg)` -> state line: starts, restarts or stops
/// the OpenTelemetry export; raises one clear message on a bad setting.
pub fn telemetry_configure(lua: &Lua, cfg: LuaValue) -> LuaResult<String> {
    guarded("telemetry_configure", || {
        let cfg: telemetry::TelemetryConfig = lua.from_value(cfg).map_err(|e| NvimError::config("telemetry", e))?;
        app().configure_telemetry(cfg).map_err(|m| NvimError::Failed(m).into())
    })
}

/// `telemetry_status()` -> `{ enabled, state, exports_ok, exports_failed,
/// bytes_sent, backlog, dropped, last_result, ... }` or nil when never configured.
pub fn telemetry_status(lua: &Lua, (): ()) -> LuaResult<LuaValue> {
    guarded("telemetry_status", || match app().telemetry().status() {
        // None fields are nil (not the null userdata, which RPC cannot carry).
        Some(s) => lua.to_value_with(&s, LuaSerializeOptions::new().serialize_none_to_null(false)),
        None => Ok(LuaValue::Nil),
    })
}
