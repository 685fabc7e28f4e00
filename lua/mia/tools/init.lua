--- Tools written in Lua: registration, and running them when the model
--- calls them. A tool runs on the main thread inside a coroutine, so it may
--- wait (ctx.ask, an LSP request) without freezing the editor; it completes
--- by returning a value or by calling ctx.done(value) later.

local M = {}

local api = vim.api

--- @class mia.ToolSpec
--- @field name string
--- @field description string
--- @field parameters? table JSON Schema of the arguments (an object schema)
--- @field effect? "read"|"write"|"execute" What running it may do (default "read"); decides permissions
--- @field timeout_ms? integer How long it may take (default 60000)
--- @field subject? string|{ path?: string, command?: string, text?: string }|fun(args: table): (string|table|nil) What the tool acts on, for permission rules: the name of its path argument ("path"), a table naming the argument that holds a path, a shell command or other text, or a function returning a path or such a table
--- @field outside? "refuse"|"ask" A path outside the project that no rule allows is refused (default) or asked
--- @field execute? fun(args: table, ctx: mia.ToolContext): any
--- @field edit? fun(args: table, ctx: mia.ToolContext): { content: string, message?: string } Declares an edit instead of `execute`: returns the whole new content of the subject's file (and what the model is told when it lands); mia shows the diff for review, keeps a checkpoint and writes it. Needs a path `subject`

--- @class mia.ToolContext
--- @field session_id string
--- @field message_id string
--- @field call_id string
--- @field agent { name: string, mode: string }
--- @field root string The project root
--- @field subject? { path: string, relative: string, inside: boolean } The call's path subject, canonical (absolute path with links resolved, and relative to the root), for tools that declare a path subject
--- @field aborted fun(): boolean True once the user stopped the answer
--- @field on_abort fun(fn: fun()) Runs fn when the user stops the answer
--- @field ask fun(question: string, opts?: { choices?: string[], default?: string, timeout?: integer, allow_freeform?: boolean }): string?
--- @field metadata fun(tbl: table) Shown in the chat with the call (e.g. { summary = "…" })
--- @field done fun(value: any) Completes the call (for tools that finish later)
--- @field conversation fun(): table[] A copy of the conversation so far (internal message format)

--- @type table<string, { spec: mia.ToolSpec, source: string }>
local registered = {}
--- name -> source -> spec: every Lua tool registered under a name, also
--- the ones a later source hides (they come back when it goes)
local layers = {}
--- registrations not yet sent to the core (it loads on first use)
local unsent = {}
--- @type table<integer, table> running calls by call id
local running = {}

--- Where tools come from, weakest first, as the core orders them
--- (`tool_precedence` of `mia_core.shared()`): source -> rank.
local function ranks()
  local out = {}
  for i, source in ipairs(require("mia.settings").shared().tool_precedence) do
    out[source] = i
  end
  return out
end

--- The subject declaration as the core takes it.
local function subject_meta(subject)
  if type(subject) == "string" then
    return { path = subject }
  elseif type(subject) == "function" then
    return { dynamic = true }
  end
  return subject
end

local function meta(spec)
  return {
    name = spec.name,
    description = spec.description,
    parameters = spec.parameters or { type = "object", properties = vim.empty_dict() },
    effect = spec.effect or (spec.edit and "write" or "read"),
    edits = spec.edit ~= nil,
    timeout_ms = spec.timeout_ms,
    subject = subject_meta(spec.subject),
    outside = spec.outside,
  }
end

--- Checks `spec.subject` and `spec.outside`; raises naming the field.
local function validate_subject(spec)
  local s = spec.subject
  local where = "mia.register_tool(" .. spec.name .. "): `subject`"
  if type(s) == "table" then
    local n = 0
    for k, v in pairs(s) do
      if k ~= "path" and k ~= "command" and k ~= "text" then
        error(string.format("%s has an unknown key `%s`; use path, command or text", where, tostring(k)), 3)
      end
      if type(v) ~= "string" then
        error(string.format("%s.%s must name an argument (a string)", where, k), 3)
      end
      n = n + 1
    end
    if n ~= 1 then
      error(where .. " must name exactly one of path, command or text", 3)
    end
  elseif s ~= nil and type(s) ~= "string" and type(s) ~= "function" then
    error(where .. " must be an argument name, a table { path|command|text = name } or a function", 3)
  end
  if spec.outside ~= nil and spec.outside ~= "refuse" and spec.outside ~= "ask" then
    error(string.format('mia.register_tool(%s): `outside` must be "refuse" or "ask" (got %s)', spec.name, vim.inspect(spec.outside)), 3)
  end
end

local function send(spec, source)
  local loader = require("mia.core")
  local core = loader.get()
  loader.call(core.register_tool, meta(spec), source)
end

--- Registers a Lua tool. `source` is "user" (default), "plugin", "project" or "builtin".
--- @param spec mia.ToolSpec
--- @param source? string
function M.register(spec, source)
  source = source or "user"
  require("mia.validate")({
    spec = { spec, "table" },
    ["spec.name"] = { spec.name, "string" },
    ["spec.description"] = { spec.description, "string" },
    ["spec.execute"] = { spec.execute, "function", true },
    ["spec.edit"] = { spec.edit, "function", true },
    ["spec.parameters"] = { spec.parameters, "table", true },
  })
  if (spec.execute == nil) == (spec.edit == nil) then
    error(string.format("mia.register_tool(%s): give exactly one of `execute` (a tool) or `edit` (a tool that proposes an edit)", spec.name), 2)
  end
  if spec.edit and not (type(spec.subject) == "string" or (type(spec.subject) == "table" and spec.subject.path)) then
    error(string.format("mia.register_tool(%s): a tool with `edit` needs a path `subject` (the argument naming the file it edits)", spec.name), 2)
  end
  if spec.edit and spec.effect ~= nil and spec.effect ~= "write" then
    error(string.format('mia.register_tool(%s): a tool with `edit` has effect "write"', spec.name), 2)
  end
  if not spec.name:match("^[%w_%-]+$") then
    error(string.format("mia.register_tool: `name` may hold only letters, digits, _ and - (got %q)", spec.name), 2)
  end
  if spec.effect ~= nil and not ({ read = true, write = true, execute = true })[spec.effect] then
    error(string.format('mia.register_tool: `effect` must be "read", "write" or "execute" (got %s)', vim.inspect(spec.effect)), 2)
  end
  validate_subject(spec)
  if type(source) ~= "string" then
    error("mia.register_tool: unknown source " .. vim.inspect(source), 2)
  end
  local existing = registered[spec.name]
  -- Which source wins is the core's rule. It is read when the core is
  -- loaded anyway, or when two sources register one name (the only case
  -- that needs it, which then loads the library); otherwise the core checks
  -- the source when the registration reaches it.
  local hidden = false
  if require("mia.core").is_loaded() or (existing and existing.source ~= source) then
    local rank = ranks()
    if not rank[source] then
      local known = require("mia.settings").shared().tool_precedence
      error(string.format("mia.register_tool: unknown source %s (sources: %s)", vim.inspect(source), table.concat(known, ", ")), 2)
    end
    hidden = existing ~= nil and rank[existing.source] > rank[source]
  end
  layers[spec.name] = layers[spec.name] or {}
  layers[spec.name][source] = spec
  if not hidden then
    registered[spec.name] = { spec = spec, source = source }
  end
  -- The core keeps a hidden tool beneath the one in front, as here.
  if require("mia.core").is_loaded() and require("mia")._started then
    send(spec, source)
  else
    unsent[#unsent + 1] = { spec = spec, source = source }
  end
  api.nvim_exec_autocmds("User", { pattern = "MiaToolRegistered", data = { name = spec.name, source = source } })
  return not hidden
end

--- Sends registrations made before the core was loaded.
function M.flush()
  local pending = unsent
  unsent = {}
  for _, r in ipairs(pending) do
    local ok, err = pcall(send, r.spec, r.source)
    if not ok then
      vim.notify(tostring(err), vim.log.levels.ERROR)
    end
  end
end

--- Forgets the tool `name` registered from `source`; the latest one it
--- hid comes back. Fires `MiaToolDeregistered` when there was one.
--- @return boolean whether a tool was unregistered
function M.unregister(name, source)
  local layer = layers[name]
  if not (layer and layer[source]) then
    return false
  end
  layer[source] = nil
  for i = #unsent, 1, -1 do
    if unsent[i].spec.name == name and unsent[i].source == source then
      table.remove(unsent, i)
    end
  end
  if registered[name] and registered[name].source == source then
    registered[name] = nil
    local best
    if next(layer) then
      local rank = ranks()
      for s, spec in pairs(layer) do
        if not best or rank[s] > rank[best.source] then
          best = { spec = spec, source = s }
        end
      end
    end
    registered[name] = best
  end
  if not next(layer) then
    layers[name] = nil
  end
  if require("mia.core").is_loaded() and require("mia")._started then
    local loader = require("mia.core")
    loader.call(loader.get().unregister_tool, name, source)
  end
  api.nvim_exec_autocmds("User", { pattern = "MiaToolDeregistered", data = { name = name, source = source } })
  return true
end

local function reply(call, ok, value)
  local loader = require("mia.core")
  pcall(loader.get().reply, call, ok, value)
end

--- What the model sees: strings as they are, anything else as JSON.
local function output_of(value, metadata)
  local content
  if type(value) == "string" then
    content = value
  elseif value == nil then
    content = ""
  else
    local ok, json = pcall(vim.json.encode, value)
    content = ok and json or vim.inspect(value)
  end
  return { content = content, metadata = metadata }
end

--- Runs call `call` (from the core) of Lua tool `data.name`.
function M.run(call, data)
  local entry = registered[data.name]
  if not entry then
    reply(call, false, "no Lua tool named `" .. tostring(data.name) .. "` is registered")
    return
  end
  local state = { finished = false, aborted = false, abort_handlers = {}, metadata = nil }
  running[call] = state
  local function finish(ok, value)
    if state.finished then
      return
    end
    state.finished = true
    running[call] = nil
    if ok and entry.spec.edit then
      -- A proposal: the core reviews, checkpoints and writes it.
      if type(value) ~= "table" or type(value.content) ~= "string" then
        reply(call, false, "its edit function must return { content = <the whole new text> }, got " .. vim.inspect(value):sub(1, 80))
      else
        reply(call, true, { proposal = { content = value.content, message = type(value.message) == "string" and value.message or nil } })
      end
    elseif ok then
      reply(call, true, output_of(value, state.metadata))
    else
      reply(call, false, tostring(value))
    end
  end
  local co
  local function step(...)
    local ok, result = coroutine.resume(co, ...)
    if not ok then
      finish(false, result)
    elseif coroutine.status(co) == "dead" and result ~= nil then
      finish(true, result)
    end
  end
  local ctx = vim.tbl_extend("force", {}, data.ctx or {})
  ctx.aborted = function()
    return state.aborted
  end
  ctx.on_abort = function(fn)
    table.insert(state.abort_handlers, fn)
  end
  ctx.metadata = function(tbl)
    state.metadata = tbl
  end
  ctx.done = function(value)
    finish(true, value)
  end
  ctx.conversation = function()
    -- The core owns the conversation: fetched off the main thread, the tool waits for it.
    local me = coroutine.running()
    if me ~= co then
      error("ctx.conversation must be called from the tool's own execute function", 2)
    end
    require("mia")._job("agent_messages", function(err, messages)
      vim.schedule(function()
        if not state.finished and coroutine.status(co) == "suspended" then
          step((err or type(messages) ~= "table") and {} or messages)
        end
      end)
    end, (data.ctx or {}).session_id or "")
    return coroutine.yield()
  end
  ctx.ask = function(question, opts)
    opts = opts or {}
    local me = coroutine.running()
    if me ~= co then
      error("ctx.ask must be called from the tool's own execute function", 2)
    end
    require("mia.permission").ask_user(question, opts, function(choice)
      vim.schedule(function()
        if not state.finished and coroutine.status(co) == "suspended" then
          step(choice)
        end
      end)
    end)
    return coroutine.yield()
  end
  co = coroutine.create(function()
    return (entry.spec.edit or entry.spec.execute)(data.arguments or {}, ctx)
  end)
  step()
end

--- Computes the subject of a call of Lua tool `data.name` whose `subject`
--- is a function, and answers the core.
function M.subject(call, data)
  local entry = registered[data.name]
  if not entry or type(entry.spec.subject) ~= "function" then
    reply(call, false, "no Lua tool named `" .. tostring(data.name) .. "` with a subject function")
    return
  end
  local ok, value = pcall(entry.spec.subject, data.arguments or {})
  if ok then
    reply(call, true, value == nil and vim.NIL or value)
  else
    reply(call, false, tostring(value))
  end
end

--- The core stopped waiting for `call` (cancelled or timed out).
function M.abort(call)
  local state = running[call]
  if not state then
    return
  end
  state.aborted = true
  state.finished = true
  running[call] = nil
  for _, fn in ipairs(state.abort_handlers) do
    pcall(fn)
  end
end

--- Names of the Lua tools registered so far (any source).
--- @return string[]
function M.registered_names()
  return vim.tbl_keys(registered)
end

--- Every registered tool (Rust and Lua) grouped by source, as the core knows them.
function M.list()
  local loader = require("mia.core")
  require("mia")._core()
  return loader.call(loader.get().tools)
end

return M
