--- Tool-call blocks in the chat: one line per call with its key argument and
--- a live status (pending → running → done/failed) at the end of the line,
--- and, once it ends, a folded block with the full input and output.

local M = {}

local api = vim.api
local ns = api.nvim_create_namespace("mia_tool_blocks")

api.nvim_set_hl(0, "MiaToolPending", { default = true, link = "Comment" })
api.nvim_set_hl(0, "MiaToolRunning", { default = true, link = "DiagnosticInfo" })
api.nvim_set_hl(0, "MiaToolDone", { default = true, link = "DiagnosticOk" })
api.nvim_set_hl(0, "MiaToolFailed", { default = true, link = "DiagnosticError" })

--- @type table<string, { buf: integer, mark: integer, closed: boolean }>
local blocks = {}

local FINAL = { done = true, failed = true, rejected = true, cancelled = true }
local KEYS = { "path", "command", "pattern", "file", "query", "name" }

--- The argument worth showing on the block's line.
local function key_argument(args)
  if type(args) ~= "table" then
    return ""
  end
  for _, k in ipairs(KEYS) do
    if type(args[k]) == "string" then
      local v = args[k]:gsub("\n", " ")
      return " `" .. (#v > 60 and (v:sub(1, 57) .. "…") or v) .. "`"
    end
  end
  return ""
end

local function first_line(text)
  local line = (text or ""):match("^[^\n]*") or ""
  return #line > 100 and (line:sub(1, 97) .. "…") or line
end

--- " · 3/5 · message" for a tool's progress report, "" without one.
--- @param p? { progress?: number, total?: number, message?: string }
function M.progress_text(p)
  if type(p) ~= "table" or type(p.progress) ~= "number" then
    return ""
  end
  local function num(n)
    return n == math.floor(n) and string.format("%d", n) or string.format("%.1f", n)
  end
  local text = " · " .. num(p.progress)
  if type(p.total) == "number" and p.total > 0 then
    text = text .. "/" .. num(p.total)
  end
  if type(p.message) == "string" and p.message ~= "" then
    text = text .. " · " .. first_line(p.message)
  end
  return text
end

--- The status text and its highlight group.
function M.status_of(ev)
  if ev.status == "pending" then
    return "… pending", "MiaToolPending"
  elseif ev.status == "awaiting_permission" then
    return "? waiting for your permission", "MiaToolPending"
  elseif ev.status == "running" then
    return "⟳ running" .. M.progress_text(ev.progress), "MiaToolRunning"
  elseif ev.status == "done" then
    local summary = type(ev.metadata) == "table" and ev.metadata.summary or "done"
    return string.format("✓ %s (%d ms)", summary, ev.duration_ms or 0), "MiaToolDone"
  elseif ev.status == "rejected" then
    return "⊘ rejected", "MiaToolFailed"
  elseif ev.status == "cancelled" then
    return "■ cancelled", "MiaToolFailed"
  end
  return "✗ " .. first_line(ev.output), "MiaToolFailed"
end

local function details(ev)
  local ok, input = pcall(vim.json.encode, ev.arguments)
  local lines = { "    input: " .. (ok and input or vim.inspect(ev.arguments)), "    output:" }
  local n = 0
  for line in ((ev.output or "") .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    if n > 200 then
      lines[#lines + 1] = "    … (more in the model's copy)"
      break
    end
    lines[#lines + 1] = "    " .. line
  end
  return lines
end

--- Applies one tool event to the chat buffer `buf`.
--- @param needs_gap boolean whether text precedes the block on the same paragraph
function M.update(buf, ev, needs_gap)
  if not api.nvim_buf_is_valid(buf) then
    return
  end
  local writer = require("mia.writer")
  local block = blocks[ev.id]
  local text, hl = M.status_of(ev)
  if not block then
    writer.append(buf, (needs_gap and "\n\n" or "") .. "⚙ **" .. ev.name .. "**" .. key_argument(ev.arguments))
    writer.flush()
    local row = api.nvim_buf_line_count(buf) - 1
    local mark = api.nvim_buf_set_extmark(buf, ns, row, 0, { virt_text = { { "  " .. text, hl } } })
    block = { buf = buf, mark = mark, closed = false }
    blocks[ev.id] = block
  else
    api.nvim_buf_set_extmark(buf, ns, M.row(ev.id), 0, { id = block.mark, virt_text = { { "  " .. text, hl } } })
  end
  if FINAL[ev.status] and not block.closed then
    block.closed = true
    writer.flush()
    local row = M.row(ev.id)
    local lines = details(ev)
    local was = vim.bo[buf].modifiable
    vim.bo[buf].modifiable = true
    api.nvim_buf_set_lines(buf, row + 1, row + 1, false, lines)
    vim.bo[buf].modifiable = was
    for _, win in ipairs(vim.fn.win_findbuf(buf)) do
      api.nvim_win_call(win, function()
        vim.cmd(string.format("silent! %d,%dfold", row + 2, row + 1 + #lines))
      end)
    end
  end
end

--- The 0-based row of the block line of call `id`.
function M.row(id)
  local block = blocks[id]
  if not block then
    return nil
  end
  return api.nvim_buf_get_extmark_by_id(block.buf, ns, block.mark, {})[1]
end

--- The status text shown for call `id` (for tests and statuslines).
function M.status_text(id)
  local block = blocks[id]
  if not block then
    return nil
  end
  local m = api.nvim_buf_get_extmark_by_id(block.buf, ns, block.mark, { details = true })
  return m[3] and m[3].virt_text and vim.trim(m[3].virt_text[1][1]) or nil
end

--- Forgets every block (after the chat is cleared).
function M.reset()
  blocks = {}
end

return M
