--- Transform hooks: Lua functions that adjust a request before it is sent
--- (`pre_request`) or an answer once it is complete (`post_response`).
--- Both run on the main thread, in registration order.
---
--- `post_response` hooks run for mia.stream/mia.send answers (their return
--- value replaces the answer) and for every finished chat turn (they see
--- it; see chat.lua's `post_response`).
---
--- `pre_request` hooks run for every request that goes to a model (chat and
--- agent turns, compaction, mia.stream/mia.send): the core asks for them
--- with a "hook" call event (see `M.answer`) right before it sends, and only
--- while one is registered (`M.sync` tells it).

local M = {}

--- @type { name: string, phase: string, fn: function }[]
local hooks = {}

local PHASES = { pre_request = true, post_response = true }

--- @param hook { name: string, phase: string, fn: function }
function M.register(hook)
  require("mia.validate")({
    hook = { hook, "table" },
    ["hook.name"] = { hook.name, "string" },
    ["hook.fn"] = { hook.fn, "function" },
  })
  if not PHASES[hook.phase] then
    error(string.format('mia.register_transform_hook: `phase` must be "pre_request" or "post_response" (got %s)', vim.inspect(hook.phase)), 2)
  end
  for i, h in ipairs(hooks) do
    if h.name == hook.name then
      hooks[i] = { name = hook.name, phase = hook.phase, fn = hook.fn }
      M.sync()
      return
    end
  end
  hooks[#hooks + 1] = { name = hook.name, phase = hook.phase, fn = hook.fn }
  M.sync()
end

--- Tells a started core whether requests must come through `pre_request` hooks.
function M.sync()
  local api = package.loaded["mia.api"]
  local loader = package.loaded["mia.core"]
  if api and api._started and loader and loader.is_loaded() then
    pcall(loader.get().set_hooks, M.has("pre_request"))
  end
end

--- Answers the core's "hook" call: `data.request` as the pre_request hooks
--- leave it, or the first failing hook's error (the request is then not sent).
function M.answer(call, data)
  local req = data.request
  local ok, result = pcall(M.run, "pre_request", req, M.info(req.model or ""))
  pcall(require("mia.core").get().reply, call, ok, ok and result or tostring(result))
end

--- True when any hook is registered for `phase`.
function M.has(phase)
  for _, h in ipairs(hooks) do
    if h.phase == phase then
      return true
    end
  end
  return false
end

--- `{ provider, model, kind }` for a "provider/model" string.
function M.info(model)
  local provider, id = model:match("^([^/]+)/(.+)$")
  local user = require("mia.config").get().providers[provider or ""]
  local builtin = require("mia.settings").shared().providers[provider or ""]
  -- an override of a built-in may leave out `kind`: it keeps the built-in's
  local kind = (user and user.kind) or (builtin and builtin.kind) or nil
  return { provider = provider, model = id, kind = kind }
end

--- Runs every hook of `phase` over `value`. A hook returning nil leaves the
--- value as it was. A failing pre_request hook stops the request with its
--- error; a failing post_response hook is reported and skipped.
function M.run(phase, value, info)
  for _, h in ipairs(hooks) do
    if h.phase == phase then
      local ok, result = pcall(h.fn, value, info)
      if not ok then
        local msg = string.format("mia: transform hook `%s` (%s) failed: %s", h.name, phase, tostring(result))
        if phase == "pre_request" then
          error(msg, 0)
        end
        vim.notify(msg, vim.log.levels.ERROR)
      elseif result ~= nil then
        value = result
      end
    end
  end
  return value
end

return M
