-- mia's user commands. Nothing here loads the native library or any heavy
-- module: command bodies `require` on first use.
if vim.g.loaded_mia then
  return
end
vim.g.loaded_mia = true

local names = { "prompt", "stop", "open", "tools", "clear", "health" }

vim.api.nvim_create_user_command("Mia", function(opts)
  require("mia.commands").run(opts)
end, {
  nargs = "*",
  range = true,
  desc = "mia: AI coding assistant (:Mia prompt {text}, :Mia stop, ...)",
  complete = function(arglead, cmdline)
    local before = cmdline:match("^%S*%s+(.*)$") or ""
    if before:find("%s") then
      return {}
    end
    return vim.tbl_filter(function(n)
      return vim.startswith(n, arglead)
    end, names)
  end,
})
