--- The review's pure parts: a proposal's diff, the unified view of it, the
--- text made of the hunks a user accepted, and where the hunks are. Nothing
--- here reads or changes windows, buffers or the config, so the unit tests
--- (tests/lua/review_diff_spec.lua) call it alone.

local M = {}

--- Lines of the context shown around each change.
local CONTEXT = 3
--- Paired -/+ lines get word-level highlights up to this many pairs and
--- this line length; beyond, the changed middle of the line is highlighted.
local MAX_WORD_PAIRS = 2000
local MAX_WORD_LINE = 2000

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

--- A permission request's `_meta.mia` (what the core says about the
--- proposal: its subject, tool, notes), or an empty table.
function M.meta_of(data)
  return type(data._meta) == "table" and type(data._meta.mia) == "table" and data._meta.mia or {}
end

--- `old_text` with exactly the `accepted` hunks of `old_text` → `new_text`
--- applied (hunks as `M.hunks` gives them, in order): what lands when a
--- user accepts some hunks and rejects the others. The old text's final
--- newline is kept (a new file takes the new text's).
--- @param accepted integer[][]
--- @return string
function M.apply(old_text, new_text, accepted)
  local a, b = M.lines_of(old_text), M.lines_of(new_text)
  local out = {}
  local cursor = 1
  for _, h in ipairs(accepted) do
    local a_start, a_count, b_start, b_count = h[1], h[2], h[3], h[4]
    local upto = a_count > 0 and a_start - 1 or a_start
    for i = cursor, upto do
      out[#out + 1] = a[i]
    end
    for i = 0, b_count - 1 do
      out[#out + 1] = b[b_start + i]
    end
    cursor = upto + a_count + 1
  end
  for i = cursor, #a do
    out[#out + 1] = a[i]
  end
  local eol = old_text == "" and new_text:sub(-1) == "\n" or old_text:sub(-1) == "\n"
  local content = table.concat(out, "\n")
  if #out > 0 and eol then
    content = content .. "\n"
  end
  return content
end

--- The index in `spans` (`{ start, count }` each, 0-based rows, a count of
--- 0 an insertion before `start`) of the span covering `row`, else of the
--- nearest one (the first of equals); nil when `spans` is empty.
--- @param spans integer[][]
--- @param row integer
--- @return integer|nil
function M.nearest(spans, row)
  local best, dist
  for i, s in ipairs(spans) do
    local start, count = s[1], s[2]
    local last = start + math.max(count, 1) - 1
    local d = row < start and start - row or (row > last and row - last or 0)
    if not dist or d < dist then
      best, dist = i, d
    end
  end
  return best
end

--- The first of the ascending `rows` after `row` (`dir` > 0) or the last
--- before it (`dir` < 0); past the end, nil, or with `wrap` the row at the
--- other end.
--- @param rows integer[]
--- @param row integer
--- @param dir integer
--- @param wrap boolean|nil
--- @return integer|nil
function M.step(rows, row, dir, wrap)
  if dir > 0 then
    for _, r in ipairs(rows) do
      if r > row then
        return r
      end
    end
    return wrap and rows[1] or nil
  end
  for i = #rows, 1, -1 do
    if rows[i] < row then
      return rows[i]
    end
  end
  return wrap and rows[#rows] or nil
end

return M
