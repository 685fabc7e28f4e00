--- ACP's `terminal/*` for external agents: each terminal an agent creates
--- is a Neovim terminal buffer the user can watch (shown under the chat),
--- its output kept for the agent up to `outputByteLimit` (cut from the
--- start). Every request is answered through the core's call reply; waiting
--- for an exit never blocks: the answer goes out when the job exits.

local M = {}

local api = vim.api

--- @class mia.AgentTerminal
--- @field buf integer
--- @field job integer
--- @field output string what the agent gets (already cut to the limit)
--- @field limit integer?
--- @field truncated boolean
--- @field exit { exitCode: integer?, signal: string? }?
--- @field waiters integer[] calls waiting for the exit
--- @field killed boolean

--- @type table<string, mia.AgentTerminal>
local terms = {}
local next_id = 0

local function reply(call, ok, value)
  pcall(require("mia.core").get().reply, call, ok, value)
end

--- Cuts `s` to its last `limit` bytes, starting on a character boundary.
local function keep_tail(s, limit)
  if #s <= limit then
    return s, false
  end
  local start = #s - limit + 1
  while start <= #s do
    local b = s:byte(start)
    if b < 0x80 or b >= 0xC0 then
      break
    end
    start = start + 1
  end
  return s:sub(start), true
end

local function append(t, data)
  local text = table.concat(data, "\n"):gsub("\r\n", "\n")
  if text == "" then
    return
  end
  t.output = t.output .. text
  if t.limit then
    local cut
    t.output, cut = keep_tail(t.output, t.limit)
    t.truncated = t.truncated or cut
  end
end

local function exit_status(t)
  return { exitCode = t.exit.exitCode, signal = t.exit.signal }
end

--- Shows terminal buffer `buf` under the chat window (without taking focus).
local function show(buf)
  local chat = package.loaded["mia.chat.window"] and require("mia.chat.window").existing()
  for _, w in ipairs(api.nvim_tabpage_list_wins(0)) do
    if chat and api.nvim_win_get_buf(w) == chat then
      pcall(api.nvim_open_win, buf, false, { split = "below", win = w, height = 8 })
      return
    end
  end
end

local function create(call, data)
  local command = type(data.command) == "string" and data.command or nil
  if not command or command == "" then
    reply(call, false, "terminal/create: no command")
    return
  end
  local argv = { command }
  for _, a in ipairs(type(data.args) == "table" and data.args or {}) do
    argv[#argv + 1] = tostring(a)
  end
  local env = {}
  for _, e in ipairs(type(data.env) == "table" and data.env or {}) do
    if type(e) == "table" and type(e.name) == "string" then
      env[e.name] = tostring(e.value or "")
    end
  end
  -- Variables mia reads provider keys from are not inherited (`_meta.mia.hide_env`):
  -- the environment is given whole, without them, unless the request sets one.
  local meta = type(data._meta) == "table" and type(data._meta.mia) == "table" and data._meta.mia or {}
  local clear_env = false
  if type(meta.hide_env) == "table" and #meta.hide_env > 0 then
    local whole = vim.fn.environ()
    for _, name in ipairs(meta.hide_env) do
      if type(name) == "string" then
        whole[name] = nil
      end
    end
    env = vim.tbl_extend("force", whole, env)
    clear_env = true
  end
  next_id = next_id + 1
  local id = "term-" .. next_id
  local buf = api.nvim_create_buf(true, false)
  --- @type mia.AgentTerminal
  local t = {
    buf = buf,
    job = 0,
    output = "",
    limit = type(data.outputByteLimit) == "number" and math.max(0, math.floor(data.outputByteLimit)) or nil,
    truncated = false,
    exit = nil,
    waiters = {},
    killed = false,
  }
  local ok, job = pcall(api.nvim_buf_call, buf, function()
    return vim.fn.jobstart(argv, {
      term = true,
      cwd = type(data.cwd) == "string" and data.cwd or nil,
      env = next(env) and env or nil,
      clear_env = clear_env,
      on_stdout = function(_, lines)
        append(t, lines)
      end,
      on_exit = function(_, code)
        t.exit = t.killed and { signal = "SIGTERM" } or { exitCode = code }
        local waiters = t.waiters
        t.waiters = {}
        for _, w in ipairs(waiters) do
          reply(w, true, exit_status(t))
        end
      end,
    })
  end)
  if not ok or type(job) ~= "number" or job <= 0 then
    pcall(api.nvim_buf_delete, buf, { force = true })
    reply(call, false, string.format("terminal/create: cannot run `%s`: %s", command, ok and tostring(job) or job))
    return
  end
  t.job = job
  local agent = type(data._meta) == "table" and type(data._meta.mia) == "table" and data._meta.mia.agent or "agent"
  pcall(api.nvim_buf_set_name, buf, string.format("mia://terminal/%s/%s %s", agent, id, table.concat(argv, " ")))
  terms[id] = t
  show(buf)
  reply(call, true, { terminalId = id })
end

--- Answers one `terminal/*` call of an external agent.
--- @param call integer
--- @param kind string the ACP method
--- @param data table its params
function M.handle(call, kind, data)
  if kind == "terminal/create" then
    create(call, data)
    return
  end
  local t = terms[data.terminalId]
  if not t then
    reply(call, false, string.format("%s: no terminal `%s`", kind, tostring(data.terminalId)))
    return
  end
  if kind == "terminal/output" then
    reply(call, true, { output = t.output, truncated = t.truncated, exitStatus = t.exit and exit_status(t) or nil })
  elseif kind == "terminal/wait_for_exit" then
    if t.exit then
      reply(call, true, exit_status(t))
    else
      t.waiters[#t.waiters + 1] = call
    end
  elseif kind == "terminal/kill" then
    if not t.exit then
      t.killed = true
      pcall(vim.fn.jobstop, t.job)
    end
    reply(call, true, vim.empty_dict())
  elseif kind == "terminal/release" then
    if not t.exit then
      t.killed = true
      pcall(vim.fn.jobstop, t.job)
    end
    terms[data.terminalId] = nil -- the buffer stays for the user to read
    reply(call, true, vim.empty_dict())
  else
    reply(call, false, "mia does not know " .. kind)
  end
end

--- The terminals agents hold now: id -> buffer (for tests and statuslines).
function M.list()
  local out = {}
  for id, t in pairs(terms) do
    out[id] = t.buf
  end
  return out
end

return M
