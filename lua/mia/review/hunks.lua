--- Hunks mode (`review = "hunks"`): the proposal shows in the target
--- buffer as pending hunks (extmarks and virtual lines), accepted or
--- rejected one by one; the quickfix list names them all. Nothing is
--- written here: the core writes what the answer says. This module owns
--- the pending hunks and the buffer-local keys they hide.

local M = {}

local buffers = require("mia.buffers")
local diff = require("mia.review.diff")
local reply = require("mia.review.reply")
local ui = require("mia.review.ui")

local api = vim.api
local hunk_ns = api.nvim_create_namespace("mia_review_hunks")

--- @type table<integer, table[]> pending hunks by buffer
local pending = {}

--- The buffer of `path`, loaded, and shown in a window that is not the chat.
local function target_buffer(path)
  local buf = buffers.loaded(buffers.real_path(path))
  if not buf then
    buf = vim.fn.bufadd(path)
    vim.fn.bufload(buf)
    vim.bo[buf].buflisted = true
  end
  local chat = ui.chat_win()
  local win
  for _, w in ipairs(api.nvim_tabpage_list_wins(0)) do
    if api.nvim_win_get_buf(w) == buf and w ~= chat then
      win = w
      break
    end
  end
  if not win then
    for _, w in ipairs(api.nvim_tabpage_list_wins(0)) do
      if w ~= chat and api.nvim_win_get_config(w).relative == "" then
        win = w
        break
      end
    end
    if win then
      api.nvim_win_set_buf(win, buf)
    else
      win = api.nvim_open_win(buf, false, { split = "left", win = chat or 0 })
    end
  end
  return buf, win
end

local function buffer_text(b)
  local lines = api.nvim_buf_get_lines(b, 0, -1, false)
  if #lines == 1 and lines[1] == "" and not vim.bo[b].modified then
    return ""
  end
  return table.concat(lines, "\n") .. ((vim.bo[b].eol or vim.bo[b].fixeol) and "\n" or "")
end

--- Where hunk `h` is now: `start` (0-based first old line, or the row the
--- insertion goes before) and `count` of old lines.
local function position(h)
  local m = api.nvim_buf_get_extmark_by_id(h.buf, hunk_ns, h.mark, { details = true })
  if not m[1] then
    return nil
  end
  if h.a_count == 0 then
    -- a pure insertion goes after its anchor row (or before row 0)
    return h.after and m[1] + 1 or m[1], 0
  end
  return m[1], m[3].end_row - m[1] + 1
end

local function all_pending()
  local out = {}
  for b, list in pairs(pending) do
    if api.nvim_buf_is_valid(b) then
      for _, h in ipairs(list) do
        out[#out + 1] = h
      end
    end
  end
  table.sort(out, function(x, y)
    if x.buf ~= y.buf then
      return x.buf < y.buf
    end
    return (position(x) or 0) < (position(y) or 0)
  end)
  return out
end

--- Fills the quickfix list with every pending hunk in every file.
function M.quickfix(open)
  local items = {}
  for _, h in ipairs(all_pending()) do
    local row = position(h) or 0
    items[#items + 1] = {
      bufnr = h.buf,
      lnum = row + 1,
      col = 1,
      text = string.format(
        "mia: pending hunk %d/%d of %s (-%d +%d)",
        h.index,
        #h.req.hunks,
        h.req.tool,
        h.a_count,
        #h.b_lines
      ),
    }
  end
  local info = vim.fn.getqflist({ title = 0 })
  local ours = info.title == "mia: pending hunks"
  vim.fn.setqflist({}, ours and "r" or " ", { title = "mia: pending hunks", items = items })
  if open then
    vim.cmd("copen")
  end
end

local set_keymaps, clear_keymaps, add_hunks

--- Answers a request whose hunks are all resolved.
local function settle(req)
  if req.on_settle then
    -- hunks staged by mia itself (`:Mia edit`): nobody in the core waits
    local n = 0
    for _, h in ipairs(req.hunks) do
      n = n + (h.state == "accepted" and 1 or 0)
    end
    req.on_settle(n, #req.hunks)
    return
  end
  local accepted = {}
  for _, h in ipairs(req.hunks) do
    if h.state == "accepted" then
      accepted[#accepted + 1] = { h.a_start, h.a_count, h.b_start, h.b_count }
    end
  end
  if #accepted == #req.hunks then
    -- the buffer now holds the new text: its final newline too
    local b = req.hunks[1].buf
    if req.new_text ~= "" and api.nvim_buf_is_valid(b) then
      vim.bo[b].eol = req.new_text:sub(-1) == "\n"
    end
    reply.send(req.call, "allow_once")
  elseif #accepted == 0 then
    reply.send(req.call, "reject_once")
  else
    -- the old text with exactly the accepted hunks applied
    reply.send(req.call, "allow_once", { content = diff.apply(req.old_text, req.new_text, accepted) })
  end
end

--- Takes hunk `h` off its buffer: its marks, its place in the pending
--- list, and the buffer's keys once nothing is pending there.
local function take_off(h)
  pcall(api.nvim_buf_del_extmark, h.buf, hunk_ns, h.mark)
  if h.virt then
    pcall(api.nvim_buf_del_extmark, h.buf, hunk_ns, h.virt)
  end
  local list = pending[h.buf] or {}
  for i, x in ipairs(list) do
    if x == h then
      table.remove(list, i)
      break
    end
  end
  if #list == 0 then
    pending[h.buf] = nil
    clear_keymaps(h.buf)
  end
end

--- Resolves hunk `h` (accept applies its new lines to the buffer as one
--- undo step). `batch`: part of accept/reject all (one undo step for all,
--- the quickfix list refreshed once, by the caller).
local function resolve(h, accept, batch)
  if h.state then
    return
  end
  local start, count = position(h)
  if accept and start then
    local b = h.buf
    local was = vim.bo[b].modifiable
    vim.bo[b].modifiable = true
    if not batch then
      vim.bo[b].undolevels = vim.bo[b].undolevels
    end
    if not h.req.on_settle and h.req.old_text == "" and api.nvim_buf_line_count(b) == 1 and api.nvim_buf_get_lines(b, 0, 1, false)[1] == "" then
      api.nvim_buf_set_lines(b, 0, -1, false, h.b_lines)
    else
      api.nvim_buf_set_lines(b, start, start + count, false, h.b_lines)
    end
    vim.bo[b].modifiable = was
  end
  h.state = accept and "accepted" or "rejected"
  take_off(h)
  local req = h.req
  req.left = req.left - 1
  if req.left == 0 then
    settle(req)
  end
  if not batch and vim.fn.getqflist({ title = 0 }).title == "mia: pending hunks" then
    M.quickfix(false)
  end
end

--- Resolves every pending hunk of the current buffer, bottom up (positions
--- above stay valid), as one undo step.
local function resolve_all(accept)
  local b = api.nvim_get_current_buf()
  local list = {}
  for _, h in ipairs(pending[b] or {}) do
    list[#list + 1] = { h = h, row = position(h) or 0 }
  end
  table.sort(list, function(x, y)
    return x.row > y.row
  end)
  if accept and #list > 0 then
    vim.bo[b].undolevels = vim.bo[b].undolevels
  end
  for _, item in ipairs(list) do
    resolve(item.h, accept, true)
  end
  if vim.fn.getqflist({ title = 0 }).title == "mia: pending hunks" then
    M.quickfix(false)
  end
end

--- The pending hunk at the cursor in buffer `b` (the one covering the
--- cursor's line, else the nearest).
local function hunk_at(b, row)
  local found, spans = {}, {}
  for _, h in ipairs(pending[b] or {}) do
    local start, count = position(h)
    if start then
      found[#found + 1] = h
      spans[#spans + 1] = { start, count }
    end
  end
  local i = diff.nearest(spans, row)
  return i and found[i]
end

local function current_hunk()
  local b = api.nvim_get_current_buf()
  local h = hunk_at(b, api.nvim_win_get_cursor(0)[1] - 1)
  if not h then
    vim.notify("mia: no pending hunk in this buffer", vim.log.levels.INFO)
  end
  return h
end

local function jump(dir)
  local b = api.nvim_get_current_buf()
  local row = api.nvim_win_get_cursor(0)[1] - 1
  local rows = {}
  for _, h in ipairs(pending[b] or {}) do
    rows[#rows + 1] = position(h)
  end
  table.sort(rows)
  local target = diff.step(rows, row, dir, true)
  if target then
    api.nvim_win_set_cursor(0, { math.min(target + 1, api.nvim_buf_line_count(b)), 0 })
  end
end

--- `:Mia review {action}` and the hunk keys.
M.actions = {
  accept = function()
    local h = current_hunk()
    if h then
      resolve(h, true)
    end
  end,
  reject = function()
    local h = current_hunk()
    if h then
      resolve(h, false)
    end
  end,
  accept_all = function()
    resolve_all(true)
  end,
  reject_all = function()
    resolve_all(false)
  end,
  list = function()
    M.quickfix(true)
  end,
  next = function()
    jump(1)
  end,
  prev = function()
    jump(-1)
  end,
}

local HUNK_KEYS = {
  { "next_hunk", "next", "next pending hunk" },
  { "prev_hunk", "prev", "previous pending hunk" },
  { "accept_hunk", "accept", "accept the hunk" },
  { "reject_hunk", "reject", "reject the hunk" },
  { "accept_all", "accept_all", "accept every hunk in the buffer" },
  { "reject_all", "reject_all", "reject every hunk in the buffer" },
}

--- The buffer-local mappings the hunk keys hid, by buffer (put back after).
local hidden = {}

set_keymaps = function(b)
  if hidden[b] then
    return -- already set
  end
  hidden[b] = {}
  local k = ui.keys()
  for _, item in ipairs(HUNK_KEYS) do
    local key = k[item[1]]
    if key then
      local ok, old = pcall(api.nvim_buf_call, b, function()
        return vim.fn.maparg(key, "n", false, true)
      end)
      if ok and type(old) == "table" and old.buffer == 1 then
        table.insert(hidden[b], old)
      end
      vim.keymap.set("n", key, M.actions[item[2]], { buffer = b, nowait = true, desc = "mia review: " .. item[3] })
    end
  end
end

clear_keymaps = function(b)
  local saved = hidden[b]
  hidden[b] = nil
  if not api.nvim_buf_is_valid(b) then
    return
  end
  local k = ui.keys()
  for _, item in ipairs(HUNK_KEYS) do
    if k[item[1]] then
      pcall(vim.keymap.del, "n", k[item[1]], { buffer = b })
    end
  end
  for _, m in ipairs(saved or {}) do
    pcall(api.nvim_buf_call, b, function()
      vim.fn.mapset("n", false, m)
    end)
  end
end

--- Places the proposal of review `r` (`{ call, data, diff }`) in its
--- buffer as pending hunks; false when the buffer's text is not what the
--- proposal was computed from.
function M.place(r)
  local old_text = r.diff.oldText ~= vim.NIL and r.diff.oldText or ""
  local b, win = target_buffer(r.diff.path)
  if buffer_text(b) ~= old_text then
    return false
  end
  local hunks = diff.hunks(old_text, r.diff.newText)
  local meta = diff.meta_of(r.data)
  local req = {
    call = r.call,
    tool = type(meta.tool) == "string" and meta.tool or "an edit",
    old_text = old_text,
    new_text = r.diff.newText,
    hunks = {},
  }
  if #hunks == 0 then
    reply.send(r.call, "allow_once")
    return true
  end
  add_hunks(req, b, win, hunks, 0)
  M.show(req, win, type(meta.subject) == "string" and meta.subject or r.diff.path)
  return true
end

--- Places `hunks` (of `req.old_text` → `req.new_text`, rows counted from
--- `offset`) in buffer `b` as pending hunks of `req`.
add_hunks = function(req, b, win, hunks, offset)
  local old_lines, new_lines = diff.lines_of(req.old_text), diff.lines_of(req.new_text)
  local width = math.max(20, api.nvim_win_get_width(win))
  for i, hk in ipairs(hunks) do
    local a_start, a_count, b_start, b_count = hk[1] + offset, hk[2], hk[3], hk[4]
    local b_lines = {}
    local virt = {}
    for j = 0, b_count - 1 do
      local line = new_lines[b_start + j]
      b_lines[#b_lines + 1] = line
      local shown = line:gsub("\t", string.rep(" ", vim.bo[b].tabstop))
      virt[#virt + 1] = { { shown .. string.rep(" ", math.max(0, width - vim.fn.strdisplaywidth(shown))), "DiffAdd" } }
    end
    local h = {
      req = req,
      index = i,
      buf = b,
      a_start = a_start,
      a_count = a_count,
      b_start = b_start,
      b_count = b_count,
      b_lines = b_lines,
    }
    if a_count > 0 then
      local last = a_start + a_count - 2
      h.mark = api.nvim_buf_set_extmark(b, hunk_ns, a_start - 1, 0, {
        end_row = last,
        end_col = #(old_lines[a_start - offset + a_count - 1] or ""),
        hl_group = "DiffDelete",
        hl_eol = true,
        right_gravity = false,
        end_right_gravity = true,
        sign_text = "-",
        sign_hl_group = "DiffDelete",
      })
      if #virt > 0 then
        h.virt = api.nvim_buf_set_extmark(b, hunk_ns, last, 0, { virt_lines = virt })
      end
    else
      -- a pure insertion after line a_start (0: before the first line)
      local above = a_start == 0
      local row = above and 0 or a_start - 1
      h.mark = api.nvim_buf_set_extmark(b, hunk_ns, row, 0, {
        virt_lines = virt,
        virt_lines_above = above,
        sign_text = "+",
        sign_hl_group = "DiffAdd",
      })
      -- the insertion goes after the anchor row (or before row 0)
      h.after = not above
    end
    req.hunks[#req.hunks + 1] = h
  end
  req.left = #req.hunks
  pending[b] = pending[b] or {}
  vim.list_extend(pending[b], req.hunks)
  set_keymaps(b)
end

--- Lists `req`'s hunks, moves the cursor to the first and says how to
--- review them (`subject`: the file's name).
function M.show(req, win, subject)
  M.quickfix(false)
  if api.nvim_win_is_valid(win) then
    api.nvim_set_current_win(win)
    local first = position(req.hunks[1])
    pcall(api.nvim_win_set_cursor, win, { (first or 0) + 1, 0 })
  end
  vim.notify(
    string.format(
      "mia: %d pending hunk%s in %s: %s/%s move, %s accept, %s reject (:Mia review list)",
      #req.hunks,
      #req.hunks == 1 and "" or "s",
      subject,
      ui.keys().next_hunk or "",
      ui.keys().prev_hunk or "",
      ui.keys().accept_hunk or "",
      ui.keys().reject_hunk or ""
    ),
    vim.log.levels.INFO
  )
end

--- Stages `new_lines` in place of the `#old_lines` lines of buffer `b`
--- from row `row` (0-based) as pending hunks, reviewed like any staged
--- edit: the hunk keys and `:Mia review` accept or reject them, accepting
--- writes the buffer (not the file). `on_settle(accepted, total)` runs once
--- every hunk is resolved. The request, or nil when nothing differs.
--- @param b integer
--- @param row integer
--- @param old_lines string[]
--- @param new_lines string[]
--- @param opts { tool: string, subject: string, on_settle: fun(accepted: integer, total: integer), win?: integer }
--- @return table|nil
function M.stage(b, row, old_lines, new_lines, opts)
  local old_text = table.concat(old_lines, "\n") .. "\n"
  local new_text = #new_lines > 0 and (table.concat(new_lines, "\n") .. "\n") or ""
  local hunks = diff.hunks(old_text, new_text)
  if #hunks == 0 then
    return nil
  end
  local req = { tool = opts.tool, old_text = old_text, new_text = new_text, hunks = {}, on_settle = opts.on_settle }
  local win = opts.win
  if not (win and api.nvim_win_is_valid(win) and api.nvim_win_get_buf(win) == b) then
    win = vim.fn.bufwinid(b)
  end
  add_hunks(req, b, win ~= -1 and win or 0, hunks, row)
  M.show(req, win ~= -1 and win or 0, opts.subject)
  return req
end

--- Takes down the pending hunks of `req` (from `M.stage`) without
--- resolving them; how many there were.
function M.unstage(req)
  local n = 0
  for _, h in ipairs(req.hunks) do
    if not h.state then
      h.state = "dropped"
      n = n + 1
      take_off(h)
    end
  end
  return n
end

--- Every pending hunk (for tests and statuslines): `{ buf, lnum, old, new }`.
function M.pending()
  local out = {}
  for _, h in ipairs(all_pending()) do
    out[#out + 1] = { buf = h.buf, lnum = (position(h) or 0) + 1, old = h.a_count, new = h.b_lines }
  end
  return out
end

--- Takes down every pending hunk, answering none (the answer they
--- belonged to ended); how many there were.
--- @return integer
function M.drop()
  local dropped = 0
  local kept = {}
  for b, list in pairs(pending) do
    for _, h in ipairs(list) do
      if h.req.on_settle then
        -- `:Mia edit`'s: no answer of the chat waits for them
        kept[b] = kept[b] or {}
        table.insert(kept[b], h)
      else
        h.state = "dropped"
        dropped = dropped + 1
        pcall(api.nvim_buf_del_extmark, b, hunk_ns, h.mark)
        if h.virt then
          pcall(api.nvim_buf_del_extmark, b, hunk_ns, h.virt)
        end
      end
    end
    if not kept[b] then
      clear_keymaps(b)
    end
  end
  pending = kept
  if vim.fn.getqflist({ title = 0 }).title == "mia: pending hunks" then
    M.quickfix(false)
  end
  return dropped
end

return M
