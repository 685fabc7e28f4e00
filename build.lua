-- Installs mia's native library (|mia-install|): the verified prebuilt one
-- for this system, or a source build when none fits and cargo exists.
-- lazy.nvim runs this file on install and update (progress through
-- coroutine.yield); `nvim --headless -l build.lua` runs it from a shell and
-- exits 0 on success, non-zero with the message on failure. `:Mia install`
-- does the same inside a running Neovim.
local root = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h")
local install = dofile(root .. "/lua/mia/install.lua")

local done, err, stamp = false, nil, nil
local last = nil
install.run({
  on_progress = function(msg)
    last = msg
    if not coroutine.isyieldable() and #vim.api.nvim_list_uis() == 0 then
      io.stderr:write("mia: " .. msg .. "\n")
    end
  end,
  on_done = function(e, s)
    done, err, stamp = true, e, s
  end,
})

if coroutine.isyieldable() then
  -- lazy.nvim: hand control back until the install ends, showing its step.
  while not done do
    coroutine.yield(last and ("mia: " .. last) or "mia: installing")
  end
else
  vim.wait(3600 * 1000, function()
    return done
  end, 50)
end

if err then
  if #vim.api.nvim_list_uis() == 0 and not coroutine.isyieldable() then
    io.stderr:write(err .. "\n")
    os.exit(1)
  end
  error(err, 0)
end
local line = "mia: installed " .. (install.describe(stamp) or "the native library")
if #vim.api.nvim_list_uis() == 0 and not coroutine.isyieldable() then
  io.stdout:write(line .. "\n")
  os.exit(0)
end
vim.notify(line, vim.log.levels.INFO)
