-- Lua unit tests for mia's pure parts, in a headless Neovim without any
-- user configuration:
--   nvim --headless --clean -u NONE -l tests/lua/run.lua [PATTERN]
-- Each tests/lua/*_spec.lua returns a list of { name, fn }; a test fails
-- when fn raises. The last line is "N passed, N failed"; the exit status is
-- 1 when any failed.
local root = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h:h:h")
vim.opt.runtimepath:prepend(root)
package.path = root .. "/tests/lua/?.lua;" .. package.path

local only = arg and arg[1]
local passed, failed = 0, 0
for _, file in ipairs(vim.fn.globpath(root .. "/tests/lua", "*_spec.lua", false, true)) do
  local spec = dofile(file)
  local name = vim.fn.fnamemodify(file, ":t:r")
  for _, t in ipairs(spec) do
    local full = name .. ": " .. t[1]
    if not only or full:find(only, 1, true) then
      local ok, err = xpcall(t[2], debug.traceback)
      if ok then
        passed = passed + 1
      else
        failed = failed + 1
        io.stdout:write("FAIL " .. full .. "\n" .. tostring(err) .. "\n")
      end
    end
  end
end
io.stdout:write(string.format("lua: %d passed, %d failed\n", passed, failed))
os.exit(failed == 0 and passed > 0 and 0 or 1)
