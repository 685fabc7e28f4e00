--- Diff mode: the proposal's unified diff in a float (over the chat when
--- it is open) with keys to accept, accept for the file, allow always,
--- reject, edit first. One float at a time; later reviews wait their turn.
--- This module owns the queue and the review on screen.

local M = {}

local agent = require("mia.review.agent")
local diff = require("mia.review.diff")
local reply = require("mia.review.reply")
local ui = require("mia.review.ui")

local api = vim.api
local ns = api.nvim_create_namespace("mia_review")

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
  reply.send(r.call, id, extra)
  vim.schedule(show_next)
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
  local name = diff.meta_of(r.data).subject
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
  api.nvim_buf_set_lines(buf, 0, -1, false, diff.lines_of(text))
  vim.bo[buf].eol = text == "" or text:sub(-1) == "\n"
  vim.bo[buf].fixeol = false
  vim.bo[buf].modified = false
  local ft = vim.filetype.match({ filename = r.diff.path, buf = buf })
  if ft then
    vim.bo[buf].filetype = ft
  end
  -- a window that is not the chat's
  local chat = ui.chat_win()
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

--- What dismissing review `r` answers: the reject option (mia's own
--- `reject_once`; an agent's reject option, or `cancelled` without one).
local function dismiss_answer(r)
  if r.agent then
    return agent.dismiss_option(r.agent.choices)
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

--- Shows review `r` in a float (over the chat when it is open).
open_float = function(r)
  local meta = diff.meta_of(r.data)
  local name = type(meta.subject) == "string" and meta.subject or r.diff.path
  local old = r.diff.oldText ~= vim.NIL and r.diff.oldText or nil
  local view = r.view or diff.unified(name, old, r.diff.newText, r.agent and agent.notes(r.agent.name, meta) or nil)
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
  local chat = ui.chat_win()
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
  local k = ui.keys()
  local actions
  cfg.style = "minimal"
  cfg.border = "rounded"
  if r.agent then
    local where = meta.outside and " (outside the project)" or ""
    local head = string.format("%s wants to edit ", r.agent.name)
    local room = cfg.width - 2 - vim.fn.strdisplaywidth(head .. where)
    cfg.title = " " .. head .. fit(name, math.max(8, room)) .. where .. " "
    actions = agent.actions(r, k, finish)
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
    local target = diff.step(view.hunk_rows, api.nvim_win_get_cursor(win)[1] - 1, dir)
    if target then
      api.nvim_win_set_cursor(win, { target + 1, 0 })
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

--- Shows the review of `call` (permission request `data` whose tool call
--- carries `diff`; `agent`: `{ name, choices }` for an external agent's
--- edit) once the reviews before it are answered.
function M.enqueue(call, data, d, agent_of)
  queue[#queue + 1] = { call = call, data = data, diff = d, agent = agent_of }
  show_next()
end

--- Closes the float on screen and forgets the waiting reviews, answering
--- none of them (the answer they belonged to ended); how many there were.
--- @return integer
function M.drop()
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
  return dropped
end

return M
