--- Where mia's floats go: centred in the editor, sized to the screen.

local M = {}

--- The position and size of a float centred in the editor: `width` up to
--- `max_width` (85% of the columns at most, `min_width` at least), height
--- `height` within `min_height` and 80% of the lines.
--- @param o { max_width: integer, min_width?: integer, height: integer, min_height?: integer }
--- @return table nvim_open_win's relative/row/col/width/height
function M.centered(o)
  local width = math.min(o.max_width, math.max(o.min_width or 1, math.floor(vim.o.columns * 0.85)))
  local height = math.max(o.min_height or 1, math.min(o.height, math.floor((vim.o.lines - vim.o.cmdheight) * 0.8)))
  return {
    relative = "editor",
    width = width,
    height = height,
    row = math.floor((vim.o.lines - height) / 2) - 1,
    col = math.floor((vim.o.columns - width) / 2),
  }
end

--- Opens `buf` in a centred, bordered float titled `title`, without wrap,
--- that `q` and `<Esc>` close. `size` is |M.centered()|'s.
--- @param buf integer
--- @param title string
--- @param size { max_width: integer, min_width?: integer, height: integer, min_height?: integer }
--- @return integer win
function M.open(buf, title, size)
  local api = vim.api
  local cfg = M.centered(size)
  cfg.style, cfg.border = "minimal", "rounded"
  cfg.title, cfg.title_pos, cfg.footer, cfg.footer_pos = title, "center", " q close ", "center"
  local win = api.nvim_open_win(buf, true, cfg)
  vim.wo[win].wrap = false
  local function close()
    if api.nvim_win_is_valid(win) then
      api.nvim_win_close(win, true)
    end
  end
  vim.keymap.set("n", "q", close, { buffer = buf, nowait = true, desc = "close" })
  vim.keymap.set("n", "<Esc>", close, { buffer = buf, nowait = true, desc = "close" })
  return win
end

return M
