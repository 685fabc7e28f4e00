--- The one buffer writer: every piece of text that reaches a mia buffer goes
--- through `append`, and `flush` applies what is pending with one
--- nvim_buf_set_text per buffer. Fewer buffer changes is what keeps the
--- editor fast while an answer streams (each change wakes treesitter,
--- syntax, redraw and every plugin attached to the buffer).

local M = {}

local api = vim.api

--- @type table<integer, string[]> pending text per buffer
local pending = {}
--- @type table<integer, {tick: integer, row: integer, col: integer}> end of the buffer after our last write
local ends = {}

--- Queues `text` to be appended at the end of `buf`.
--- @param buf integer
--- @param text string
function M.append(buf, text)
  if text == "" then
    return
  end
  local p = pending[buf]
  if not p then
    p = {}
    pending[buf] = p
  end
  p[#p + 1] = text
end

--- Where the buffer ends (0-based row, byte column). Reuses the position
--- recorded after our own last write when nothing else changed the buffer,
--- so a long last line is not copied out on every frame.
local function end_of(buf)
  local known = ends[buf]
  if known and known.tick == api.nvim_buf_get_changedtick(buf) then
    return known.row, known.col
  end
  local row = api.nvim_buf_line_count(buf) - 1
  local line = api.nvim_buf_get_lines(buf, row, row + 1, true)[1]
  return row, #line
end

local function write(buf, text)
  local row, col = end_of(buf)
  local lines = vim.split(text, "\n", { plain = true })
  -- Windows whose cursor sits on the last line follow the text (row only:
  -- moving to the end of a long wrapped line on every change is quadratic).
  local follow = {}
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    if api.nvim_win_get_cursor(win)[1] == row + 1 then
      follow[#follow + 1] = win
    end
  end
  local was_modifiable = vim.bo[buf].modifiable
  if not was_modifiable then
    vim.bo[buf].modifiable = true
  end
  api.nvim_buf_set_text(buf, row, col, row, col, lines)
  if not was_modifiable then
    vim.bo[buf].modifiable = false
  end
  local new_row = row + #lines - 1
  local new_col = #lines == 1 and col + #lines[1] or #lines[#lines]
  ends[buf] = { tick = api.nvim_buf_get_changedtick(buf), row = new_row, col = new_col }
  for _, win in ipairs(follow) do
    api.nvim_win_set_cursor(win, { new_row + 1, 0 })
  end
end

--- Applies all pending text: one buffer change per buffer.
function M.flush()
  if next(pending) == nil then
    return
  end
  local batch = pending
  pending = {}
  for buf, parts in pairs(batch) do
    if api.nvim_buf_is_valid(buf) then
      local ok, err = pcall(write, buf, table.concat(parts))
      if not ok then
        vim.notify("mia: could not write to the chat buffer: " .. tostring(err), vim.log.levels.ERROR)
      end
    end
    ends[buf] = api.nvim_buf_is_valid(buf) and ends[buf] or nil
  end
end

return M
