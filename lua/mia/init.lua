--- mia: an AI coding assistant inside Neovim. This is the public Lua API;
--- see `:h mia`. Requiring this module is cheap: the native library loads
--- on the first call that needs it.

local M = {}

--- Stores and validates the configuration. Does not load the native library.
--- @param opts? mia.Config
function M.setup(opts)
  local config = require("mia.config")
  config.set(opts)
  -- Only reconfigure a core that is already running; never load it here.
  local core = package.loaded["mia.core"]
  if core and core.is_loaded() then
    core.call(core.get().configure, config.core())
  end
end

--- The loaded core with its bridge running; raises the loader's one-line reason.
--- @return table
function M._core()
  local loader = require("mia.core")
  local core = loader.get()
  local cfg = require("mia.config")
  local bridge = require("mia.bridge")
  if not M._started then
    loader.call(core.configure, cfg.core())
    bridge.start(core, { log_file = cfg.get().log_file, log_level = cfg.get().log_level })
    M._started = true
  end
  return core
end

--- @class mia.StreamHandle
--- @field id integer
--- @field cancel fun(self: mia.StreamHandle) Stops the stream; `on_error` gets class "cancelled".

--- Streams one answer. Callbacks run on the main thread; text deltas that
--- arrive within one frame come as one delta.
--- @param request { model?: string, system?: string, messages: table[], tools?: table[], max_tokens?: integer, temperature?: number }
--- @param callbacks mia.StreamCallbacks
--- @return mia.StreamHandle
function M.stream(request, callbacks)
  vim.validate({ request = { request, "table" }, callbacks = { callbacks, "table" } })
  vim.validate({ ["request.messages"] = { request.messages, "table" } })
  local core = M._core()
  local req = vim.deepcopy(request)
  req.model = req.model or require("mia.config").get().model
  local native = require("mia.core").call(core.stream, req)
  local id = native.id
  require("mia.bridge").watch(id, callbacks)
  return {
    id = id,
    cancel = function()
      native:cancel()
    end,
  }
end

--- Sends `text` in the chat (what `:Mia prompt` does).
--- @param text string
--- @param opts? { model?: string, context?: string }
function M.prompt(text, opts)
  require("mia.chat").prompt(text, opts)
end

--- Cancels the answer in flight; its partial text stays, marked as cancelled.
function M.stop()
  require("mia.chat").stop()
end

--- Opens (or focuses) the chat window.
function M.open()
  require("mia.chat").open()
end

--- A short statusline string: model and state of the chat.
--- @return string
function M.statusline()
  local cfg = require("mia.config").get()
  local chat = package.loaded["mia.chat"]
  local state = chat and chat.state() or "idle"
  local model = (cfg.model:match("/(.+)$") or cfg.model)
  if state == "streaming" then
    return string.format("mia %s %s …", cfg.mode, model)
  end
  return string.format("mia %s %s", cfg.mode, model)
end

return M
