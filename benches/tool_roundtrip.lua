-- Overhead of one tool call, measured over many sequential calls timed in
-- Rust (the loop runs in the core, as the agent loop does):
--   a Lua tool: Rust -> event -> main thread -> coroutine -> reply -> Rust
--   a Rust tool: read_file of a small file
-- Run: nvim --headless --clean -l benches/tool_roundtrip.lua   (N=calls, default 5000)
local root = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h:h")
vim.opt.rtp:prepend(root)
local mia = require("mia")
mia.setup({})
mia.register_tool({
  name = "noop",
  description = "returns ok",
  execute = function()
    return "ok"
  end,
})
local core = mia._core()
local loader = require("mia.core")

local function timed(name, args, n)
  local result
  local h = loader.call(core.run_tool, name, args, root, n)
  require("mia.bridge").watch(h.id, {
    on_done = function(r)
      result = r
    end,
    on_error = function(e)
      result = { error = e }
    end,
  })
  vim.wait(300000, function()
    return result ~= nil
  end, 1)
  assert(result and not result.error and not result.is_error, vim.inspect(result))
  return result.elapsed_us / n
end

local N = tonumber(vim.env.N or "5000")
timed("noop", vim.empty_dict(), 100) -- warm up
timed("read_file", { path = "Cargo.toml" }, 100)
local lua, rust = {}, {}
for i = 1, 5 do
  lua[i] = timed("noop", vim.empty_dict(), N)
  rust[i] = timed("read_file", { path = "Cargo.toml" }, N)
end
table.sort(lua)
table.sort(rust)
io.write(string.format("Lua tool round trip (Rust -> main thread -> Rust): %.1f µs per call (median of 5 x %d)\n", lua[3], N))
io.write(string.format("Rust tool call (read_file, small file): %.1f µs per call (median of 5 x %d)\n", rust[3], N))
vim.cmd("qa!")
