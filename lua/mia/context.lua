--- `:Mia context`: what the next request will carry (system prompt, rules
--- files, tool definitions, history, the prompt buffer's text and what its
--- @-mentions attach), each part
--- with its tokens, its share of the model's context window and its price
--- at the model's input rate. The core builds the request as the agent
--- would and counts it; the float opens when the count is back.

local M = {}

local api = vim.api

local function thousands(n)
  local s = tostring(math.floor(n or 0))
  local out = s:reverse():gsub("(%d%d%d)", "%1,"):reverse()
  return (out:gsub("^,", ""))
end

local function num(v)
  return type(v) == "number" and v or nil
end

--- Asks the core for the report of the prompt buffer's text; `cb(err, report)`.
--- @param cb fun(err: table?, report: table?)
function M.fetch(cb)
  local text = package.loaded["mia.prompt"] and require("mia.prompt").text() or ""
  -- The prompt's @-mentions count as they would be sent (read by the core).
  require("mia.mentions").expand(text, function(err, extra, attachments)
    if err then
      cb({ message = "mia: " .. err }, nil)
      return
    end
    local content = extra and extra ~= "" and (text .. "\n\n" .. extra) or text
    local ok, e = pcall(require("mia.chat").context, content, cb, attachments)
    if not ok then
      cb({ message = tostring(e) }, nil)
    end
  end)
end

--- The float's lines for `report` (what `agent_context` returns).
--- @param r table
--- @return string[]
function M.lines(r)
  local mark = r.counted and "" or "~"
  local lines = {}
  local head = string.format("model %s · mode %s", r.model, r.mode)
  if num(r.window) then
    head = head .. string.format(" · window %s tokens", thousands(r.window))
  end
  if num(r.input_per_million) then
    head = head .. string.format(" · %s per M input", require("mia.costs").usd(r.input_per_million))
  end
  lines[#lines + 1] = head
  if r.counted then
    lines[#lines + 1] = "counted by the provider; parts shared out in proportion to their estimates"
  else
    lines[#lines + 1] = string.format("~ estimated (within ±%d%% for prose, code and JSON)", r.error_percent or 25)
  end
  lines[#lines + 1] = ""
  local function row(name, tokens, percent, usd)
    local pct = num(percent) and string.format("%5.1f%%", percent) or "     ?"
    local price = num(usd) and require("mia.costs").usd(usd) or "?"
    return string.format("%-36s %12s %7s %10s", name, mark .. thousands(tokens), pct, price)
  end
  lines[#lines + 1] = string.format("%-36s %12s %7s %10s", "part", "tokens", "ctx", "input")
  for _, p in ipairs(r.parts or {}) do
    local name = p.detail and ("  " .. p.name) or p.name
    if p.kind == "rules" then
      name = "rules: " .. name
    end
    if #name > 36 then
      name = name:sub(1, 35) .. "…"
    end
    lines[#lines + 1] = row(name, p.tokens, p.percent, p.usd)
  end
  lines[#lines + 1] = string.rep("─", 68)
  lines[#lines + 1] = row("total", r.total, r.percent, r.usd)
  if type(r.note) == "string" and r.note ~= "" then
    lines[#lines + 1] = ""
    lines[#lines + 1] = "note: " .. r.note
  end
  return lines
end

local function show(lines)
  local buf = api.nvim_create_buf(false, true)
  vim.bo[buf].bufhidden = "wipe"
  api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].filetype = "mia-context"
  local win = require("mia.float").open(
    buf,
    " mia context ",
    { max_width = 90, min_width = 70, height = #lines, min_height = 3 }
  )
  return buf, win
end

--- `:Mia context`: counts in the background, then opens the float.
function M.open()
  M.fetch(function(err, report)
    if err then
      local msg = tostring(type(err) == "table" and err.message or err)
      vim.notify(msg:match("^mia") and msg or ("mia: :Mia context failed: " .. msg), vim.log.levels.ERROR)
      return
    end
    show(M.lines(report))
  end)
end

return M
