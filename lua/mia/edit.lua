--- `:[range]Mia edit {instruction}` (|mia-edit|): the model rewrites lines of
--- the current buffer. The answer streams into the buffer as a preview of
--- pending hunks (extmarks and virtual lines: the buffer's text does not
--- change), and when it ends it is staged as pending hunks, reviewed like
--- any staged edit (`review = "hunks"`: the hunk keys, `:Mia review`).
---
--- The request goes through the core (`edit_stream`): the deny rules, the
--- rules files, the mentions' files, the budgets, the transform hooks and
--- the usage row (agent "edit", the chat's session) are the core's, as for
--- every call.

local M = {}

local api = vim.api
local ns = api.nvim_create_namespace("mia_edit")

--- Lines of context on each side of the range sent with it (the core
--- keeps at most 50 lines and 8 KiB a side).
M.CONTEXT_LINES = 50

--- Filetypes whose text is prose: an answer in sentences is a replacement there.
local PROSE = { markdown = true, text = true, gitcommit = true, rst = true, tex = true, help = true, [""] = true }

--- The edits in flight (streaming), by buffer.
--- @type table<integer, table>
local active = {}

--- Timings of the last edit (for the benchmark): `first_delta_ns`,
--- `first_shown_ns` (hrtime), `frames`, `frame_ns` (the preview's cost).
M.last_timing = nil

local function notify(msg, level)
  vim.notify(msg, level or vim.log.levels.INFO)
end

--- The replacement lines in an answer, and whether it holds one. Prose or
--- a fenced code block around the replacement is stripped: with a fence,
--- its content is the replacement (an unclosed fence while streaming: all
--- after it). Without one, the whole answer is, unless it is empty or
--- (outside prose files) every line reads as a sentence ("I cannot …").
--- `partial`: the answer is still streaming (an unfinished fence is fine).
--- @param text string
--- @param filetype string
--- @param partial? boolean
--- @return string[]|nil
function M.extract(text, filetype, partial)
  text = text:gsub("\r\n", "\n")
  local lines = vim.split(text, "\n", { plain = true })
  local open
  for i, l in ipairs(lines) do
    if l:match("^%s*```") or l:match("^%s*~~~") then
      open = i
      break
    end
  end
  local body
  if open then
    local close
    for i = open + 1, #lines do
      if lines[i]:match("^%s*```%s*$") or lines[i]:match("^%s*~~~%s*$") then
        close = i
        break
      end
    end
    body = vim.list_slice(lines, open + 1, (close or #lines + 1) - 1)
    if not close and partial and #body > 0 and lines[#lines]:match("^%s*`+$") then
      body[#body] = nil -- the closing fence, arriving
    end
  else
    if partial and text:match("^%s*`*$") then
      return {} -- maybe a fence, arriving
    end
    body = lines
  end
  if not partial and body[#body] == "" then
    body[#body] = nil
  end
  if not open and not partial then
    local any = false
    local sentences = true
    for _, l in ipairs(body) do
      if l:match("%S") then
        any = true
        local words = select(2, l:gsub("%S+", ""))
        if not (l:match("^%s*[%u][%w',]*%s") and l:match("[%.!%?:]%s*$") and words >= 3) then
          sentences = false
        end
      end
    end
    if not any or (sentences and not PROSE[filetype or ""]) then
      return nil
    end
  end
  return body
end

--- The range an edit without one rewrites: the innermost function or
--- method around the cursor when a treesitter parser exists for the
--- buffer, else the paragraph (the non-blank lines) around the cursor.
--- 1-based first and last line, or nil.
--- @param b integer
--- @return integer?, integer?
function M.default_range(b)
  local row = api.nvim_win_get_cursor(0)[1] - 1
  local ok, node = pcall(function()
    local ok_parser, parser = pcall(vim.treesitter.get_parser, b)
    if not ok_parser or not parser then
      return nil
    end
    parser:parse()
    local col = #(api.nvim_get_current_line():match("^%s*"))
    return vim.treesitter.get_node({ bufnr = b, pos = { row, col } })
  end)
  if ok and node then
    while node do
      local t = node:type()
      if
        (t:find("function") or t:find("method") or t == "lambda" or t == "closure_expression")
        and not (t:find("call") or t:find("name") or t:find("param") or t:find("body") or t:find("type") or t:find("signature"))
      then
        local s, _, e, ecol = node:range()
        if ecol == 0 and e > s then
          e = e - 1
        end
        return s + 1, e + 1
      end
      node = node:parent()
    end
  end
  local lines = api.nvim_buf_get_lines(b, 0, -1, false)
  if not lines[row + 1] or not lines[row + 1]:match("%S") then
    return nil
  end
  local s, e = row + 1, row + 1
  while s > 1 and lines[s - 1]:match("%S") do
    s = s - 1
  end
  while e < #lines and lines[e + 1]:match("%S") do
    e = e + 1
  end
  return s, e
end

local function range_rows(ed)
  local m = api.nvim_buf_get_extmark_by_id(ed.buf, ns, ed.mark, { details = true })
  if not m[1] then
    return nil
  end
  return m[1], m[3].end_row
end

--- True while the range's lines are what the edit was asked about.
local function intact(ed)
  if not api.nvim_buf_is_valid(ed.buf) then
    return false
  end
  local s, e = range_rows(ed)
  if not s or e - s + 1 ~= #ed.old then
    return false
  end
  local now = api.nvim_buf_get_lines(ed.buf, s, e + 1, false)
  for i, l in ipairs(ed.old) do
    if now[i] ~= l then
      return false
    end
  end
  return true
end

local function clear_preview(ed)
  if api.nvim_buf_is_valid(ed.buf) then
    for _, id in ipairs(ed.preview or {}) do
      pcall(api.nvim_buf_del_extmark, ed.buf, ns, id)
    end
  end
  ed.preview = {}
end

local function restore_key(ed)
  if not ed.key_set then
    return
  end
  ed.key_set = false
  if api.nvim_buf_is_valid(ed.buf) then
    pcall(vim.keymap.del, "n", "<C-c>", { buffer = ed.buf })
    if ed.hidden_key then
      pcall(api.nvim_buf_call, ed.buf, function()
        vim.fn.mapset("n", false, ed.hidden_key)
      end)
    end
  end
end

--- Ends edit `ed`'s streaming part: its preview, anchor, key and watch go.
local function finish(ed)
  if active[ed.buf] == ed then
    active[ed.buf] = nil
  end
  ed.done = true
  clear_preview(ed)
  restore_key(ed)
  if api.nvim_buf_is_valid(ed.buf) then
    pcall(api.nvim_buf_del_extmark, ed.buf, ns, ed.mark)
  end
end

--- Drops edit `ed` (its lines changed, the user stopped it): the stream
--- is cancelled, the buffer is as it was.
local function abandon(ed, msg, level)
  if ed.done then
    return
  end
  finish(ed)
  ed.abandoned = true
  if ed.handle then
    pcall(ed.handle.cancel, ed.handle)
  end
  notify(msg, level)
end

local function refused(ed)
  abandon(
    ed,
    "mia: the lines being edited changed while the answer streamed: the proposal was dropped; your text is as you left it",
    vim.log.levels.WARN
  )
end

--- Draws the answer so far in the range's place: the range's lines
--- marked as removed and the new lines as virtual lines under them, like
--- pending hunks. At most once per frame (the bridge delivers a frame's
--- text as one delta).
local function render(ed)
  local t0 = vim.uv.hrtime()
  if not intact(ed) then
    refused(ed)
    return
  end
  local lines = M.extract(ed.text, ed.filetype, true) or {}
  clear_preview(ed)
  local s, e = range_rows(ed)
  local b = ed.buf
  local ts = vim.bo[b].tabstop
  local old_text = table.concat(ed.old, "\n") .. "\n"
  local new_text = #lines > 0 and (table.concat(lines, "\n") .. "\n") or ""
  local hunks = require("mia.review.diff").hunks(old_text, new_text)
  local width = ed.width
  -- A line's padded chunk, made once: most lines are the same next frame.
  local cache, next_cache = ed.virt_cache or {}, {}
  local function chunk(line)
    local c = cache[line] or next_cache[line]
    if not c then
      local shown = line:gsub("\t", string.rep(" ", ts))
      c = { { shown .. string.rep(" ", math.max(0, width - api.nvim_strwidth(shown))), "DiffAdd" } }
    end
    next_cache[line] = c
    return c
  end
  for _, hk in ipairs(hunks) do
    local a_start, a_count, b_start, b_count = hk[1], hk[2], hk[3], hk[4]
    local virt = {}
    for j = 0, b_count - 1 do
      virt[#virt + 1] = chunk(lines[b_start + j])
    end
    if a_count > 0 then
      local first = s + a_start - 1
      local last = first + a_count - 1
      ed.preview[#ed.preview + 1] = api.nvim_buf_set_extmark(b, ns, first, 0, {
        end_row = last,
        end_col = #(ed.old[a_start + a_count - 1] or ""),
        hl_group = "DiffDelete",
        hl_eol = true,
        sign_text = "-",
        sign_hl_group = "DiffDelete",
      })
      if #virt > 0 then
        ed.preview[#ed.preview + 1] = api.nvim_buf_set_extmark(b, ns, last, 0, { virt_lines = virt })
      end
    elseif #virt > 0 then
      local above = a_start == 0
      ed.preview[#ed.preview + 1] = api.nvim_buf_set_extmark(b, ns, above and s or s + a_start - 1, 0, {
        virt_lines = virt,
        virt_lines_above = above,
        sign_text = "+",
        sign_hl_group = "DiffAdd",
      })
    end
  end
  ed.virt_cache = next_cache
  -- A line under the range says it is still coming.
  ed.preview[#ed.preview + 1] = api.nvim_buf_set_extmark(b, ns, e, 0, {
    virt_lines = { { { "mia: editing… (<C-c> or :Mia stop cancels)", "Comment" } } },
  })
  local t1 = vim.uv.hrtime()
  local timing = ed.timing
  if not timing.first_shown_ns and #lines > 0 then
    timing.first_shown_ns = t1
  end
  timing.frames = timing.frames + 1
  timing.frame_ns[#timing.frame_ns + 1] = t1 - t0
end

--- `model`: the model asked, named when it has no price (as the chat's
--- footer does: the $0.00 reports count, never a bare $0.00 that reads as free).
local function cost_text(done, model)
  local costs = require("mia.costs")
  local u = done.usage or {}
  local money
  if type(done.cost) == "table" and done.cost.known and done.cost.total_usd then
    money = costs.usd(done.cost.total_usd)
  else
    money = string.format("$0.00 (no price for %s: add it to setup's `pricing`)", tostring(model or "this model"))
  end
  return string.format(
    "%s%s in, %s%s out, %s",
    u.estimated and "~" or "",
    costs.int(u.input_tokens or 0),
    u.estimated and "~" or "",
    costs.int(u.output_tokens or 0),
    money
  )
end

--- The answer ended: its replacement is staged as pending hunks.
local function on_done(ed, done)
  if ed.done then
    return
  end
  if not intact(ed) then
    refused(ed)
    return
  end
  local s = range_rows(ed)
  finish(ed)
  local cost = cost_text(done, ed.model)
  M.last_cost = cost
  local lines = M.extract(done.text or ed.text, ed.filetype, false)
  if not lines then
    local said = vim.trim((done.text or ""):gsub("%s+", " "))
    if #said > 120 then
      said = said:sub(1, 117) .. "…"
    end
    notify(
      string.format(
        "mia: the answer held no replacement, so nothing changed%s (%s)",
        said ~= "" and (": “" .. said .. "”") or "",
        cost
      ),
      vim.log.levels.WARN
    )
    return
  end
  if ed.cr then
    for i, l in ipairs(lines) do
      lines[i] = l .. "\r"
    end
  end
  local req = require("mia.review.hunks").stage(ed.buf, s, ed.old, lines, {
    tool = "mia edit",
    subject = ed.name,
    win = ed.win,
    on_settle = function(accepted, total)
      notify(string.format("mia: edit reviewed: %d of %d hunk%s accepted", accepted, total, total == 1 and "" or "s"))
    end,
  })
  if not req then
    notify("mia: the edit changes nothing (" .. cost .. ")")
    return
  end
  notify("mia: edit ready (" .. cost .. ")")
end

--- Starts an edit of lines `first`..`last` (1-based) of buffer `b`.
local function start(b, first, last, instruction)
  if active[b] then
    error("mia: an edit is already streaming in this buffer; wait for it or cancel it (<C-c>, :Mia stop)", 0)
  end
  local name = api.nvim_buf_get_name(b)
  local path = name ~= "" and vim.fn.fnamemodify(name, ":.") or nil
  local old = api.nvim_buf_get_lines(b, first - 1, last, false)
  local cr = #old > 0
  for _, l in ipairs(old) do
    if l:sub(-1) ~= "\r" then
      cr = false
    end
  end
  local before = api.nvim_buf_get_lines(b, math.max(0, first - 1 - M.CONTEXT_LINES), first - 1, false)
  local after = api.nvim_buf_get_lines(b, last, last + M.CONTEXT_LINES, false)
  local diagnostics = {}
  for _, d in ipairs(vim.diagnostic.get(b)) do
    if d.lnum >= first - 1 and d.lnum <= last - 1 then
      local sev = vim.diagnostic.severity[d.severity] or "?"
      diagnostics[#diagnostics + 1] = string.format("line %d: %s: %s", d.lnum + 1, tostring(sev):lower(), d.message)
    end
  end
  local win = api.nvim_get_current_win()
  local ed = {
    buf = b,
    win = win,
    old = old,
    cr = cr,
    text = "",
    name = path or ("buffer " .. b),
    filetype = vim.bo[b].filetype,
    width = math.max(20, api.nvim_win_get_width(win)),
    preview = {},
    timing = { frames = 0, frame_ns = {} },
  }
  M.last_timing = ed.timing
  ed.mark = api.nvim_buf_set_extmark(b, ns, first - 1, 0, {
    end_row = last - 1,
    end_col = #old[#old],
    right_gravity = true,
    end_right_gravity = false,
  })
  active[b] = ed
  -- <C-c> in the buffer cancels while the answer streams.
  local ok, old_map = pcall(api.nvim_buf_call, b, function()
    return vim.fn.maparg("<C-c>", "n", false, true)
  end)
  if ok and type(old_map) == "table" and old_map.buffer == 1 then
    ed.hidden_key = old_map
  end
  vim.keymap.set("n", "<C-c>", function()
    M.stop(b)
  end, { buffer = b, desc = "mia: cancel the edit" })
  ed.key_set = true
  -- An edit inside the range refuses the proposal at once (checked on
  -- the main loop, not inside the change).
  api.nvim_buf_attach(b, false, {
    on_lines = function(_, _, _, firstline, _, new_last)
      if ed.done then
        return true
      end
      local s, e = range_rows(ed)
      if s and (new_last < s or firstline > e) then
        return
      end
      if not ed.check_scheduled then
        ed.check_scheduled = true
        vim.schedule(function()
          ed.check_scheduled = false
          if not ed.done and not intact(ed) then
            refused(ed)
          end
        end)
      end
    end,
  })
  local spec = {
    instruction = instruction,
    model = require("mia.config").get().model,
    cwd = vim.fn.getcwd(),
    path = path,
    filetype = ed.filetype,
    first_line = first,
    selection = cr and vim.tbl_map(function(l)
      return (l:gsub("\r$", ""))
    end, old) or old,
    before = before,
    after = after,
    diagnostics = diagnostics,
  }
  ed.model = spec.model
  local function send(mentioned, attachments)
    if ed.done then
      return
    end
    spec.mentioned = mentioned
    spec.attachments = attachments or {}
    local core = require("mia.api")._core()
    local chat = require("mia.chat")
    spec.mode = chat.mode()
    local session_ok, session_id = pcall(chat.session_id)
    local native = require("mia.core").call(core.edit_stream, spec, {
      agent = "edit",
      session_id = session_ok and session_id or nil,
      utc_offset_s = require("mia.costs").utc_offset(),
    })
    ed.handle = require("mia.api")._handle_of(native)
    local hooks = require("mia.hooks")
    local post = hooks.has("post_response")
    local info = post and hooks.info(spec.model) or nil
    require("mia.bridge").watch(native.id, {
      on_mia = function(ev)
        if ev.type == "warning" then
          notify(ev.text, vim.log.levels.WARN)
        end
      end,
      on_delta = function(delta)
        if ed.done or delta.type ~= "text" then
          return
        end
        if not ed.timing.first_delta_ns then
          ed.timing.first_delta_ns = vim.uv.hrtime()
        end
        ed.text = ed.text .. delta.text
        render(ed)
      end,
      on_done = function(done)
        if post then
          done = hooks.run("post_response", done, info)
        end
        on_done(ed, done)
      end,
      on_error = function(err)
        if ed.done then
          return
        end
        finish(ed)
        if err.class == "cancelled" then
          notify("mia: the edit was cancelled; the buffer is as it was")
        else
          notify(tostring(err.message or err), vim.log.levels.ERROR)
        end
      end,
    })
  end
  -- A failure to start (no core, a bad argument) leaves nothing behind.
  local function send_or_finish(mentioned, attachments)
    local sent, err = pcall(send, mentioned, attachments)
    if not sent then
      finish(ed)
      error(err, 0)
    end
  end
  if not instruction:find("@", 1, true) then
    send_or_finish(nil, nil)
    return
  end
  require("mia.mentions").expand(instruction, function(err, mentioned, attachments)
    if err then
      finish(ed)
      notify("mia: " .. err .. " (the edit was not sent)", vim.log.levels.ERROR)
      return
    end
    send_or_finish(mentioned, attachments)
  end)
end

--- Edits lines `opts.line1`..`opts.line2` (with `opts.range` > 0), else
--- the function or paragraph at the cursor, as `instruction` says
--- (asked for with |vim.ui.input()| when empty).
--- @param instruction? string
--- @param opts? { range?: integer, line1?: integer, line2?: integer, buf?: integer }
function M.edit(instruction, opts)
  opts = opts or {}
  local b = opts.buf or api.nvim_get_current_buf()
  if vim.bo[b].buftype ~= "" then
    error("mia: :Mia edit works on a file's buffer, not this one (" .. vim.bo[b].buftype .. ")", 0)
  end
  local first, last
  if opts.range and opts.range > 0 then
    first, last = opts.line1, opts.line2
  else
    first, last = M.default_range(b)
    if not first then
      error("mia: nothing to edit at the cursor (a blank line): select lines or give a range", 0)
    end
  end
  if instruction and vim.trim(instruction) ~= "" then
    start(b, first, last, vim.trim(instruction))
    return
  end
  vim.ui.input({ prompt = string.format("mia edit (lines %d-%d): ", first, last) }, function(text)
    if not text or vim.trim(text) == "" then
      return
    end
    local ok, err = pcall(start, b, first, last, vim.trim(text))
    if not ok then
      notify(tostring(err), vim.log.levels.ERROR)
    end
  end)
end

--- Cancels the edits streaming (in buffer `b`, or all); whether there was one.
--- @param b? integer
--- @return boolean
function M.stop(b)
  local any = false
  for buf, ed in pairs(active) do
    if not b or buf == b then
      any = true
      abandon(ed, "mia: the edit was cancelled; the buffer is as it was")
    end
  end
  return any
end

--- Whether an edit streams (in buffer `b`, or any).
function M.streaming(b)
  if b then
    return active[b] ~= nil
  end
  return next(active) ~= nil
end

return M
