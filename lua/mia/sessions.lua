--- Sessions: every chat is stored and can be listed and resumed.
--- `mia.sessions.list` mirrors the Agent Client Protocol's session/list.

local M = {}

--- Starts a store job; `cb(err, result)` runs on the main thread when it ends.
local function start(fn_name, cb, ...)
  require("mia")._job(fn_name, cb, ...)
end

--- Runs a core job and waits at most `ms` for it (the synchronous Lua API);
--- `who` names what did not answer.
local function wait_job(ms, who, fn_name, ...)
  local result, failure
  start(fn_name, function(err, r)
    failure, result = err, r
  end, ...)
  vim.wait(ms, function()
    return result ~= nil or failure ~= nil
  end, 2)
  if failure then
    error(failure.message, 0)
  end
  if result == nil then
    error(string.format("mia: %s did not answer within %d s", who, ms / 1000), 0)
  end
  return result
end

--- Runs a store job and waits for it (the synchronous Lua API).
local function job(fn_name, ...)
  return wait_job(10000, "the store", fn_name, ...)
end

--- How long each external agent may take to list its sessions.
M.agent_timeout_ms = 5000

--- The query for the core's `agent_list_all`: every configured agent (the
--- core asks the running ones) and the chat's agent (started).
local function everywhere()
  local agents = require("mia.agents")
  local specs = {}
  for _, name in ipairs(agents.names()) do
    specs[#specs + 1] = agents.spec(name) -- fails with the configured names
  end
  return {
    cwd = vim.fn.getcwd(),
    agents = #specs > 0 and specs or nil,
    current = agents.current(),
    timeout_ms = M.agent_timeout_ms,
  }
end

--- mia's own sessions: `{ sessions = { { sessionId, cwd, title, updatedAt,
--- _meta = { messageCount, costUsd, ... } } }, nextCursor }`. With
--- `opts.agent`, that agent's sessions in its cwd (`session/list`, every
--- page, started if needed): `{ sessions = { { agent, sessionId, cwd,
--- title, updatedAt } } }`. With `cb`, returns at once and calls
--- `cb(err, result)`; without, waits for the answer.
--- @param opts? { cwd?: string, cursor?: string, limit?: integer, agent?: string }
--- @param cb? fun(err: table?, result: table?)
function M.list(opts, cb)
  opts = opts or {}
  require("mia.validate")({
    cwd = { opts.cwd, "string", true },
    cursor = { opts.cursor, "string", true },
    agent = { opts.agent, "string", true },
    cb = { cb, "function", true },
  })
  if opts.agent then
    local spec = require("mia.agents").spec(opts.agent) -- fails with the configured names
    local query = { timeout_ms = M.agent_timeout_ms }
    if cb then
      start("agent_list", cb, spec, query)
      return
    end
    -- Its start (up to a minute) comes before its 5 s to answer.
    return wait_job(65000, "the agent `" .. opts.agent .. "`", "agent_list", spec, query)
  end
  local query = { cwd = opts.cwd, cursor = opts.cursor, limit = opts.limit }
  if cb then
    start("agent_list", cb, nil, query)
    return
  end
  return job("agent_list", nil, query)
end

--- Reopens session `id` in the chat with its full history; the next prompt
--- continues it. With `opts.agent`, loads that agent's session instead
--- (`session/load`; the chat switches to the agent and draws the session as
--- it replays it; returns at once).
--- @param opts? { agent?: string, cwd?: string, title?: string }
function M.load(id, opts)
  require("mia.validate")({ id = { id, "string" }, opts = { opts, "table", true } })
  if opts and opts.agent then
    require("mia.agents").load(opts.agent, id, { cwd = opts.cwd, title = opts.title })
    return nil
  end
  local data = job("agent_load", nil, id)
  require("mia.chat").load(data)
  return data
end

function M.rename(id, title)
  job("session_rename", id, title)
end

function M.delete(id)
  job("session_delete", id)
end

local function age(iso)
  local y, mo, d, h, mi, s = iso:match("(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)")
  if not y then
    return ""
  end
  local t = os.time({ year = y, month = mo, day = d, hour = h, min = mi, sec = s }) + require("mia.costs").utc_offset()
  local secs = os.time() - t
  if secs < 3600 then
    return string.format("%dm ago", math.max(0, math.floor(secs / 60)))
  elseif secs < 86400 then
    return string.format("%dh ago", math.floor(secs / 3600))
  end
  return string.format("%dd ago", math.floor(secs / 86400))
end

--- The picker's entries, fetched in the background by the core: mia's
--- sessions of this directory and those of the external agents (the
--- running ones and the chat's), newest first, then mia's others;
--- `cb(err, entries, failed)` where `failed` lists `{ agent, reason }` of
--- agents that did not answer in time or failed.
function M.entries(cb)
  local ok, query = pcall(everywhere)
  if not ok then
    return cb({ message = tostring(query) })
  end
  start("agent_list_all", function(err, r)
    if err then
      return cb(err)
    end
    cb(nil, r.sessions, r.failed)
  end, query)
end

--- Picks a session with vim.ui.select (telescope/snacks/fzf-lua users get
--- theirs) and resumes it. The list is fetched without blocking the editor.
function M.pick()
  M.entries(function(err, entries, failed)
    if err then
      vim.notify("mia: cannot list sessions: " .. tostring(err.message), vim.log.levels.ERROR)
      return
    end
    if failed and #failed > 0 then
      local parts = {}
      for _, f in ipairs(failed) do
        parts[#parts + 1] = string.format("`%s` (%s)", f.agent, f.reason)
      end
      vim.notify(
        "mia: could not list the sessions of " .. table.concat(parts, ", ") .. "; the others are shown",
        vim.log.levels.WARN
      )
    end
    M.choose(entries)
  end)
end

--- One picker line: mia's own sessions with their messages and cost, an
--- agent's named by the agent.
function M.format(s)
  local where = s.cwd ~= vim.fn.getcwd() and ("  " .. vim.fn.fnamemodify(s.cwd, ":~")) or ""
  local title = type(s.title) == "string" and s.title or "(untitled)"
  local when = type(s.updatedAt) == "string" and age(s.updatedAt) or ""
  if s.agent then
    return string.format("%s · %s%s%s", s.agent, title, when ~= "" and (" · " .. when) or "", where)
  end
  return string.format(
    "%s · %s · %d messages · %s%s",
    title,
    when,
    s._meta.messageCount,
    require("mia.costs").usd(s._meta.costUsd),
    where
  )
end

--- Shows `entries` in vim.ui.select and resumes the chosen one (an agent's
--- through `session/load`).
function M.choose(entries)
  if #entries == 0 then
    vim.notify("mia: no sessions yet")
    return
  end
  vim.ui.select(entries, {
    prompt = "mia sessions",
    kind = "mia_session",
    format_item = M.format,
  }, function(choice)
    if not choice then
      return
    end
    if choice.agent then
      M.load(choice.sessionId, { agent = choice.agent, cwd = choice.cwd, title = choice.title })
    else
      M.load(choice.sessionId)
    end
  end)
end

return M
