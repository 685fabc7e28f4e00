-- Part of `cargo bench --bench sessions`: in a Neovim whose data directory
-- holds the benchmark store, times `mia.sessions.list` (first and a deep
-- page) and resuming the 2,000-message session until its chat buffer holds
-- the transcript and the screen is redrawn.
local root = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h:h")
vim.opt.rtp:prepend(root)
local mia = require("mia")
mia.setup({})
local function median(t)
  table.sort(t)
  return t[math.floor(#t / 2) + 1]
end
local function timed(fn, n)
  local out = {}
  for i = 1, n do
    local t = vim.uv.hrtime()
    fn()
    out[i] = (vim.uv.hrtime() - t) / 1e6
  end
  return median(out)
end
mia.sessions.list({ cwd = "/bench/project" }) -- loads the core and opens the store
local first = timed(function()
  mia.sessions.list({ cwd = "/bench/project", limit = 50 })
end, 30)
local cursor = vim.env.MIA_BENCH_CURSOR
local deep = timed(function()
  mia.sessions.list({ cwd = "/bench/project", cursor = cursor, limit = 50 })
end, 30)
local resume = timed(function()
  mia.sessions.load("s09999")
  vim.cmd.redraw()
end, 5)
local lines = vim.api.nvim_buf_line_count(require("mia.chat").buffer())
io.write(string.format("- mia.sessions.list from Lua, first page: %.2f ms; page 151: %.2f ms (median of 30)\n", first, deep))
io.write(string.format("- resume of a 2,000-message session until the chat buffer is drawn: %.1f ms (median of 5; %d buffer lines)\n", resume, lines))
vim.cmd("qa!")
