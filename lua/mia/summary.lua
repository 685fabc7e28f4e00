--- The summary of a chat session that ends (|mia-session-summary|): what it
--- cost, its tokens by class, its requests and the top cost suggestion.
--- Shown once when the session ends in the editor (`:Mia new`, picking
--- another session); when Neovim exits it goes to the log and is shown as a
--- notice at the next start.

local M = {}

--- The file that carries an exit's summary to the next start.
function M.pending_file()
  return require("mia.config").data_dir() .. "/exit-summary.txt"
end

--- The summary of a session's cost report as fields, or nil when the
--- session made no request.
--- @param report table a `scope = "session"` report (|mia.costs()|)
--- @param title? string
--- @return table?
function M.of(report, title)
  local t = report and report.totals or {}
  if (t.requests or 0) == 0 then
    return nil
  end
  local top = report.suggestions and report.suggestions[1]
  local agents = {}
  for _, am in ipairs(report.agent_models or {}) do
    agents[#agents + 1] = string.format("%s (%s)", am.agent, am.model)
  end
  return {
    title = title,
    -- wall-clock: from the first request to the end of the last
    duration_ms = (t.first_at_ms and t.last_at_ms) and math.max(0, t.last_at_ms - t.first_at_ms) or nil,
    agents = agents,
    cost_usd = t.cost_usd,
    unknown_cost_requests = t.unknown_cost_requests or 0,
    requests = t.requests,
    tokens = {
      input = t.input_tokens or 0,
      output = t.output_tokens or 0,
      cache_read = t.cache_read_tokens or 0,
      cache_write = t.cache_write_tokens or 0,
      reasoning = t.reasoning_tokens or 0,
    },
    suggestion = top and {
      kind = top.kind,
      text = top.text,
      current_model = top.current_model,
      suggested_model = top.suggested_model ~= vim.NIL and top.suggested_model or nil,
      savings_usd = top.savings_usd,
      savings_percent = top.savings_percent,
    } or nil,
  }
end

--- The summary as the notice shows it.
--- @param s table from |M.of()|
--- @return string
function M.text(s)
  local costs = require("mia.costs")
  local cost = costs.usd(s.cost_usd)
  if s.unknown_cost_requests > 0 then
    cost = cost .. string.format(" + %d without a price", s.unknown_cost_requests)
  end
  local k = s.tokens
  local tokens = string.format(
    "%s input · %s output · %s cache read · %s cache write",
    costs.int(k.input),
    costs.int(k.output),
    costs.int(k.cache_read),
    costs.int(k.cache_write)
  )
  if k.reasoning > 0 then
    tokens = tokens .. " · " .. costs.int(k.reasoning) .. " reasoning"
  end
  local name = s.title and string.format(" “%s”", s.title) or ""
  local lines = {
    string.format("mia: session%s ended: %s · %d request%s", name, cost, s.requests, s.requests == 1 and "" or "s"),
    "  tokens: " .. tokens,
  }
  if s.duration_ms then
    lines[#lines + 1] = "  duration: " .. M.duration(s.duration_ms)
  end
  if s.agents and #s.agents > 0 then
    lines[#lines + 1] = "  agents: " .. table.concat(s.agents, ", ")
  end
  if s.suggestion then
    lines[#lines + 1] = "  tip: " .. s.suggestion.text
  end
  return table.concat(lines, "\n")
end

--- A wall-clock duration: "42 s", "3 min 5 s", "2 h 7 min".
--- @param ms number
--- @return string
function M.duration(ms)
  local s = math.floor(ms / 1000 + 0.5)
  if s < 60 then
    return s .. " s"
  elseif s < 3600 then
    return string.format("%d min %d s", math.floor(s / 60), s % 60)
  end
  return string.format("%d h %d min", math.floor(s / 3600), math.floor(s % 3600 / 60))
end

--- Shows the summary of session `id` once it is read (asynchronously);
--- nothing for a session without requests.
--- @param id string
--- @param title? string
function M.show(id, title)
  pcall(require("mia.costs").fetch, { scope = "session", session_id = id }, function(err, report)
    local s = not err and M.of(report, title) or nil
    if s then
      vim.notify(M.text(s), vim.log.levels.INFO)
    end
  end)
end

--- Leaving Neovim: the last known summary goes to the log and to the next start.
--- @param s table from |M.of()|
function M.at_exit(s)
  local core = require("mia.core").get()
  if core then
    pcall(core.exit_note, M.pending_file(), M.text(s))
  end
end

--- Shows the summary an exit left, once (the first instance to start takes
--- it). Never blocks: every file step is asynchronous.
function M.show_pending()
  local uv = vim.uv or vim.loop
  local file = M.pending_file()
  local taken = file .. ".shown" .. uv.os_getpid()
  uv.fs_rename(file, taken, function(rename_err)
    if rename_err then
      return -- none pending (or another instance took it)
    end
    uv.fs_open(taken, "r", 384, function(open_err, fd)
      if open_err or not fd then
        return
      end
      -- The note is bounded by the core (8 KiB).
      uv.fs_read(fd, 8192, 0, function(_, data)
        uv.fs_close(fd)
        uv.fs_unlink(taken)
        if data and data ~= "" then
          vim.schedule(function()
            vim.notify(data:gsub("^mia: session", "mia: last time, session", 1), vim.log.levels.INFO)
          end)
        end
      end)
    end)
  end)
end

return M
