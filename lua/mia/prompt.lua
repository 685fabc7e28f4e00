--- The chat prompt: a small buffer under the chat where the user writes the
--- next message. `<CR>` (normal mode) or `<C-s>` sends it; a line starting
--- with `/` is a slash command, and `@server:uri` mentions an MCP
--- resource (read and attached on send); both complete through 'omnifunc'
--- and 'completefunc' (so nvim-cmp and blink.cmp sources that read them work).

local M = {}

local api = vim.api
local buf = nil

--- The text before the cursor when completion began (Vim takes the typed
--- word out of the line before asking for the matches).
local completing = ""

--- Completes again when servers started for the completion are ready,
--- if the user is still typing the same thing in the prompt.
local function complete_again(before)
  return function()
    if not (buf and api.nvim_get_current_buf() == buf and api.nvim_get_mode().mode:sub(1, 1) == "i") then
      return
    end
    local col = api.nvim_win_get_cursor(0)[2]
    local now = api.nvim_get_current_line():sub(1, col)
    -- With the list open, the line shows the selected item: the completion
    -- must still be the one that started from `before`. A mention typed on
    -- since is completed as it stands now (the list arrived while typing).
    local same = vim.fn.pumvisible() == 1 and completing == before or now == before
    if not same and (" " .. now):match("%s@%S*$") then
      before, same = now, true
    end
    if not same then
      return
    end
    if require("mia.mentions").complete_later(before, function(start, items)
      local c = api.nvim_win_get_cursor(0)[2]
      if api.nvim_get_current_line():sub(1, c) == before and start and #items > 0 then
        completing = before
        vim.fn.complete(start + 1, items)
      end
    end) then
      return
    end
    local start, items = require("mia.mentions").complete(before)
    if not start then
      start, items = require("mia.slash").complete(before)
    end
    if start and start >= 0 and items and #items > 0 then
      completing = before
      vim.fn.complete(start + 1, items)
    end
  end
end

--- Completion function for 'omnifunc' / 'completefunc'.
function M.complete(findstart, base)
  local line = api.nvim_get_current_line()
  local col = api.nvim_win_get_cursor(0)[2]
  local before = line:sub(1, col)
  if findstart == 1 then
    completing = before
  else
    before = completing
  end
  -- Servers are started (and the list offered again) from the first call only.
  local more = findstart == 1 and complete_again(before) or nil
  local start, items = require("mia.mentions").complete(before, more)
  if not start then
    start, items = require("mia.slash").complete(before, more)
  end
  if findstart == 1 then
    return start
  end
  local _ = base
  return items
end

--- True while the mentions of a sent prompt are being read.
local resolving = false

--- Sends the prompt buffer's text (a slash command or a message).
function M.send()
  if not (buf and api.nvim_buf_is_valid(buf)) then
    return
  end
  local text = vim.trim(table.concat(api.nvim_buf_get_lines(buf, 0, -1, false), "\n"))
  if text == "" then
    return
  end
  if resolving then
    vim.notify("mia: still reading the resources your last message mentions", vim.log.levels.WARN)
    return
  end
  local sent = buf
  -- The prompt is cleared only once it was sent: a failure leaves it to fix.
  local function clear()
    if api.nvim_buf_is_valid(sent) then
      api.nvim_buf_set_lines(sent, 0, -1, false, {})
    end
  end
  local ok, err = pcall(function()
    if require("mia.slash").dispatch(text) then
      clear()
      return
    end
    resolving = true
    require("mia.mentions").expand(text, function(read_err, context, attachments)
      resolving = false
      if read_err then
        vim.notify("mia: " .. read_err .. " (the message was not sent)", vim.log.levels.ERROR)
        return
      end
      local sent_ok, send_err = pcall(require("mia.chat").prompt, text, { context = context, attachments = attachments })
      if not sent_ok then
        vim.notify(tostring(send_err), vim.log.levels.ERROR)
        return
      end
      require("mia.mentions").sent(attachments)
      clear()
    end)
  end)
  if not ok then
    resolving = false
    vim.notify(tostring(err), vim.log.levels.ERROR)
  end
end

--- The prompt buffer (created on first use).
function M.buffer()
  if buf and api.nvim_buf_is_valid(buf) then
    return buf
  end
  buf = api.nvim_create_buf(false, true)
  vim.b[buf].editorconfig = false -- not a file (see chat/window.lua)
  pcall(api.nvim_buf_set_name, buf, "mia://prompt")
  vim.bo[buf].buftype = "nofile"
  vim.bo[buf].bufhidden = "hide"
  vim.bo[buf].swapfile = false
  vim.bo[buf].filetype = "mia_prompt"
  vim.bo[buf].omnifunc = "v:lua.require'mia.prompt'.complete"
  vim.bo[buf].completefunc = "v:lua.require'mia.prompt'.complete"
  -- The list opens as you type `/` or `@`: typing on must not append to an inserted first match.
  pcall(api.nvim_set_option_value, "completeopt", "menu,menuone,noinsert", { scope = "local", buf = buf })
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
  -- typing "@" at the start of a word opens mention completion
  vim.keymap.set("i", "@", function()
    local col = api.nvim_win_get_cursor(0)[2]
    local prev = api.nvim_get_current_line():sub(col, col)
    if col == 0 or prev:match("%s") then
      return "@<C-x><C-o>"
    end
    return "@"
  end, { buffer = buf, expr = true, desc = "mia: @-mention completion" })
  -- typing on in a mention completes again (paths hold `/` and `.`, which end Vim's own filtering)
  local accepted = nil -- the text before the cursor just after an item was taken
  api.nvim_create_autocmd("CompleteDone", {
    buffer = buf,
    callback = function()
      local item = vim.v.completed_item
      if item and item.word and item.word ~= "" then
        accepted = api.nvim_get_current_line():sub(1, api.nvim_win_get_cursor(0)[2])
      end
    end,
  })
  api.nvim_create_autocmd({ "TextChangedI", "TextChangedP" }, {
    buffer = buf,
    callback = function()
      local col = api.nvim_win_get_cursor(0)[2]
      local before = api.nvim_get_current_line():sub(1, col)
      if before == accepted or not (" " .. before):match("%s@%S+$") then
        return
      end
      accepted = nil
      local function show(start, items)
        if start and items and #items > 0 then
          completing = before
          vim.fn.complete(start + 1, items)
        end
      end
      -- A large file list is matched in slices: the menu follows when they are in.
      local mentions = require("mia.mentions")
      if
        mentions.complete_later(before, function(start, items)
          local now_col = api.nvim_win_get_cursor(0)[2]
          local still = api.nvim_get_current_buf() == buf
            and api.nvim_get_mode().mode:sub(1, 1) == "i"
            and api.nvim_get_current_line():sub(1, now_col) == before
          if still then
            show(start, items)
          end
        end)
      then
        return
      end
      show(mentions.complete(before))
    end,
  })
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

--- What the prompt buffer holds now ("" when it was never opened).
--- @return string
function M.text()
  if not (buf and api.nvim_buf_is_valid(buf)) then
    return ""
  end
  return vim.trim(table.concat(api.nvim_buf_get_lines(buf, 0, -1, false), "\n"))
end

--- Puts `text` back in the prompt buffer when the message was refused
--- before it was recorded (the buffer is left alone when you typed since).
--- @param text string
function M.restore(text)
  if buf and api.nvim_buf_is_valid(buf) and M.text() == "" then
    api.nvim_buf_set_lines(buf, 0, -1, false, vim.split(text, "\n", { plain = true }))
  end
end

return M
