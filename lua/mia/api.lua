--- The public Lua API besides setup() (|mia-api|). `require("mia")` loads
--- this module on the first use of any of these names, so plugin managers
--- that call setup() at startup pay only for setup().

local M = {}

--- Starts, restarts or stops the OpenTelemetry export (`:h mia-telemetry`).
--- A bad setting (e.g. in an OTEL_* variable) is told once and leaves
--- export off; mia works on.
function M._telemetry(core)
  local c = require("mia.config").get()
  local t = c.telemetry or {}
  local ok, err = pcall(core.telemetry_configure, {
    otlp = t.otlp,
    log_prompts = t.log_prompts,
    project = t.project,
    data_dir = c.data_dir,
  })
  if not ok then
    local msg = tostring(err):gsub("^[^\n]-: mia:", "mia:")
    vim.schedule(function()
      vim.notify(msg, vim.log.levels.ERROR)
    end)
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
    loader.call(core.configure_agent, cfg.agent())
    bridge.start(core, { log_file = cfg.get().log_file, log_level = cfg.get().log_level })
    -- The runtime starts, and opens the store and the default provider's
    -- HTTP client (TLS roots) in the background while the rest of the
    -- first command runs here (as soon as the log they may write to is).
    loader.call(core.prewarm, cfg.get().model)
    M._telemetry(core)
    M._started = true
    require("mia.hooks").sync()
    require("mia.tools.editor").register()
    require("mia.tools").flush()
    -- The core's own tools exist from here on: say so as for Lua ones
    -- (scheduled: the core may start under textlock, e.g. in a completion).
    -- The list is only read when someone listens (it is not free, and the
    -- first prompt is waiting on this thread).
    vim.schedule(function()
      if #vim.api.nvim_get_autocmds({ event = "User", pattern = "MiaToolRegistered" }) == 0 then
        return
      end
      local builtin = vim.tbl_filter(function(t)
        return t.source == "builtin"
      end, loader.call(core.tools))
      for _, t in ipairs(builtin) do
        vim.api.nvim_exec_autocmds("User", { pattern = "MiaToolRegistered", data = { name = t.name, source = t.source } })
      end
    end)
    -- MCP servers' tools come and go in the core (a server starts, restarts,
    -- or changes its list): the core tells, and they are announced the same way.
    local watch = loader.call(core.watch_tools)
    bridge.watch(watch.id, {
      on_mia = function(ev)
        if ev.type == "tool_change" and ev.source == "mcp" then
          vim.api.nvim_exec_autocmds("User", {
            pattern = ev.registered and "MiaToolRegistered" or "MiaToolDeregistered",
            data = { name = ev.name, source = ev.source },
          })
        end
      end,
    })
  end
  return core
end

--- Registers a tool the model can call; see |mia.register_tool()|.
--- @param spec mia.ToolSpec
--- `opts.source`: "user" (default) or "plugin" (a plugin's tools: the
--- user's and the project's of the same name come before them).
--- @param opts? { source?: "user"|"plugin" }
function M.register_tool(spec, opts)
  local source = (opts or {}).source or "user"
  if source ~= "user" and source ~= "plugin" then
    error('mia.register_tool: `source` must be "user" or "plugin" (got ' .. vim.inspect(source) .. ")", 2)
  end
  return require("mia.tools").register(spec, source)
end

--- Unregisters the Lua tool `name` of `opts.source` ("user" by default);
--- the tool it hid (a plugin's, a built-in) comes back. Whether there was one.
--- @param name string
--- @param opts? { source?: "user"|"plugin" }
--- @return boolean
function M.unregister_tool(name, opts)
  local source = (opts or {}).source or "user"
  if source ~= "user" and source ~= "plugin" then
    error('mia.unregister_tool: `source` must be "user" or "plugin" (got ' .. vim.inspect(source) .. ")", 2)
  end
  return require("mia.tools").unregister(name, source)
end

--- @class mia.StreamHandle
--- @field id integer
--- @field cancel fun(self: mia.StreamHandle) Stops the stream; `on_error` gets class "cancelled".

function M._handle_of(native)
  return {
    id = native.id,
    cancel = function()
      native:cancel()
    end,
  }
end

--- Starts a request through the core (`kind` is "stream" or "send"). The
--- core checks the budgets, runs the pre_request hooks and records the
--- call's usage under `opts.agent` (default "api").
local function request_with_hooks(kind, request, callbacks, opts)
  require("mia.validate")({
    request = { request, "table" },
    callbacks = { callbacks, "table" },
    opts = { opts, "table", true },
  })
  require("mia.validate")({ ["request.messages"] = { request.messages, "table" } })
  opts = opts or {}
  require("mia.validate")({
    ["opts.agent"] = { opts.agent, "string", true },
    ["opts.session_id"] = { opts.session_id, "string", true },
  })
  local core = M._core()
  local hooks = require("mia.hooks")
  local req = vim.deepcopy(request)
  req.model = req.model or require("mia.config").get().model
  local native = require("mia.core").call(core[kind], req, {
    agent = opts.agent,
    session_id = opts.session_id,
    utc_offset_s = require("mia.costs").utc_offset(),
  })
  local post = hooks.has("post_response")
  local info = post and hooks.info(req.model) or nil
  local cbs = setmetatable({
    -- A cost warning this call crossed (|mia-budgets|) shows like the chat's.
    on_mia = function(ev)
      if ev.type == "warning" then
        vim.notify(ev.text, vim.log.levels.WARN)
      end
    end,
    on_done = function(done)
      if post then
        done = hooks.run("post_response", done, info)
      end
      if callbacks.on_done then
        callbacks.on_done(done)
      end
    end,
  }, { __index = callbacks })
  require("mia.bridge").watch(native.id, cbs)
  return M._handle_of(native)
end

--- Streams one answer. Callbacks run on the main thread; text deltas that
--- arrive within one frame come as one delta. The call is recorded in the
--- cost store under `opts.agent` (default "api") and respects the budgets.
--- @param request { model?: string, system?: string, messages: table[], tools?: table[], max_tokens?: integer, temperature?: number, extra_body?: table, stop_sequences?: string[], response_format?: { name?: string, schema: table } }
--- @param callbacks mia.StreamCallbacks
--- @param opts? { agent?: string, session_id?: string }
--- @return mia.StreamHandle
function M.stream(request, callbacks, opts)
  return request_with_hooks("stream", request, callbacks, opts)
end

--- Like |mia.stream()| over a non-streaming request: the answer arrives
--- whole (on_delta still sees it, then on_done).
--- @param request table
--- @param callbacks mia.StreamCallbacks
--- @param opts? { agent?: string, session_id?: string }
--- @return mia.StreamHandle
function M.send(request, callbacks, opts)
  return request_with_hooks("send", request, callbacks, opts)
end

--- Runs one core job for `provider` and hands its outcome to `cb(err, value)`.
--- Starts the core job `fn_name(...)`; `cb(err, value)` runs on the main
--- thread when it ends. Returns its handle.
function M._job(fn_name, cb, ...)
  local core = M._core()
  local native = require("mia.core").call(core[fn_name], ...)
  require("mia.bridge").watch(native.id, {
    on_done = function(value)
      cb(nil, value)
    end,
    on_error = function(err)
      cb(err, nil)
    end,
  })
  return M._handle_of(native)
end

local function provider_job(fn_name, provider, cb)
  require("mia.validate")({ provider = { provider, "string" }, cb = { cb, "function" } })
  return M._job(fn_name, cb, provider)
end

--- Lists the models `provider` serves; `cb(err, ids)` runs on the main thread.
--- @param provider string
--- @param cb fun(err: table?, ids: string[]?)
--- @return mia.StreamHandle
function M.list_models(provider, cb)
  return provider_job("list_models", provider, cb)
end

--- Checks that `provider` answers with the configured credentials (lists its
--- models); `cb(err, { models = n })`.
--- @param provider string
--- @param cb fun(err: table?, result: { models: integer }?)
--- @return mia.StreamHandle
function M.health_check(provider, cb)
  return provider_job("health_check", provider, cb)
end

--- Registers a transform hook. `phase = "pre_request"`: `fn(request, info)`
--- may change and return the request (internal format; `request.extra_body`
--- is merged into the provider's wire body). `phase = "post_response"`:
--- `fn(done, info)` may change and return the finished answer. `info` is
--- `{ provider, model, kind }`. A hook registered again under the same name
--- replaces the earlier one.
--- @param hook { name: string, phase: "pre_request"|"post_response", fn: function }
function M.register_transform_hook(hook)
  require("mia.hooks").register(hook)
end

--- Sends `text` in the chat (what `:Mia prompt` does). `attachments` are
--- what @-mentions attach (|mia-mentions|): `{ kind = "file", path }`,
--- `{ kind = "folder", path }`, `{ kind = "text", uri, name, text }`,
--- `{ kind = "image", media_type, data }` (base64).
--- @param text string
--- @param opts? { model?: string, context?: string, attachments?: table[] }
function M.prompt(text, opts)
  require("mia.chat").prompt(text, opts)
end

--- Rewrites lines of the current buffer as `instruction` says, streamed as
--- pending hunks (|mia-edit|): `opts.line1`..`opts.line2` (1-based), else
--- the function or paragraph at the cursor; no instruction asks for one.
--- @param instruction? string
--- @param opts? { line1?: integer, line2?: integer, buf?: integer }
function M.edit(instruction, opts)
  opts = vim.deepcopy(opts or {})
  if opts.line1 and opts.range == nil then
    opts.range = 2
    opts.line2 = opts.line2 or opts.line1
  end
  require("mia.edit").edit(instruction, opts)
end

--- Cancels the answer in flight; its partial text stays, marked as cancelled.
--- Also cancels every |mia-edit| streaming (the buffers stay as they were).
function M.stop()
  local edit = package.loaded["mia.edit"]
  local chat = package.loaded["mia.chat"]
  if edit and edit.stop() and not (chat and chat.state() == "streaming") then
    return
  end
  require("mia.chat").stop()
end

--- Opens (or focuses) the chat window.
function M.open()
  require("mia.chat").open()
end

local function short_tokens(n)
  if n >= 1e6 then
    return string.format("%.1fM", n / 1e6)
  elseif n >= 1e4 then
    return string.format("%.0fk", n / 1e3)
  elseif n >= 1e3 then
    return string.format("%.1fk", n / 1e3)
  end
  return tostring(math.floor(n))
end

--- @class mia.StatuslineOpts
--- @field messages? boolean also show the session's message count, your prompts and mia's answers (`4 msgs`)
--- @field tokens? boolean also show the session's tokens (`12.3k tok`; `~` while an answer streams)
--- @field context? boolean also show how full the model's context window was at the last request (`42% ctx`)

--- A short statusline string: mode, model and the session's cost so far
--- ("…" while an answer streams; the cost climbs with it, `~` marking an
--- estimate). Never loads the native library.
--- @param opts? mia.StatuslineOpts
--- @return string
function M.statusline(opts)
  -- Some statusline shows mia's figures: the live ones redraw statuslines.
  M._statusline_shown = true
  local cfg = require("mia.config").get()
  local chat = package.loaded["mia.chat"]
  local state = chat and chat.state() or "idle"
  -- No model when the library cannot load (its defaults are the core's): "?".
  local model = cfg.model and (cfg.model:match("/(.+)$") or cfg.model) or "?"
  local cost, unknown, live = 0, false, false
  if chat then
    cost, unknown, live = chat.session_cost()
  end
  local mode = chat and chat.mode() or cfg.mode or "?"
  local money = require("mia.costs").usd(cost)
  if unknown then
    -- some answers had no price: they count $0.00, and the statusline says so
    money = money .. (cost > 0 and " (+unpriced)" or " (unpriced)")
  elseif live then
    money = "~" .. money
  end
  local s = string.format("mia %s %s %s", mode, model, money)
  if type(opts) == "table" and (opts.messages or opts.tokens or opts.context) then
    local f = chat and chat.figures() or { tokens = 0, messages = 0 }
    local mark = f.estimated and "~" or ""
    if opts.messages then
      local n = f.messages or 0
      s = s .. string.format(" %d msg%s", n, n == 1 and "" or "s")
    end
    if opts.tokens then
      s = s .. " " .. mark .. short_tokens(f.tokens or 0) .. " tok"
    end
    if opts.context and type(f.size) == "number" and f.size > 0 and type(f.used) == "number" then
      s = s .. string.format(" %s%d%% ctx", mark, math.floor(f.used * 100 / f.size + 0.5))
    end
  end
  if state == "streaming" then
    s = s .. " …"
  end
  return s
end

--- What the chat session's next request would carry if the prompt
--- buffer's text were sent now: system prompt, rules files, tool
--- definitions, history and the prompt, each with its tokens (counted by
--- the provider where it can, else estimated), share of the context window
--- and input price. `cb(err, report)` runs on the main thread. `:Mia context`
--- shows it in a float.
--- @param cb fun(err: table?, report: table?)
--- @return mia.StreamHandle
function M.context(cb)
  require("mia.validate")({ cb = { cb, "function" } })
  return require("mia.context").fetch(cb)
end

--- The agent's modes in ACP's SessionModeState shape, as the agent the
--- chat talks to announced them (mia's own included).
--- @return { currentModeId: string, availableModes: { id: string, name: string, description: string }[] }
function M.modes()
  return require("mia.agents").modes() or { currentModeId = "", availableModes = {} }
end

--- Switches the agent's mode (one it offers: see |mia.modes()|); mia's own
--- agent takes it at the next request, also while an answer streams.
--- Fires `User MiaModeChanged` when the agent announces the switch.
--- @param id string
function M.set_mode(id)
  require("mia.chat").set_mode(id)
end

--- The agent's settings (ACP's SessionConfigOption list: `{ id, name,
--- type, currentValue, options }`); empty for mia's own agent.
--- @return table[]
function M.config_options()
  return require("mia.agents").config_options()
end

--- Sets the agent's setting `id` to `value` (`session/set_config_option`).
--- @param id string
--- @param value string
function M.set_config_option(id, value)
  require("mia.agents").set_config(id, value)
end

--- Sessions: list, load, rename, delete (see |mia.sessions|).
M.sessions = setmetatable({}, {
  __index = function(_, k)
    return require("mia.sessions")[k]
  end,
})

--- Registers a slash command; see |mia.register_command()|.
--- @param cmd mia.Command
function M.register_command(cmd)
  require("mia.slash").register(cmd)
end

--- A cost report as a table; see |mia.costs()|. With `cb`, returns at once
--- and calls `cb(err, report)` on the main thread.
--- @param query { scope: "session"|"daily"|"weekly"|"days", session_id?: string, model?: string, provider?: string, days?: integer }
--- @param cb? fun(err: table?, report: table?)
function M.costs(query, cb)
  if cb ~= nil then
    require("mia.validate")({ cb = { cb, "function" } })
    return require("mia.costs").fetch(query or { scope = "session" }, cb)
  end
  return require("mia.costs").get(query or { scope = "session" })
end

return M
