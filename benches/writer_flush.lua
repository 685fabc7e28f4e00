-- The cost of one streamed change in mia's buffer writer (append + flush,
-- the window following on the last line) against a bare
-- nvim_buf_set_text at the end of the same buffer, side by side, as the
-- streamed line grows. Run headless:
--
--     .venv/bin/nvim --headless --clean -l benches/writer_flush.lua
--
-- Each figure is the mean µs per change over the changes that grow the
-- line from the length before it to the length named.
local root = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h:h")
vim.opt.rtp:prepend(root)
local api, uv = vim.api, vim.uv
local writer = require("mia.writer")
local TOKEN = "w00000 "
local STOPS = { 1400, 14000, 56000 }

local function window_for(buf)
  vim.cmd("botright vsplit")
  api.nvim_win_set_buf(0, buf)
  vim.wo.wrap = true
  vim.cmd("wincmd p")
end

local function measure(label, change)
  local buf = api.nvim_create_buf(false, true)
  window_for(buf)
  vim.bo[buf].modifiable = false -- as the chat buffer is
  local out, len = {}, 0
  for _, stop in ipairs(STOPS) do
    local n, t = 0, uv.hrtime()
    while len < stop do
      change(buf)
      len, n = len + #TOKEN, n + 1
    end
    out[#out + 1] = string.format("%.1f", (uv.hrtime() - t) / n / 1e3)
  end
  io.stdout:write(string.format("| %s | %s |\n", label, table.concat(out, " | ")))
end

io.stdout:write("| per change, µs | " .. table.concat(STOPS, " B | ") .. " B |\n|---|---|---|---|\n")
measure("bare nvim_buf_set_text", function(buf)
  local row = api.nvim_buf_line_count(buf) - 1
  local col = #api.nvim_buf_get_lines(buf, row, row + 1, true)[1]
  vim.bo[buf].modifiable = true
  api.nvim_buf_set_text(buf, row, col, row, col, { TOKEN })
  vim.bo[buf].modifiable = false
end)
measure("mia writer (append + flush)", function(buf)
  writer.append(buf, TOKEN)
  writer.flush()
end)
vim.cmd("qa!")
