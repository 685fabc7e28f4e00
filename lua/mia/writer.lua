--- The one buffer writer: every piece of text that reaches a mia buffer goes
--- through `append`, and `flush` applies what is pending with one
--- nvim_buf_set_text per buffer. Fewer buffer changes is what keeps the
--- editor fast while an answer streams (each change wakes treesitter,
--- syntax, redraw and every plugin attached to the buffer).

local M = {}

local api = vim.api

--- @type table<integer, { text: string[], hl: table<integer, string> }> pending text per buffer;
--- `hl[i]` is the highlight group of piece `i`, if it has one
local pending = {}
local ns = vim.api.nvim_create_namespace("mia_writer")
--- @type table<integer, {tick: integer, row: integer, col: integer}> end of the buffer after our last write
local ends = {}
--- @type table<integer, { id: integer, group: string, r: integer, c: integer, er: integer, ec: integer }> the last highlight written per buffer
local marks = {}
--- bytes in the longest last line the last flush wrote into (see `pace`)
local longest = 0
--- A line longer than this costs each frame that grows it more than ~1.5 ms
--- of Neovim's redraw (see `pace`).
local LONG_LINE = 65536
--- The longest wait between two frames of streamed text: reached at a
--- 19 MB line, whose frame takes ~0.5 s of the editor's time; the share
--- then grows with the line, but a stream of that (from a broken or hostile
--- server: nothing else bounds a line) still shows it grow.
local MAX_FRAME_MS = 10000

--- Queues `text` to be appended at the end of `buf`, highlighted with `hl` if given.
--- @param buf integer
--- @param text string
--- @param hl? string
function M.append(buf, text, hl)
  if text == "" then
    return
  end
  local p = pending[buf]
  if not p then
    p = { text = {}, hl = {} }
    pending[buf] = p
  end
  p.text[#p.text + 1] = text
  if hl then
    p.hl[#p.text] = hl
  end
end

--- The position reached after writing `text` from (row, col).
local function advance(row, col, text)
  local last_nl = nil
  local start = 1
  while true do
    local nl = text:find("\n", start, true)
    if not nl then
      break
    end
    row = row + 1
    last_nl = nl
    start = nl + 1
  end
  if last_nl then
    return row, #text - last_nl
  end
  return row, col + #text
end

--- Where the buffer ends (0-based row, byte column). Reuses the position
--- recorded after our own last write when nothing else changed the buffer,
--- so a long last line is not copied out on every frame.
local function end_of(buf)
  local known = ends[buf]
  if known and known.tick == api.nvim_buf_get_changedtick(buf) then
    return known.row, known.col
  end
  marks[buf] = nil -- someone else changed the buffer: no highlight continues across that
  local row = api.nvim_buf_line_count(buf) - 1
  local line = api.nvim_buf_get_lines(buf, row, row + 1, true)[1]
  return row, #line
end

local function write(buf, pieces)
  local text = table.concat(pieces.text)
  local row, col = end_of(buf)
  -- Most frames extend one line: no split (vim.split builds an iterator).
  local lines = text:find("\n", 1, true) and vim.split(text, "\n", { plain = true }) or { text }
  -- Windows whose cursor sits on the last line follow the text onto the
  -- lines it adds (row only: moving to the end of a long wrapped line on
  -- every change is quadratic). Text that only extends the last line moves
  -- no cursor: setting one costs a pass over the whole wrapped line (its
  -- screen height), and the redraw already scrolls a window to show it.
  local follow = {}
  if #lines > 1 then
    for _, win in ipairs(vim.fn.win_findbuf(buf)) do
      if api.nvim_win_get_cursor(win)[1] == row + 1 then
        follow[#follow + 1] = win
      end
    end
  end
  local opt = { buf = buf }
  local was_modifiable = api.nvim_get_option_value("modifiable", opt)
  if not was_modifiable then
    api.nvim_set_option_value("modifiable", true, opt)
  end
  api.nvim_buf_set_text(buf, row, col, row, col, lines)
  if not was_modifiable then
    api.nvim_set_option_value("modifiable", false, opt)
  end
  local new_row = row + #lines - 1
  local new_col = #lines == 1 and col + #lines[1] or #lines[#lines]
  ends[buf] = { tick = api.nvim_buf_get_changedtick(buf), row = new_row, col = new_col }
  longest = math.max(longest, new_col)
  -- Past a long line, the view starts below it: setting the cursor alone
  -- makes Neovim measure the whole wrapped line to scroll (33 ms for a
  -- 1.4 MB line, and the redraw after it as much again).
  local past_long = col + #lines[1] > LONG_LINE
  for _, win in ipairs(follow) do
    if past_long then
      api.nvim_win_call(win, function()
        vim.fn.winrestview({ lnum = new_row + 1, col = 0, topline = row + 2 })
      end)
    else
      api.nvim_win_set_cursor(win, { new_row + 1, 0 })
    end
  end
  if next(pieces.hl) then
    local r, c = row, col
    for i, piece in ipairs(pieces.text) do
      local er, ec = advance(r, c, piece)
      local group = pieces.hl[i]
      if group then
        -- A piece that continues the previous one of the same group extends
        -- its highlight: however the text was split (streamed, or replayed
        -- whole), the buffer carries the same marks.
        local prev = marks[buf]
        if prev and prev.group == group and prev.er == r and prev.ec == c then
          api.nvim_buf_set_extmark(buf, ns, prev.r, prev.c, { id = prev.id, end_row = er, end_col = ec, hl_group = group })
          prev.er, prev.ec = er, ec
        else
          local id = api.nvim_buf_set_extmark(buf, ns, r, c, { end_row = er, end_col = ec, hl_group = group })
          marks[buf] = { id = id, group = group, r = r, c = c, er = er, ec = ec }
        end
      end
      r, c = er, ec
    end
  end
end

--- Applies all pending text: one buffer change per buffer.
function M.flush()
  longest = 0
  if next(pending) == nil then
    return
  end
  local batch = pending
  pending = {}
  for buf, parts in pairs(batch) do
    if api.nvim_buf_is_valid(buf) then
      local ok, err = pcall(write, buf, parts)
      if not ok then
        vim.notify("mia: could not write to the chat buffer: " .. tostring(err), vim.log.levels.ERROR)
      end
    end
    ends[buf] = api.nvim_buf_is_valid(buf) and ends[buf] or nil
  end
end

--- How long until the next frame of streamed text, given the core's wait
--- (`next_ms`, one frame), after a flush. Each frame redraws the line it
--- grows, and Neovim measures a wrapped line from its start every time:
--- ~24 µs per KiB on the bench's machine (`perf`: charsize_regular), so a
--- frame of a 1.4 MB line took ~34 ms, and at 30 frames a second the editor
--- spent 95% of its time redrawing and answered keys up to 35 ms late. Past
--- LONG_LINE bytes in the last line the last flush wrote into, the wait
--- grows with that line, so a stream keeps the share of the editor's time
--- it takes at LONG_LINE (~5%) whatever the line's length, up to
--- MAX_FRAME_MS. Nothing is held back for good: each frame
--- writes all the text taken, and the answer's end is drained at once.
--- @param next_ms integer
--- @return integer
function M.pace(next_ms)
  if longest <= LONG_LINE then
    return next_ms
  end
  return math.min(MAX_FRAME_MS, math.max(next_ms, math.floor(next_ms * longest / LONG_LINE)))
end

return M
