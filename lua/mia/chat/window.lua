--- The chat's buffer and window: a markdown scratch buffer in a split.

local M = {}

local api = vim.api
local buf = nil

local function valid(b)
  return b and api.nvim_buf_is_valid(b)
end

local function create_buffer(on_stop)
  local b = api.nvim_create_buf(false, true)
  -- Not a file: naming it must not load editorconfig (and vim.fs) for nothing.
  vim.b[b].editorconfig = false
  pcall(api.nvim_buf_set_name, b, "mia://chat")
  vim.bo[b].buftype = "nofile"
  vim.bo[b].bufhidden = "hide"
  vim.bo[b].swapfile = false
  -- A streamed answer is not an edit to undo, and undo history grows with every change.
  vim.bo[b].undolevels = -1
  -- (No `chat` when the library cannot load: the buffer then only shows errors.)
  local chat = require("mia.config").get().chat or {}
  -- The lean chat syntax replaces Vim's regex markdown syntax (|mia-chat-syntax|):
  -- FileType handlers (ftplugins, the user's) run, but markdown's syntax files
  -- (html and all it includes) are not loaded only to be replaced.
  local lean = chat.syntax ~= "markdown"
  local ignored = vim.o.eventignore
  if lean then
    vim.o.eventignore = ignored == "" and "Syntax" or (ignored .. ",Syntax")
  end
  local ok, err = pcall(function()
    vim.bo[b].filetype = "markdown"
  end)
  vim.o.eventignore = ignored
  if not ok then
    error(err, 0)
  end
  if chat.synmaxcol then
    vim.bo[b].synmaxcol = chat.synmaxcol
  end
  -- Treesitter highlighting started by the user's FileType autocmd is left
  -- alone. (Its module is looked up, not required: loading vim.treesitter
  -- only to learn it highlights nothing took ~3 ms of the first prompt.)
  local ts = package.loaded["vim.treesitter.highlighter"]
  if lean and chat.syntax and not (ts and ts.active[b]) then
    vim.bo[b].syntax = chat.syntax
  end
  vim.keymap.set("n", "<C-c>", on_stop, { buffer = b, desc = "mia: stop the answer" })
  return b
end

--- The chat buffer (created on first use; `<C-c>` in it calls `on_stop`).
function M.buffer(on_stop)
  if not valid(buf) then
    buf = create_buffer(on_stop)
  end
  return buf
end

--- The buffer if it exists.
function M.existing()
  return valid(buf) and buf or nil
end

--- Opens the chat in a split, or finds the window that shows it.
--- @return integer buf, integer win
function M.open(on_stop)
  local b = M.buffer(on_stop)
  local wins = vim.fn.win_findbuf(b)
  if #wins > 0 then
    return b, wins[1]
  end
  local chat = require("mia.config").get().chat or {}
  local cmd = ({ right = "botright vsplit", left = "topleft vsplit", bottom = "botright split", top = "topleft split" })[chat.position]
  local size = (chat.size and chat.size > 0) and tostring(chat.size) or ""
  vim.cmd(size .. " " .. (cmd or "botright vsplit"))
  local win = api.nvim_get_current_win()
  api.nvim_win_set_buf(win, b)
  vim.wo[win].wrap = true
  vim.wo[win].linebreak = true
  vim.wo[win].number = false
  vim.wo[win].relativenumber = false
  vim.wo[win].foldmethod = "manual"
  vim.wo[win].foldenable = true
  return b, win
end

--- Empties the buffer.
function M.clear()
  if valid(buf) then
    api.nvim_buf_set_lines(buf, 0, -1, false, {})
  end
end

return M
