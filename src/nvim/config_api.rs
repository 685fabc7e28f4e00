//! `check_config(opts)`: `setup()`'s table checked by the one configuration
//! type (`mia_engine::config::Config`), the type `mia-acp --config` reads.

use mia_engine::config::Config;
use mlua::{Lua, LuaSerdeExt, Result as LuaResult, Value as LuaValue};

/// Longest reason returned, in characters (a message is one line).
const MAX_REASON_CHARS: usize = 300;

/// `check_config(opts)` -> nil when `opts` is a valid configuration, else
/// the one-line reason naming the key path at fault, e.g. "`providers.x.api_kye`
/// is not an option; did you mean `api_key`?". `opts` is plain data: the
/// Lua side (lua/mia/config.lua) refuses functions before it gets here.
pub(super) fn check_config(lua: &Lua, opts: LuaValue) -> LuaResult<Option<String>> {
    super::guarded("check_config", || {
        let value: serde_json::Value = match lua.from_value(opts) {
            Ok(v) => v,
            Err(e) => {
                let reason = e.to_string();
                let first = reason.lines().next().unwrap_or_default();
                let cut: String = first.chars().take(MAX_REASON_CHARS).collect();
                return Ok(Some(format!("the options cannot be read: {cut}")));
            }
        };
        Ok(Config::from_json(value).err().map(|e| e.to_string()))
    })
}
