--- Reviewing a proposed edit before it lands. The core asks with ACP's
--- `session/request_permission` whose tool call carries a `diff` content
--- (`{ type = "diff", path, oldText, newText }`); the answer is the chosen
--- option, with `_meta.mia.reason` (a rejection's reason for the model) or
--- `_meta.mia.content` (the text the user made of the proposal).
---
--- Two ways to review (`setup({ review = ... })`):
--- - "diff": a float with the unified diff (word-level highlights) and keys
---   to accept, accept for the file, allow always, reject, edit first;
--- - "hunks": the proposal shows in the target buffer as pending hunks
---   (extmarks and virtual lines), accepted or rejected one by one. Nothing
---   is written by the review: the core writes what the answer says.

local M = {}

local api = vim.api
local ns = api.nvim_create_namespace("mia_review")
local hunk_ns = api.nvim_create_namespace("mia_review_hunks")

--- Lines of the context shown around each change.
local CONTEXT = 3
--- Paired -/+ lines get word-level highlights up to this many pairs and
--- this line length; beyond, the changed middle of the line is highlighted.
local MAX_WORD_PAIRS = 2000
local MAX_WORD_LINE = 2000

local function config()
  return require("mia.config").get()
end

local function keys()
  return config().review_keys or {}
end

--- The line diff function: `vim.text.diff` (0.12) or `vim.diff` (0.10, 0.11).
local function line_diff(a, b, opts)
  local fn = (vim.text and vim.text.diff) or vim.diff
  return fn(a, b, opts)
end

--- The lines of a whole-file text (its final "\n" ends the last line).
--- @param text string
--- @return string[]
function M.lines_of(text)
  if text == "" then
    return {}
  end
  if text:sub(-1) == "\n" then
    text = text:sub(1, -2)
  end
  return vim.split(text, "\n", { plain = true })
end

--- The changed regions between two texts, `{ a_start, a_count, b_start,
--- b_count }` each (1-based; a count of 0 means "after line start").
--- @return integer[][]
function M.hunks(old_text, new_text)
  -- The diff works on whole lines: both texts end with "\n" for it (a
  -- missing final newline is reported apart by the caller).
  local a = old_text == "" and "" or (old_text:sub(-1) == "\n" and old_text or old_text .. "\n")
  local b = new_text == "" and "" or (new_text:sub(-1) == "\n" and new_text or new_text .. "\n")
  return line_diff(a, b, { result_type = "indices" }) or {}
end

-- Words, runs of spaces and single other characters: the units of the
-- word-level highlights.
local function tokens(line)
  local out, pos = {}, {}
  local i, n = 1, #line
  while i <= n do
    local s, e = line:find("^[%w_]+", i)
    if not s then
      s, e = line:find("^%s+", i)
    end
    if not s then
      -- one UTF-8 character
      local c = line:byte(i)
      local len = c >= 0xF0 and 4 or c >= 0xE0 and 3 or c >= 0xC0 and 2 or 1
      s, e = i, math.min(n, i + len - 1)
    end
    out[#out + 1] = line:sub(s, e)
    pos[#pos + 1] = s
    i = e + 1
  end
  return out, pos
end

--- Byte ranges `{ start_col, end_col }` (0-based, end exclusive) of what
--- differs between `a` and `b`: in `a` (first result) and in `b` (second).
function M.word_ranges(a, b)
  local ra, rb = {}, {}
  if #a > MAX_WORD_LINE or #b > MAX_WORD_LINE then
    -- the changed middle: common prefix and suffix left out
    local p = 0
    while p < #a and p < #b and a:byte(p + 1) == b:byte(p + 1) do
      p = p + 1
    end
    local s = 0
    while s < #a - p and s < #b - p and a:byte(#a - s) == b:byte(#b - s) do
      s = s + 1
    end
    if #a - s > p then
      ra[1] = { p, #a - s }
    end
    if #b - s > p then
      rb[1] = { p, #b - s }
    end
    return ra, rb
  end
  local ta, pa = tokens(a)
  local tb, pb = tokens(b)
  local hunks = line_diff(table.concat(ta, "\n") .. "\n", table.concat(tb, "\n") .. "\n", { result_type = "indices" }) or {}
  local function range(toks, pos, start, count, out)
    if count > 0 then
      local last = start + count - 1
      local from, to = pos[start] - 1, pos[last] - 1 + #toks[last]
      -- spaces alone are not worth a highlight
      if not (count == 1 and toks[start]:match("^%s+$")) then
        out[#out + 1] = { from, to }
      end
    end
  end
  for _, h in ipairs(hunks) do
    range(ta, pa, h[1], h[2], ra)
    range(tb, pb, h[3], h[4], rb)
  end
  return ra, rb
end

--- The unified diff of `old_text` → `new_text` as lines, with highlights:
--- `{ lines, line_hl = { [row] = group }, words = { { row, from, to } },
--- hunk_rows = { row of each @@ header } }` (rows 0-based).
--- @param name string shown path
--- @param old_text string|nil nil: the file does not exist
--- @param new_text string
--- @param notes string[]|nil lines shown under the path (what to know about the proposal)
function M.unified(name, old_text, new_text, notes)
  local old = old_text or ""
  local a, b = M.lines_of(old), M.lines_of(new_text)
  local hunks = M.hunks(old, new_text)
  local lines = {}
  local line_hl, words, hunk_rows = {}, {}, {}
  local header = old_text == nil and (name .. " (new file)") or name
  lines[1] = header
  line_hl[0] = "Title"
  for _, note in ipairs(notes or {}) do
    lines[#lines + 1] = note
    line_hl[#lines - 1] = "WarningMsg"
  end
  -- groups of hunks whose context touches
  local groups = {}
  for _, h in ipairs(hunks) do
    local first = h[2] > 0 and h[1] or h[1] + 1 -- first old line after the change's start
    local last = h[2] > 0 and h[1] + h[2] - 1 or h[1]
    local g = groups[#groups]
    if g and first - CONTEXT <= g.last + CONTEXT + 1 then
      g.hunks[#g.hunks + 1] = h
      g.last = math.max(g.last, last)
    else
      groups[#groups + 1] = { hunks = { h }, first = first, last = last }
    end
  end
  local pairs_done = 0
  local shift = 0 -- new line number minus old line number before the group
  for _, g in ipairs(groups) do
    local from = math.max(1, g.first - CONTEXT)
    local to = math.min(#a, g.last + CONTEXT)
    if to < from then
      to = from - 1
    end
    -- the new side's lines: old lines shift by the hunks before them
    local body = {}
    local cursor = from
    local old_count, new_count = 0, 0
    local function context_to(limit)
      while cursor <= limit do
        body[#body + 1] = { " " .. a[cursor] }
        old_count, new_count = old_count + 1, new_count + 1
        cursor = cursor + 1
      end
    end
    for _, h in ipairs(g.hunks) do
      local a_start, a_count, b_start, b_count = h[1], h[2], h[3], h[4]
      context_to(a_count > 0 and a_start - 1 or a_start)
      local minus = {}
      for i = 0, a_count - 1 do
        minus[#minus + 1] = a[a_start + i]
        body[#body + 1] = { "-" .. a[a_start + i], "DiffDelete", pair = i + 1, side = "a" }
      end
      old_count = old_count + a_count
      cursor = cursor + a_count
      local plus = {}
      for i = 0, b_count - 1 do
        plus[#plus + 1] = b[b_start + i]
        body[#body + 1] = { "+" .. b[b_start + i], "DiffAdd", pair = i + 1, side = "b" }
      end
      new_count = new_count + b_count
      -- word-level highlights of paired lines
      local n = math.min(#minus, #plus)
      if n > 0 then
        local base = #body - b_count - a_count
        for i = 1, n do
          pairs_done = pairs_done + 1
          local ra, rb
          if pairs_done <= MAX_WORD_PAIRS then
            ra, rb = M.word_ranges(minus[i], plus[i])
          else
            ra, rb = {}, {}
          end
          body[base + i].words = ra
          body[base + a_count + i].words = rb
        end
      end
    end
    context_to(to)
    local this_shift = shift
    shift = shift + new_count - old_count
    local old_start = old_count > 0 and from or from - 1
    -- the new side starts where the old one does, shifted by earlier groups
    local new_start = new_count > 0 and (from + this_shift) or (from + this_shift - 1)
    hunk_rows[#hunk_rows + 1] = #lines
    lines[#lines + 1] = string.format("@@ -%d,%d +%d,%d @@", old_start, old_count, new_start, new_count)
    line_hl[#lines - 1] = "DiffChange"
    for _, l in ipairs(body) do
      lines[#lines + 1] = l[1]
      local row = #lines - 1
      if l[2] then
        line_hl[row] = l[2]
      end
      for _, r in ipairs(l.words or {}) do
        words[#words + 1] = { row, r[1] + 1, r[2] + 1 }
      end
    end
  end
  local old_eol = old ~= "" and old:sub(-1) == "\n"
  local new_eol = new_text ~= "" and new_text:sub(-1) == "\n"
  if old ~= "" and new_text ~= "" and old_eol ~= new_eol then
    lines[#lines + 1] = new_eol and "\\ the final newline is added" or "\\ No newline at end of file (removed)"
    line_hl[#lines - 1] = "Comment"
  end
  if #groups == 0 and old == new_text then
    lines[#lines + 1] = "(no change)"
  end
  return { lines = lines, line_hl = line_hl, words = words, hunk_rows = hunk_rows }
end

-- ---------------------------------------------------------------------------
-- Answers

--- Answers review `call` with option `id` and mia's extras; no `id` is
--- ACP's `cancelled` outcome.
local function reply(call, id, extra)
  local loader = require("mia.core")
  local answer = { outcome = id and { outcome = "selected", optionId = id } or { outcome = "cancelled" } }
  if extra and next(extra) then
    answer._meta = { mia = extra }
  end
  local ok, core = pcall(loader.get)
  if ok and core then
    pcall(core.reply, call, true, answer)
  end
end

--- The diff entry of a permission request, if it is an edit review.
function M.diff_of(data)
  local tc = type(data) == "table" and data.toolCall
  if type(tc) ~= "table" or type(tc.content) ~= "table" then
    return nil
  end
  for _, c in ipairs(tc.content) do
    if type(c) == "table" and c.type == "diff" and type(c.path) == "string" and type(c.newText) == "string" then
      return c
    end
  end
  return nil
end

-- ---------------------------------------------------------------------------
-- Diff mode: one float at a time; later reviews wait their turn.

local queue = {}
--- @type table? the review on screen: { call, data, diff, buf, win, answered }
local showing = nil

local show_next

local function close_float(r)
  local win = r.win
  r.win = nil -- first: the WinClosed handler leaves a window closed here alone
  if win and api.nvim_win_is_valid(win) then
    pcall(api.nvim_win_close, win, true)
  end
  if r.buf and api.nvim_buf_is_valid(r.buf) then
    pcall(api.nvim_buf_delete, r.buf, { force = true })
  end
  r.buf = nil
end

--- Ends review `r` with option `id`.
local function finish(r, id, extra)
  if r.answered then
    return
  end
  r.answered = true
  close_float(r)
  if showing == r then
    showing = nil
  end
  reply(r.call, id, extra)
  vim.schedule(show_next)
end

--- The chat's window, when the chat shows in this tabpage.
local function chat_win()
  local chat = package.loaded["mia.chat.window"] and require("mia.chat.window").existing()
  if not chat then
    return nil
  end
  for _, w in ipairs(api.nvim_tabpage_list_wins(0)) do
    if api.nvim_win_get_buf(w) == chat then
      return w
    end
  end
  return nil
end

local function meta_of(data)
  return type(data._meta) == "table" and type(data._meta.mia) == "table" and data._meta.mia or {}
end

--- The footer: the key and label of every action that has a hint.
local function key_hint(items)
  local parts = {}
  for _, item in ipairs(items) do
    if item.key and item.hint then
      parts[#parts + 1] = item.key .. " " .. item.hint
    end
  end
  return " " .. table.concat(parts, " · ") .. " "
end

local open_float

--- Opens the proposal in a normal buffer: `:w` accepts its text, leaving
--- it without writing goes back to the review.
local function edit_first(r)
  close_float(r)
  local name = meta_of(r.data).subject
  name = type(name) == "string" and name or vim.fn.fnamemodify(r.diff.path, ":t")
  local buf = api.nvim_create_buf(true, false)
  local bufname = "mia://proposal/" .. name
  if not pcall(api.nvim_buf_set_name, buf, bufname) then
    pcall(api.nvim_buf_set_name, buf, bufname .. " (" .. buf .. ")")
  end
  vim.bo[buf].buftype = "acwrite"
  vim.bo[buf].bufhidden = "wipe"
  vim.bo[buf].swapfile = false
  local text = r.diff.newText
  api.nvim_buf_set_lines(buf, 0, -1, false, M.lines_of(text))
  vim.bo[buf].eol = text == "" or text:sub(-1) == "\n"
  vim.bo[buf].fixeol = false
  vim.bo[buf].modified = false
  local ft = vim.filetype.match({ filename = r.diff.path, buf = buf })
  if ft then
    vim.bo[buf].filetype = ft
  end
  -- a window that is not the chat's
  local chat = chat_win()
  local target = api.nvim_get_current_win()
  if target == chat or api.nvim_win_get_config(target).relative ~= "" then
    target = nil
    for _, w in ipairs(api.nvim_tabpage_list_wins(0)) do
      if w ~= chat and api.nvim_win_get_config(w).relative == "" then
        target = w
        break
      end
    end
  end
  if target then
    api.nvim_set_current_win(target)
    vim.cmd("aboveleft split")
  else
    vim.cmd("aboveleft vsplit")
  end
  api.nvim_win_set_buf(0, buf)
  r.proposal = buf
  local group = api.nvim_create_augroup("mia_review_proposal_" .. buf, { clear = true })
  api.nvim_create_autocmd("BufWriteCmd", {
    group = group,
    buffer = buf,
    callback = function()
      local lines = api.nvim_buf_get_lines(buf, 0, -1, false)
      local content = table.concat(lines, "\n")
      if vim.bo[buf].eol and not (#lines == 1 and lines[1] == "") then
        content = content .. "\n"
      end
      vim.bo[buf].modified = false
      r.proposal = nil
      finish(r, "allow_once", { content = content })
      vim.schedule(function()
        if api.nvim_buf_is_valid(buf) then
          pcall(api.nvim_buf_delete, buf, { force = true })
        end
      end)
    end,
  })
  api.nvim_create_autocmd("BufWipeout", {
    group = group,
    buffer = buf,
    callback = function()
      pcall(api.nvim_del_augroup_by_id, group)
      if not r.answered then
        r.proposal = nil
        vim.schedule(function()
          open_float(r)
        end)
      end
    end,
  })
  vim.notify("mia: edit the proposal, then :w to accept it (leave without writing to go back to the review)", vim.log.levels.INFO)
end

local function reject_with_reason(r)
  close_float(r)
  vim.ui.input({ prompt = "Reason for rejecting (sent to the model; empty for none): " }, function(text)
    local reason = text and vim.trim(text) or ""
    finish(r, "reject_once", reason ~= "" and { reason = reason } or nil)
  end)
end

--- What an agent's proposal needs said above its diff (from `_meta.mia`,
--- filled by the core): outside the project, cut, a fragment, old text
--- taken from the disk.
function M.agent_notes(agent, meta)
  local notes = {}
  if meta.outside then
    notes[#notes + 1] = string.format(
      "⚠ outside the project (%s): %s writes it with its own tools if you accept",
      tostring(meta.root or "?"),
      agent
    )
  end
  local cut = type(meta.cut) == "table" and meta.cut or nil
  if cut then
    local function size(n)
      n = tonumber(n) or 0
      return n >= 1024 * 1024 and string.format("%.1f MB", n / 1024 / 1024) or string.format("%d KB", math.ceil(n / 1024))
    end
    for _, side in ipairs({ { "new", "new text" }, { "old", "old text" } }) do
      local p = side[1]
      if cut[p .. "_bytes"] then
        notes[#notes + 1] = string.format(
          "⚠ too large to show in full: the %s has %d lines (%s); the diff covers its first %d. Accepting accepts all of it.",
          side[2],
          tonumber(cut[p .. "_lines"]) or 0,
          size(cut[p .. "_bytes"]),
          tonumber(cut[p .. "_shown_lines"]) or 0
        )
      end
    end
  end
  if meta.fragment then
    notes[#notes + 1] = "the agent sent the changed part of the file: line numbers count from that part"
  end
  if meta.old_from_disk then
    notes[#notes + 1] = "the agent sent the whole new text: the diff is against the file on disk"
  end
  return notes
end

--- `text` cut to `width` display cells from the left ("…" marks the cut).
local function fit(text, width)
  if vim.fn.strdisplaywidth(text) <= width then
    return text
  end
  local n = vim.fn.strchars(text)
  local i = 0
  while i < n and vim.fn.strdisplaywidth("…" .. vim.fn.strcharpart(text, i)) > width do
    i = i + 1
  end
  return "…" .. vim.fn.strcharpart(text, i)
end

--- An option's name for the footer: one line, at most 24 characters.
local function label(option)
  local name = tostring(option.name or option.optionId):gsub("%c", " ")
  return vim.fn.strcharpart(name, 0, 24)
end

--- What dismissing review `r` answers: the reject option (mia's own
--- `reject_once`; an agent's reject option, or `cancelled` without one).
local function dismiss_answer(r)
  if r.agent then
    return r.agent.choices.reject and r.agent.choices.reject.optionId or nil
  end
  return "reject_once"
end

--- The float's actions for mia's own edit: `{ key, hint, fn, desc }`.
local function own_actions(r, k)
  return {
    { key = k.accept, hint = "accept", desc = "accept", fn = function()
      finish(r, "allow_once")
    end },
    { key = k.accept_file, hint = "accept file", desc = "accept edits to this file for the session", fn = function()
      finish(r, "allow_file")
    end },
    { key = k.accept_always, hint = "always", desc = "allow always for this project", fn = function()
      finish(r, "allow_always")
    end },
    { key = k.reject, hint = "reject", desc = "reject (asks a reason)", fn = function()
      reject_with_reason(r)
    end },
    { key = k.edit, hint = "edit", desc = "edit the proposal first", fn = function()
      edit_first(r)
    end },
    { key = k.dismiss, hint = "dismiss", desc = "dismiss (reject)", fn = function()
      finish(r, "reject_once")
    end },
  }
end

--- The float's actions for an external agent's edit: each key answers
--- with the agent's option of its kind; a key whose kind the agent does
--- not offer has no hint and says so.
local function agent_actions(r, k)
  local who, c = r.agent.name, r.agent.choices
  local function say(text)
    return function()
      vim.notify("mia: " .. text, vim.log.levels.INFO)
    end
  end
  local function choose(option, what)
    if option then
      return function()
        finish(r, option.optionId)
      end
    end
    return say(string.format("%s offers no %s option for this edit", who, what))
  end
  local dismiss = function()
    finish(r, dismiss_answer(r))
  end
  local no_file_scope = "an agent's permission has no per-file scope"
  if c.accept_always then
    no_file_scope = string.format("%s: %s answers “%s”", no_file_scope, k.accept_always or "A", label(c.accept_always))
  end
  local no_edit = string.format(
    "%s writes this file with its own tools, so its proposal cannot be edited here: reject it and tell %s what you want instead",
    who,
    who
  )
  return {
    {
      key = k.accept,
      hint = c.accept and label(c.accept),
      desc = "accept (the agent's allow_once)",
      fn = choose(c.accept, "“allow once”"),
    },
    {
      key = k.accept_always,
      hint = c.accept_always and label(c.accept_always),
      desc = "allow always (the agent's allow_always)",
      fn = choose(c.accept_always, "“allow always”"),
    },
    { key = k.accept_file, desc = "not for agents", fn = say(no_file_scope) },
    {
      key = k.reject,
      hint = c.reject and label(c.reject),
      desc = "reject (the agent's reject option)",
      fn = c.reject and dismiss or choose(nil, "reject"),
    },
    { key = k.edit, desc = "not for agents", fn = say(no_edit) },
    { key = k.dismiss, hint = c.reject and "dismiss" or "cancel", desc = "dismiss", fn = dismiss },
  }
end

--- Shows review `r` in a float (over the chat when it is open).
open_float = function(r)
  local meta = meta_of(r.data)
  local name = type(meta.subject) == "string" and meta.subject or r.diff.path
  local old = r.diff.oldText ~= vim.NIL and r.diff.oldText or nil
  local view = r.view or M.unified(name, old, r.diff.newText, r.agent and M.agent_notes(r.agent.name, meta) or nil)
  r.view = view
  local buf = api.nvim_create_buf(false, true)
  vim.bo[buf].bufhidden = "wipe"
  vim.bo[buf].swapfile = false
  api.nvim_buf_set_lines(buf, 0, -1, false, view.lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].filetype = "mia-review"
  for row, group in pairs(view.line_hl) do
    api.nvim_buf_set_extmark(buf, ns, row, 0, { line_hl_group = group, priority = 100 })
  end
  for _, w in ipairs(view.words) do
    pcall(api.nvim_buf_set_extmark, buf, ns, w[1], w[2], { end_col = w[3], hl_group = "DiffText", priority = 110 })
  end
  local chat = chat_win()
  local cfg
  local height_wanted = #view.lines
  if chat and api.nvim_win_get_width(chat) >= 50 then
    local w, h = api.nvim_win_get_width(chat), api.nvim_win_get_height(chat)
    local width = math.max(40, w - 2)
    local height = math.max(5, math.min(height_wanted, h - 4))
    cfg = { relative = "win", win = chat, row = 1, col = 0, width = width, height = height }
  else
    cfg = require("mia.float").centered({ max_width = 120, min_width = 40, height = height_wanted, min_height = 5 })
  end
  local k = keys()
  local actions
  cfg.style = "minimal"
  cfg.border = "rounded"
  if r.agent then
    local where = meta.outside and " (outside the project)" or ""
    local head = string.format("%s wants to edit ", r.agent.name)
    local room = cfg.width - 2 - vim.fn.strdisplaywidth(head .. where)
    cfg.title = " " .. head .. fit(name, math.max(8, room)) .. where .. " "
    actions = agent_actions(r, k)
  else
    local tool = meta.tool
    cfg.title = string.format(" mia: review %s%s ", type(tool) == "string" and tool .. " → " or "", view.lines[1])
    actions = own_actions(r, k)
  end
  cfg.title_pos = "center"
  cfg.footer = key_hint(actions)
  cfg.footer_pos = "center"
  vim.cmd("stopinsert") -- the keys are normal-mode keys, also when the prompt was being typed
  local win = api.nvim_open_win(buf, true, cfg)
  vim.wo[win].wrap = false
  vim.wo[win].cursorline = true
  r.buf, r.win = buf, win
  if view.hunk_rows[1] then
    pcall(api.nvim_win_set_cursor, win, { view.hunk_rows[1] + 1, 0 })
  end
  local function map(key, fn, desc)
    if key then
      vim.keymap.set("n", key, fn, { buffer = buf, nowait = true, desc = "mia review: " .. desc })
    end
  end
  for _, a in ipairs(actions) do
    map(a.key, a.fn, a.desc)
  end
  map("<Esc>", function()
    finish(r, dismiss_answer(r))
  end, "dismiss")
  local function jump(dir)
    local row = api.nvim_win_get_cursor(win)[1] - 1
    local rows = view.hunk_rows
    if dir > 0 then
      for _, h in ipairs(rows) do
        if h > row then
          return api.nvim_win_set_cursor(win, { h + 1, 0 })
        end
      end
    else
      for i = #rows, 1, -1 do
        if rows[i] < row then
          return api.nvim_win_set_cursor(win, { rows[i] + 1, 0 })
        end
      end
    end
  end
  map(k.next_hunk, function()
    jump(1)
  end, "next hunk")
  map(k.prev_hunk, function()
    jump(-1)
  end, "previous hunk")
  -- Leaving the float some other way (:q, a window command) dismisses it.
  api.nvim_create_autocmd("WinClosed", {
    pattern = tostring(win),
    once = true,
    callback = function()
      if r.win == win and not r.answered then
        r.win = nil
        vim.schedule(function()
          finish(r, dismiss_answer(r))
        end)
      end
    end,
  })
end

show_next = function()
  if showing then
    return
  end
  local r = table.remove(queue, 1)
  if not r then
    return
  end
  showing = r
  local ok, err = pcall(open_float, r)
  if not ok then
    vim.notify("mia: the review could not be shown (" .. tostring(err) .. "); the edit is rejected", vim.log.levels.ERROR)
    finish(r, dismiss_answer(r))
  end
end

--- The diff float's lines (for tests and statuslines), or nil.
function M.showing_lines()
  if showing and showing.buf and api.nvim_buf_is_valid(showing.buf) then
    return api.nvim_buf_get_lines(showing.buf, 0, -1, false)
  end
  return nil
end

-- ---------------------------------------------------------------------------
-- Hunks mode

--- @type table<integer, table[]> pending hunks by buffer
local pending = {}

local function real_name(b)
  local name = api.nvim_buf_get_name(b)
  if name == "" then
    return nil
  end
  return vim.fn.resolve(vim.fn.fnamemodify(name, ":p"))
end

--- The buffer of `path`, loaded, and shown in a window that is not the chat.
local function target_buffer(path)
  local want = vim.fn.resolve(vim.fn.fnamemodify(path, ":p"))
  local buf
  for _, b in ipairs(api.nvim_list_bufs()) do
    if api.nvim_buf_is_loaded(b) and real_name(b) == want then
      buf = b
      break
    end
  end
  if not buf then
    buf = vim.fn.bufadd(path)
    vim.fn.bufload(buf)
    vim.bo[buf].buflisted = true
  end
  local chat = chat_win()
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

local set_keymaps, clear_keymaps

--- Answers a request whose hunks are all resolved.
local function settle(req)
  local accepted = {}
  for _, h in ipairs(req.hunks) do
    if h.state == "accepted" then
      accepted[#accepted + 1] = h
    end
  end
  if #accepted == #req.hunks then
    -- the buffer now holds the new text: its final newline too
    local b = req.hunks[1].buf
    if req.new_text ~= "" and api.nvim_buf_is_valid(b) then
      vim.bo[b].eol = req.new_text:sub(-1) == "\n"
    end
    reply(req.call, "allow_once")
  elseif #accepted == 0 then
    reply(req.call, "reject_once")
  else
    -- the old text with exactly the accepted hunks applied
    local a, b = req.old_lines, req.new_lines
    local out = {}
    local cursor = 1
    for _, h in ipairs(accepted) do
      local upto = h.a_count > 0 and h.a_start - 1 or h.a_start
      for i = cursor, upto do
        out[#out + 1] = a[i]
      end
      for i = 0, h.b_count - 1 do
        out[#out + 1] = b[h.b_start + i]
      end
      cursor = upto + h.a_count + 1
    end
    for i = cursor, #a do
      out[#out + 1] = a[i]
    end
    local eol = req.old_text == "" and req.new_text:sub(-1) == "\n" or req.old_text:sub(-1) == "\n"
    local content = table.concat(out, "\n")
    if #out > 0 and eol then
      content = content .. "\n"
    end
    reply(req.call, "allow_once", { content = content })
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
    if h.req.old_text == "" and api.nvim_buf_line_count(b) == 1 and api.nvim_buf_get_lines(b, 0, 1, false)[1] == "" then
      api.nvim_buf_set_lines(b, 0, -1, false, h.b_lines)
    else
      api.nvim_buf_set_lines(b, start, start + count, false, h.b_lines)
    end
    vim.bo[b].modifiable = was
  end
  h.state = accept and "accepted" or "rejected"
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
  local best, dist
  for _, h in ipairs(pending[b] or {}) do
    local start, count = position(h)
    if start then
      local last = start + math.max(count, 1) - 1
      local d = row < start and start - row or (row > last and row - last or 0)
      if not dist or d < dist then
        best, dist = h, d
      end
    end
  end
  return best
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
  local target
  if dir > 0 then
    for _, r in ipairs(rows) do
      if r > row then
        target = r
        break
      end
    end
    target = target or rows[1]
  else
    for i = #rows, 1, -1 do
      if rows[i] < row then
        target = rows[i]
        break
      end
    end
    target = target or rows[#rows]
  end
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
  local k = keys()
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
  local k = keys()
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

--- Places the proposal of `r` in its buffer as pending hunks; false when
--- the buffer's text is not what the proposal was computed from.
local function place_hunks(r)
  local old_text = r.diff.oldText ~= vim.NIL and r.diff.oldText or ""
  local b, win = target_buffer(r.diff.path)
  if buffer_text(b) ~= old_text then
    return false
  end
  local hunks = M.hunks(old_text, r.diff.newText)
  local old_lines, new_lines = M.lines_of(old_text), M.lines_of(r.diff.newText)
  local meta = meta_of(r.data)
  local req = {
    call = r.call,
    tool = type(meta.tool) == "string" and meta.tool or "an edit",
    old_text = old_text,
    new_text = r.diff.newText,
    old_lines = old_lines,
    new_lines = new_lines,
    hunks = {},
  }
  if #hunks == 0 then
    reply(r.call, "allow_once")
    return true
  end
  local width = math.max(20, api.nvim_win_get_width(win))
  for i, hk in ipairs(hunks) do
    local a_start, a_count, b_start, b_count = hk[1], hk[2], hk[3], hk[4]
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
        end_col = #(old_lines[a_start + a_count - 1] or ""),
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
      type(meta.subject) == "string" and meta.subject or r.diff.path,
      keys().next_hunk or "",
      keys().prev_hunk or "",
      keys().accept_hunk or "",
      keys().reject_hunk or ""
    ),
    vim.log.levels.INFO
  )
  return true
end

--- Every pending hunk (for tests and statuslines): `{ buf, lnum, old, new }`.
function M.pending()
  local out = {}
  for _, h in ipairs(all_pending()) do
    out[#out + 1] = { buf = h.buf, lnum = (position(h) or 0) + 1, old = h.a_count, new = h.b_lines }
  end
  return out
end

-- ---------------------------------------------------------------------------
-- Checkpoints: :Mia checkpoints and :Mia undo

--- The chat's session id, or nil (an error) when it has none yet.
local function session_or_error(what)
  local chat = require("mia.chat")
  if not chat.has_messages() then
    error("mia: " .. what .. ": the chat has no session yet (send a prompt first, or resume one with :Mia sessions)", 0)
  end
  return chat.session_id()
end

local CHANGE = { modified = "M", created = "A", deleted = "D" }

--- The lines of `:Mia checkpoints` for `list` (newest first).
function M.checkpoint_lines(list)
  local lines = { "Checkpoints of this session, newest first (:Mia undo restores the newest)", "" }
  if #list == 0 then
    lines[#lines + 1] = "No checkpoints: no turn of this session changed a file."
  end
  for _, cp in ipairs(list) do
    local when = type(cp.created_ms) == "number" and os.date("%Y-%m-%d %H:%M:%S", math.floor(cp.created_ms / 1000)) or "?"
    local prompt = type(cp.prompt) == "string" and cp.prompt or ""
    local what = cp.kind == "restore" and ("restore (:Mia undo) of “" .. prompt .. "”") or ("turn “" .. prompt .. "”")
    lines[#lines + 1] = string.format("#%s  %s  %s", tostring(cp.id), when, what)
    for _, f in ipairs(cp.files or {}) do
      lines[#lines + 1] = string.format("    %s %s  (%s)", CHANGE[f.change] or "?", tostring(f.path), tostring(f.by))
    end
    for _, gap in ipairs(cp.uncovered or {}) do
      lines[#lines + 1] = "    ! not covered: " .. tostring(gap)
    end
  end
  return lines
end

local function show_lines(lines, title)
  local buf = api.nvim_create_buf(false, true)
  vim.bo[buf].bufhidden = "wipe"
  api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].filetype = "mia-checkpoints"
  local win = require("mia.float").open(buf, title, { max_width = 110, height = #lines, min_height = 3 })
  return buf, win
end

local function message_of(err)
  local msg = type(err) == "table" and err.message or tostring(err)
  msg = tostring(msg)
  return msg:match("^mia: ") and msg or ("mia: " .. msg)
end

--- `:Mia checkpoints`: the session's turns with the files each touched.
function M.checkpoints()
  local id = session_or_error("no checkpoints")
  require("mia")._job("checkpoints", function(err, list)
    if err then
      vim.notify(message_of(err), vim.log.levels.ERROR)
      return
    end
    show_lines(M.checkpoint_lines(type(list) == "table" and list or {}), " mia checkpoints ")
  end, id)
end

--- Reloads the buffers of restored files: unmodified ones are read again
--- (`:edit!`, undoable), deleted ones wiped; modified ones are named.
local function reload(restored)
  local kept = {}
  for _, f in ipairs(restored) do
    local want = vim.fn.resolve(vim.fn.fnamemodify(tostring(f.path), ":p"))
    for _, b in ipairs(api.nvim_list_bufs()) do
      if api.nvim_buf_is_loaded(b) and real_name(b) == want then
        if vim.bo[b].modified then
          kept[#kept + 1] = vim.fn.fnamemodify(want, ":.")
        elseif f.deleted then
          pcall(api.nvim_buf_delete, b, { force = true })
        else
          pcall(api.nvim_buf_call, b, function()
            vim.cmd("silent edit!")
          end)
        end
      end
    end
  end
  return kept
end

--- `:Mia undo`: puts back the files of the session's newest checkpoint (a
--- restore is a checkpoint too: undo again undoes it).
function M.undo()
  local id = session_or_error("nothing to undo")
  require("mia")._job("checkpoint_undo", function(err, result)
    if err then
      vim.notify(message_of(err), vim.log.levels.ERROR)
      return
    end
    local restored = type(result) == "table" and result.restored or {}
    local skipped = type(result) == "table" and result.skipped or {}
    local uncovered = type(result) == "table" and result.uncovered or {}
    local kept = reload(restored)
    local names = {}
    for _, f in ipairs(restored) do
      names[#names + 1] = vim.fn.fnamemodify(tostring(f.path), ":.") .. (f.deleted and " (deleted)" or "")
    end
    local lines = {
      string.format(
        "mia: restored %d file%s from turn #%s%s (:Mia undo again undoes this)",
        #restored,
        #restored == 1 and "" or "s",
        tostring(result.checkpoint),
        #names > 0 and (": " .. table.concat(names, ", ")) or ""
      ),
    }
    for _, s in ipairs(skipped) do
      lines[#lines + 1] = string.format("  not restored: %s (%s)", vim.fn.fnamemodify(tostring(s.path), ":."), tostring(s.reason))
    end
    local since = type(result) == "table" and result.changed_since or {}
    if #since > 0 then
      local shown = {}
      for _, p in ipairs(since) do
        shown[#shown + 1] = vim.fn.fnamemodify(tostring(p), ":.")
      end
      lines[#lines + 1] = "  changed after the turn (saved since), so undo replaced those changes too (:Mia undo again "
        .. "brings them back): "
        .. table.concat(shown, ", ")
    end
    for _, what in ipairs(uncovered) do
      lines[#lines + 1] = "  not covered by the checkpoint, so not restored: " .. tostring(what)
    end
    if #kept > 0 then
      lines[#lines + 1] = "  these buffers have unsaved changes and still show them (:edit! to load the restored file): "
        .. table.concat(kept, ", ")
    end
    local warn = #skipped > 0 or #kept > 0 or #uncovered > 0 or #since > 0
    vim.notify(table.concat(lines, "\n"), warn and vim.log.levels.WARN or vim.log.levels.INFO)
  end, id)
end

-- ---------------------------------------------------------------------------

--- Closes every review still open when the chat's answer ended (stopped,
--- failed): nobody waits for their answers any more.
local function drop_stale()
  local dropped = #queue
  for _, r in ipairs(queue) do
    r.answered = true
  end
  queue = {}
  if showing then
    local r = showing
    showing = nil
    r.answered = true
    dropped = dropped + 1
    close_float(r)
    if r.proposal and api.nvim_buf_is_valid(r.proposal) then
      pcall(api.nvim_buf_delete, r.proposal, { force = true })
    end
  end
  for b, list in pairs(pending) do
    for _, h in ipairs(list) do
      h.state = "dropped"
      pcall(api.nvim_buf_del_extmark, b, hunk_ns, h.mark)
      if h.virt then
        pcall(api.nvim_buf_del_extmark, b, hunk_ns, h.virt)
      end
    end
    dropped = dropped + #list
    clear_keymaps(b)
  end
  pending = {}
  if vim.fn.getqflist({ title = 0 }).title == "mia: pending hunks" then
    M.quickfix(false)
  end
  if dropped > 0 then
    vim.notify("mia: the answer ended; its pending review was closed and nothing was written", vim.log.levels.WARN)
  end
end

local watching = false

local function watch_answer_end()
  if not watching then
    watching = true
    api.nvim_create_autocmd("User", {
      group = api.nvim_create_augroup("mia_review", { clear = true }),
      pattern = "MiaAnswerEnd",
      callback = drop_stale,
      desc = "mia: close reviews nobody waits for",
    })
  end
end

--- Reviews the edit in permission request `data` (call `call`).
function M.ask(call, data, diff)
  watch_answer_end()
  local r = { call = call, data = data, diff = diff }
  if config().review == "hunks" then
    local ok, placed = pcall(place_hunks, r)
    if ok and placed then
      return
    end
    if not ok then
      vim.notify("mia: the hunks could not be placed (" .. tostring(placed) .. "); showing the diff", vim.log.levels.WARN)
    end
  end
  queue[#queue + 1] = r
  show_next()
end

-- ---------------------------------------------------------------------------
-- External agents: their permission request carries the diff, and the
-- review's keys answer with the agent's own options, matched by ACP kind.

--- The review key that answers with each ACP option kind.
local KEY_OF_KIND = { allow_once = "accept", allow_always = "accept_always", reject_once = "reject" }

--- The agent's options by the review key that answers with them: `{
--- accept = <allow_once>, accept_always = <allow_always>, reject =
--- <reject_once, or reject_always when it is the only reject> }`, each
--- absent when the agent does not offer it. nil and the reason when an
--- option would have no key (an unknown kind, two options of one kind,
--- both reject kinds): the plain picker asks then.
--- @return table|nil, string|nil
function M.agent_choices(options)
  if type(options) ~= "table" or #options == 0 then
    return nil, "no options"
  end
  local by_kind = {}
  for _, o in ipairs(options) do
    if type(o) ~= "table" or type(o.optionId) ~= "string" or type(o.kind) ~= "string" then
      return nil, "an option without an id or a kind"
    end
    if by_kind[o.kind] then
      return nil, "two options of kind " .. o.kind
    end
    by_kind[o.kind] = o
  end
  local choices = {}
  for kind, o in pairs(by_kind) do
    local key = KEY_OF_KIND[kind]
    if kind == "reject_always" and not by_kind.reject_once then
      key = "reject"
    end
    if not key then
      return nil, "no key for the kind " .. kind
    end
    choices[key] = o
  end
  return choices
end

--- Reviews external agent `agent`'s permission request `data` (call
--- `call`) whose tool call carries `diff`, in the diff float (also with
--- `review = "hunks"`: the agent writes the file itself and takes one
--- answer for the whole edit). False, and nothing shown, when the agent's
--- options do not map to the review's keys.
function M.ask_agent(call, data, diff, agent)
  local choices = M.agent_choices(data.options)
  if not choices then
    return false
  end
  watch_answer_end()
  queue[#queue + 1] = { call = call, data = data, diff = diff, agent = { name = tostring(agent), choices = choices } }
  show_next()
  return true
end

--- A float's title or footer as text ([text, hl] chunks joined).
local function frame_text(v)
  if type(v) ~= "table" then
    return v
  end
  return table.concat(vim.tbl_map(function(chunk)
    return chunk[1]
  end, v))
end

--- The title and footer of the diff float on screen (for tests), or nil.
function M.showing_frame()
  if showing and showing.win and api.nvim_win_is_valid(showing.win) then
    local cfg = api.nvim_win_get_config(showing.win)
    return { title = frame_text(cfg.title), footer = frame_text(cfg.footer) }
  end
  return nil
end

return M
