--- The chat prompt: a small buffer under the chat where the user writes the
--- next message. `<CR>` (normal mode) or `<C-s>` sends it; a line starting
--- with `/` is a slash command, completed through 'omnifunc' and
--- 'completefunc' (so nvim-cmp and blink.cmp sources that read them work).

local M = {}

local api = vim.api
local buf = nil

--- Completion function for 'omnifunc' / 'completefunc'.
function M.complete(findstart, base)
  local line = api.nvim_get_current_line()
  local col = api.nvim_win_get_cursor(0)[2]
  local before = line:sub(1, col)
  local start, items = require("mia.slash").complete(before)
  if findstart == 1 then
    return start
  end
  local _ = base
  return items
end

--- Sends the prompt buffer's text (a slash command or a message).
function M.send()
  if not (buf and api.nvim_buf_is_valid(buf)) then
    return
  end
  local text = vim.trim(table.concat(api.nvim_buf_get_lines(buf, 0, -1, false), "\n"))
  if text == "" then
    return
  end
  local ok, err = pcall(function()
    if not require("mia.slash").dispatch(text) then
      require("mia.chat").prompt(text)
    end
  end)
  if not ok then
    vim.notify(tostring(err), vim.log.levels.ERROR)
    return
  end
  api.nvim_buf_set_lines(buf, 0, -1, false, {})
end

--- The prompt buffer (created on first use).
function M.buffer()
  if buf and api.nvim_buf_is_valid(buf) then
    return buf
  end
  buf = api.nvim_create_buf(false, true)
  pcall(api.nvim_buf_set_name, buf, "mia://prompt")
  vim.bo[buf].buftype = "nofile"
  vim.bo[buf].bufhidden = "hide"
  vim.bo[buf].swapfile = false
  vim.bo[buf].filetype = "mia_prompt"
  vim.bo[buf].omnifunc = "v:lua.require'mia.prompt'.complete"
  vim.bo[buf].completefunc = "v:lua.require'mia.prompt'.complete"
  vim.keymap.set("n", "<CR>", M.send, { buffer = buf, desc = "mia: send" })
  vim.keymap.set("i", "<C-s>", function()
    vim.cmd.stopinsert()
    vim.schedule(M.send)
  end, { buffer = buf, desc = "mia: send" })
  vim.keymap.set({ "n", "i" }, "<C-c>", function()
    require("mia.chat").stop()
  end, { buffer = buf, desc = "mia: stop the answer" })
  -- typing "/" at the start of the prompt opens command completion
  vim.keymap.set("i", "/", function()
    local col = api.nvim_win_get_cursor(0)[2]
    local line = api.nvim_get_current_line()
    if col == 0 and line == "" then
      return "/<C-x><C-o>"
    end
    return "/"
  end, { buffer = buf, expr = true, desc = "mia: slash command completion" })
  return buf
end

--- Opens the prompt under the chat window and focuses it.
function M.open()
  local _, chat_win = require("mia.chat").open()
  local b = M.buffer()
  local wins = vim.fn.win_findbuf(b)
  if #wins > 0 then
    api.nvim_set_current_win(wins[1])
    return wins[1]
  end
  api.nvim_set_current_win(chat_win)
  vim.cmd("belowright 4split")
  local win = api.nvim_get_current_win()
  api.nvim_win_set_buf(win, b)
  vim.wo[win].winfixheight = true
  vim.wo[win].number = false
  vim.wo[win].relativenumber = false
  return win
end

return M
