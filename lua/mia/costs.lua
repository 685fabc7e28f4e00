--- Cost reports: `mia.costs(query)`, `:Mia costs {scope}` and the
--- `:MiaCosts` floating window. The numbers come from the store (one usage
--- row per provider call); this module only formats them.

local M = {}

local api = vim.api

api.nvim_set_hl(0, "MiaCostTitle", { default = true, link = "Title" })
api.nvim_set_hl(0, "MiaCostBar", { default = true, link = "Special" })
api.nvim_set_hl(0, "MiaCostBarToday", { default = true, link = "WarningMsg" })
api.nvim_set_hl(0, "MiaCostAxis", { default = true, link = "Comment" })
api.nvim_set_hl(0, "MiaCost", { default = true, link = "Comment" })

--- The offset of local time from UTC, in seconds (for calendar days).
function M.utc_offset()
  local now = os.time()
  local here = os.date("*t", now)
  local utc = os.date("!*t", now)
  here.isdst = false
  return os.difftime(os.time(here), os.time(utc))
end

--- The core's formatters (crates/cost/src/format.rs), or nil while it is not loaded.
local function formatters()
  local loader = package.loaded["mia.core"]
  if loader and loader.is_loaded() then
    return require("mia.settings").shared()
  end
  return nil
end

--- A dollar amount as the core writes it ("$0.031", "$1.47", "$0.50";
--- nil is "cost unknown"). Never loads the native library for the statusline:
--- before it is loaded no amount but 0 exists, and 0 is "$0.00".
function M.usd(v)
  local f = formatters()
  if not f and v == 0 then
    return "$0.00"
  end
  return (f or require("mia.settings").shared()).format_usd(v)
end

--- A token count as the core writes it: "1,247".
function M.int(n)
  return require("mia.settings").shared().format_tokens(n or 0)
end

local function pct(p)
  return string.format("%5.1f%%", p or 0)
end

--- Scopes in the order <Tab> cycles them.
M.scopes = { "session", "daily", "weekly", "models" }
local TITLES = { session = "this session", daily = "today", weekly = "this week", models = "by model (30 days)" }

--- Runs `query` in the core; `cb(err, report)` on the main thread.
function M.fetch(query, cb)
  local mia = require("mia")
  local q = vim.tbl_extend("force", { utc_offset_s = M.utc_offset() }, query)
  q.session_id = q.session_id or require("mia.chat").session_id()
  if q.scope == "session" and not q.system_tokens then
    -- What :Mia prompt sends every time: the system prompt here, the tool
    -- list added by the core (its schemas are not converted to Lua for this).
    q.system_chars = #(require("mia.config").get().system or "")
  end
  return mia._job("costs", cb, q)
end

--- Runs `query` and waits for it (at most 5 s): `mia.costs()` without a
--- callback, as documented. Commands use `fetch`, which never waits.
function M.get(query)
  local result, failure
  M.fetch(query, function(err, r)
    failure, result = err, r
  end)
  vim.wait(5000, function()
    return result ~= nil or failure ~= nil
  end, 5)
  if failure then
    error("mia: cost report failed: " .. tostring(failure.message), 0)
  end
  if not result then
    error("mia: the cost report did not arrive within 5 s", 0)
  end
  return result
end

local function breakdown(lines, title, rows)
  if not rows or #rows == 0 then
    return
  end
  lines[#lines + 1] = ""
  lines[#lines + 1] = title
  for _, r in ipairs(rows) do
    lines[#lines + 1] = string.format(
      "  %-28s %10s %s  %5d req  %10s in  %9s out",
      r.key ~= "" and r.key or "(none)",
      M.usd(r.cost_usd),
      pct(r.percent),
      r.requests,
      M.int(r.input_tokens),
      M.int(r.output_tokens)
    )
  end
end

--- The report as lines (what `:Mia costs` prints and the window shows).
function M.lines(report)
  local t = report.totals
  local title = report.title or ""
  if type(report.date) == "string" then
    title = string.format("%s (%s%s)", title, report.scope == "daily" and "" or "from ", report.date)
  end
  local lines = {
    string.format(
      "Cost %s: %s%s",
      title,
      M.usd(t.cost_usd),
      (t.unknown_cost_requests or 0) > 0
          and string.format(
            "  (+ %d requests to models without a price, not counted: %s in · %s out tokens)",
            t.unknown_cost_requests,
            M.int(t.unknown_cost_input_tokens),
            M.int(t.unknown_cost_output_tokens)
          )
        or ""
    ),
    string.format(
      "Tokens: %s in · %s out · %s cache read · %s cache write · %s reasoning",
      M.int(t.input_tokens),
      M.int(t.output_tokens),
      M.int(t.cache_read_tokens),
      M.int(t.cache_write_tokens),
      M.int(t.reasoning_tokens)
    ),
    string.format("Requests: %d · messages: %d · sessions: %d · model time: %.1f s", t.requests, t.messages, t.sessions, (t.duration_ms or 0) / 1000),
  }
  if report.scope ~= "session" and type(report.sessions_by_model) == "table" and #report.sessions_by_model > 0 then
    local per = {}
    for _, m in ipairs(report.sessions_by_model) do
      per[#per + 1] = string.format("%s %d", m.model, m.sessions)
    end
    lines[#lines + 1] = "Sessions by model: " .. table.concat(per, " · ")
  end
  if (report.gateway_requests or 0) > 0 then
    -- |mia-gateway-cost|: the gateway's own figures, already in the totals
    lines[#lines + 1] = string.format(
      "Priced by the gateway: %d of %d requests, %s",
      report.gateway_requests,
      t.requests,
      M.usd(report.gateway_usd)
    )
  end
  local c = report.by_cost_type
  if c then
    lines[#lines + 1] = ""
    lines[#lines + 1] = "By cost type"
    for _, k in ipairs({ "input", "output", "cache_read", "cache_write" }) do
      lines[#lines + 1] = string.format("  %-12s %10s %s", k:gsub("_", " "), M.usd(c[k .. "_usd"]), pct(c[k .. "_percent"]))
    end
  end
  breakdown(lines, "By model", report.by_model)
  breakdown(lines, "By provider", report.by_provider)
  breakdown(lines, "By agent", report.by_agent)
  if report.suggestions and #report.suggestions > 0 then
    lines[#lines + 1] = ""
    lines[#lines + 1] = "Suggestions"
    for _, s in ipairs(report.suggestions) do
      lines[#lines + 1] = "  • " .. s.text
    end
  end
  return lines
end

local BLOCKS = { "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█" }

--- A bar chart of `days` ({ day, cost_usd }) as lines, `height` rows high;
--- each day is two columns wide.
function M.chart(days, height)
  local max = 0
  for _, d in ipairs(days) do
    max = math.max(max, d.cost_usd)
  end
  local lines = {}
  local label_w = 9
  for row = height, 1, -1 do
    local cells = {}
    for _, d in ipairs(days) do
      local eighths = max > 0 and math.floor(d.cost_usd / max * height * 8 + 0.5) or 0
      local here = eighths - (row - 1) * 8
      local ch = here >= 8 and "█" or (here > 0 and BLOCKS[here] or " ")
      cells[#cells + 1] = ch .. ch
    end
    local label = row == height and M.usd(max) or (row == 1 and "$0" or "")
    lines[#lines + 1] = string.format("%" .. label_w .. "s ┤", label) .. table.concat(cells, "")
  end
  local axis = string.rep(" ", label_w) .. " └" .. string.rep("─", #days * 2)
  lines[#lines + 1] = axis
  if #days > 0 then
    local first, last = days[1].day:sub(6), days[#days].day:sub(6)
    lines[#lines + 1] = string.rep(" ", label_w + 2) .. first .. string.rep(" ", math.max(1, #days * 2 - #first - #last)) .. last
  end
  return lines
end

local win_state = nil

local function show(buf, win, scope, ok, report)
  if not (api.nvim_buf_is_valid(buf) and api.nvim_win_is_valid(win)) then
    return
  end
  local lines
  if not ok then
    lines = { tostring(report) }
  else
    report.title = TITLES[scope]
    lines = M.lines(report)
    if scope == "models" then
      -- the model breakdown first, then the chart
      lines = { string.format("Cost by model over the last 30 days: %s", M.usd(report.totals.cost_usd)) }
      breakdown(lines, "By model", report.by_model)
    end
  end
  local daily = ok and report.daily or {}
  local chart_top = #lines + 2
  lines[#lines + 1] = ""
  lines[#lines + 1] = "Daily cost, last 30 days"
  local chart = M.chart(daily, 8)
  vim.list_extend(lines, chart)
  lines[#lines + 1] = ""
  lines[#lines + 1] = "<Tab> next view · q close"
  vim.bo[buf].modifiable = true
  api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  local ns = api.nvim_create_namespace("mia_costs")
  api.nvim_buf_clear_namespace(buf, ns, 0, -1)
  api.nvim_buf_set_extmark(buf, ns, 0, 0, { end_row = 0, end_col = #lines[1], hl_group = "MiaCostTitle" })
  for i = 0, 7 do
    local row = chart_top + i
    local line = lines[row + 1] or ""
    local start = line:find("┤", 1, true)
    if start then
      api.nvim_buf_set_extmark(buf, ns, row, 0, { end_row = row, end_col = start + 2, hl_group = "MiaCostAxis" })
      api.nvim_buf_set_extmark(buf, ns, row, start + 2, { end_row = row, end_col = #line, hl_group = "MiaCostBar" })
    end
  end
  if api.nvim_win_is_valid(win) then
    api.nvim_win_set_config(win, { title = " mia costs — " .. TITLES[scope] .. " ", title_pos = "center" })
  end
  vim.b[buf].mia_costs_scope = scope
end

--- Fetches the report for `scope` in the background and draws it when it
--- arrives: the editor never waits on the store.
local function render(buf, win, scope)
  local query = ({
    session = { scope = "session" },
    daily = { scope = "daily" },
    weekly = { scope = "weekly" },
    models = { scope = "days", days = 30 },
  })[scope]
  vim.bo[buf].modifiable = true
  api.nvim_buf_set_lines(buf, 0, -1, false, { "Loading " .. TITLES[scope] .. " …" })
  vim.bo[buf].modifiable = false
  local ok, err = pcall(M.fetch, query, function(failure, report)
    if failure then
      show(buf, win, scope, false, "mia: cost report failed: " .. tostring(failure.message))
    else
      show(buf, win, scope, true, report)
    end
  end)
  if not ok then
    show(buf, win, scope, false, err)
  end
end

--- Opens the :MiaCosts window (or refreshes it when it is open).
function M.open(scope)
  scope = scope or "session"
  if win_state and api.nvim_win_is_valid(win_state.win) then
    win_state.scope = scope
    render(win_state.buf, win_state.win, scope)
    return win_state.win
  end
  local buf = api.nvim_create_buf(false, true)
  vim.bo[buf].bufhidden = "wipe"
  local cfg = require("mia.float").centered({ max_width = 110, height = 44 })
  cfg.style, cfg.border, cfg.title, cfg.title_pos = "minimal", "rounded", " mia costs ", "center"
  local win = api.nvim_open_win(buf, true, cfg)
  vim.wo[win].wrap = false
  win_state = { buf = buf, win = win, scope = scope }
  local function close()
    if api.nvim_win_is_valid(win) then
      api.nvim_win_close(win, true)
    end
    win_state = nil
  end
  vim.keymap.set("n", "q", close, { buffer = buf, desc = "close" })
  vim.keymap.set("n", "<Esc>", close, { buffer = buf, desc = "close" })
  vim.keymap.set("n", "<Tab>", function()
    local i = 1
    for k, s in ipairs(M.scopes) do
      if s == win_state.scope then
        i = k
      end
    end
    win_state.scope = M.scopes[i % #M.scopes + 1]
    render(buf, win, win_state.scope)
  end, { buffer = buf, desc = "next view" })
  render(buf, win, scope)
  return win
end

return M
