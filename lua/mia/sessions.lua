--- Sessions: every chat is stored and can be listed and resumed.
--- `mia.sessions.list` mirrors the Agent Client Protocol's session/list.

local M = {}

--- Starts a store job; `cb(err, result)` runs on the main thread when it ends.
local function start(fn_name, cb, ...)
  require("mia")._job(fn_name, cb, ...)
end

--- Runs a store job and waits for it (the synchronous Lua API).
local function job(fn_name, ...)
  local result, failure
  start(fn_name, function(err, r)
    failure, result = err, r
  end, ...)
  vim.wait(10000, function()
    return result ~= nil or failure ~= nil
  end, 2)
  if failure then
    error(failure.message, 0)
  end
  if result == nil then
    error("mia: the store did not answer within 10 s", 0)
  end
  return result
end

--- `{ sessions = { { sessionId, cwd, title, updatedAt, _meta = { messageCount, costUsd, ... } } }, nextCursor }`.
--- @param opts? { cwd?: string, cursor?: string, limit?: integer }
function M.list(opts)
  opts = opts or {}
  vim.validate({ cwd = { opts.cwd, "string", true }, cursor = { opts.cursor, "string", true } })
  return job("sessions_list", { cwd = opts.cwd, cursor = opts.cursor, limit = opts.limit })
end

--- Reopens session `id` in the chat with its full history; the next prompt continues it.
function M.load(id)
  vim.validate({ id = { id, "string" } })
  local data = job("session_open", id)
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

--- The picker's entries, fetched in the background: this directory's
--- sessions first, then the others, newest first within each; `cb(err, entries)`.
function M.entries(cb)
  local cwd = vim.fn.getcwd()
  start("sessions_list", function(err, here)
    if err then
      return cb(err)
    end
    start("sessions_list", function(err2, everywhere)
      if err2 then
        return cb(err2)
      end
      local seen = {}
      local all = {}
      for _, s in ipairs(here.sessions) do
        seen[s.sessionId] = true
        all[#all + 1] = s
      end
      for _, s in ipairs(everywhere.sessions) do
        if not seen[s.sessionId] then
          all[#all + 1] = s
        end
      end
      cb(nil, all)
    end, { limit = 200 })
  end, { cwd = cwd, limit = 200 })
end

--- Picks a session with vim.ui.select (telescope/snacks/fzf-lua users get
--- theirs) and resumes it. The list is fetched without blocking the editor.
function M.pick()
  M.entries(function(err, entries)
    if err then
      vim.notify("mia: cannot list sessions: " .. tostring(err.message), vim.log.levels.ERROR)
      return
    end
    M.choose(entries)
  end)
end

--- Shows `entries` in vim.ui.select and resumes the chosen one.
function M.choose(entries)
  if #entries == 0 then
    vim.notify("mia: no sessions yet")
    return
  end
  local costs = require("mia.costs")
  vim.ui.select(entries, {
    prompt = "mia sessions",
    kind = "mia_session",
    format_item = function(s)
      return string.format(
        "%s · %s · %d messages · %s%s",
        s.title or "(untitled)",
        age(s.updatedAt),
        s._meta.messageCount,
        costs.usd(s._meta.costUsd),
        s.cwd ~= vim.fn.getcwd() and ("  " .. vim.fn.fnamemodify(s.cwd, ":~")) or ""
      )
    end,
  }, function(choice)
    if choice then
      M.load(choice.sessionId)
    end
  end)
end

return M
