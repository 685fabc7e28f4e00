-- mia's user commands. Nothing here loads the native library or any heavy
-- module: command bodies `require` on first use.
if vim.g.loaded_mia then
  return
end
vim.g.loaded_mia = true

local names = {
  "prompt",
  "edit",
  "agent",
  "stop",
  "paste",
  "open",
  "new",
  "sessions",
  "rename",
  "mode",
  "tools",
  "context",
  "costs",
  "clear",
  "health",
  "checkpoints",
  "undo",
  "review",
  "mcp",
  "install",
}

vim.api.nvim_create_user_command("Mia", function(opts)
  require("mia.commands").run(opts)
end, {
  nargs = "*",
  range = true,
  desc = "mia: AI coding assistant (:Mia prompt {text}, :Mia stop, ...)",
  complete = function(arglead, cmdline)
    local before = cmdline:match("^%S*%s+(.*)$") or ""
    local sub = before:match("^(%S+)%s")
    if sub == "costs" and before:match("^costs%s+export%s+%S*$") then
      return vim.tbl_filter(function(n)
        return vim.startswith(n, arglead)
      end, { "csv", "json" })
    elseif sub == "costs" and not before:match("^costs%s+%S+%s") then
      return vim.tbl_filter(function(n)
        return vim.startswith(n, arglead)
      end, { "session", "daily", "weekly", "model", "provider", "export" })
    elseif sub == "mode" then
      -- The whole words after `mode` (the one being typed is `arglead`).
      local typed = before:match("^mode%s+(.*)$") or ""
      local words = vim.split(typed:sub(1, #typed - #arglead), "%s+", { trimempty = true })
      -- The chat's agent's modes and settings, then a setting's values.
      local list = require("mia.agents").complete_mode(words)
      return vim.tbl_filter(function(n)
        return vim.startswith(n, arglead)
      end, list)
    elseif sub == "mcp" then
      return require("mia.mcp").complete(before, arglead)
    elseif sub == "agent" and not before:match("^agent%s+%S+%s") then
      local ok, agents = pcall(require, "mia.agents")
      local list = { "mia" }
      if ok then
        vim.list_extend(list, agents.names())
      end
      return vim.tbl_filter(function(n)
        return vim.startswith(n, arglead)
      end, list)
    elseif sub == "review" and not before:match("^review%s+%S+%s") then
      return vim.tbl_filter(function(n)
        return vim.startswith(n, arglead)
      end, { "accept", "reject", "accept_all", "reject_all", "list" })
    elseif sub == "edit" and arglead:sub(1, 1) == "@" then
      -- (the project's file list is gathered in the background the first
      -- time: a later <Tab> offers its files)
      local _, items = require("mia.mentions").complete(arglead, function() end)
      return vim.tbl_map(function(item)
        return item.word
      end, items or {})
    elseif sub == "health" and not before:match("^health%s+%S+%s") then
      return vim.startswith("online", arglead) and { "online" } or {}
    end
    if before:find("%s") then
      return {}
    end
    return vim.tbl_filter(function(n)
      return vim.startswith(n, arglead)
    end, names)
  end,
})

-- `:Mia edit` from a mapping (|mia-edit|): none is mapped by default.
vim.keymap.set("n", "<Plug>(MiaEdit)", function()
  local ok, err = pcall(function()
    require("mia.edit").edit(nil, {})
  end)
  if not ok then
    vim.notify(tostring(err), vim.log.levels.ERROR)
  end
end, { desc = "mia: edit the function or paragraph at the cursor" })
vim.keymap.set("x", "<Plug>(MiaEdit)", function()
  local a, b = vim.fn.line("v"), vim.fn.line(".")
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes("<Esc>", true, false, true), "nx", false)
  local ok, err = pcall(function()
    require("mia.edit").edit(nil, { range = 2, line1 = math.min(a, b), line2 = math.max(a, b) })
  end)
  if not ok then
    vim.notify(tostring(err), vim.log.levels.ERROR)
  end
end, { desc = "mia: edit the selected lines" })

vim.api.nvim_create_user_command("MiaCosts", function()
  local ok, err = pcall(function()
    require("mia.costs").open()
  end)
  if not ok then
    vim.notify(tostring(err), vim.log.levels.ERROR)
  end
end, { desc = "mia: cost report window (session, today, this week, by model)" })

-- The summary of the session the last exit ended (|mia-session-summary|),
-- shown once as a notice; asynchronous, so startup never waits on it.
if vim.v.vim_did_enter == 1 then
  require("mia.summary").show_pending()
else
  vim.api.nvim_create_autocmd("VimEnter", {
    once = true,
    callback = function()
      require("mia.summary").show_pending()
    end,
    desc = "mia: show the summary of the session the last exit ended",
  })
end
