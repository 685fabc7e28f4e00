--- mia: an AI coding assistant inside Neovim. This is the public Lua API;
--- see `:h mia`. Requiring this module is cheap: the native library loads
--- on the first call that needs it.

local M = {}

--- Checks and stores the configuration: the core's configuration type checks
--- it, so this loads the native library (a few milliseconds) but starts
--- nothing (lua/mia/config.lua).
--- @param opts? mia.Config
function M.setup(opts)
  local config = require("mia.config")
  config.set(opts)
  -- Only reconfigure a core whose runtime already runs; never start it here.
  local core = package.loaded["mia.core"]
  local api = package.loaded["mia.api"]
  if core and core.is_loaded() and api and api._started then
    core.call(core.get().configure, config.core())
    core.call(core.get().configure_agent, config.agent())
    api._telemetry(core.get())
  end
end

-- Everything else (stream, prompt, costs, sessions, …) lives in mia.api,
-- loaded on first use.
return setmetatable(M, {
  __index = function(t, key)
    local value = require("mia.api")[key]
    if value ~= nil and type(value) ~= "boolean" then
      rawset(t, key, value)
    end
    return value
  end,
})
