-- Assertions that say what differed.
local M = {}

function M.eq(got, want, what)
  if not vim.deep_equal(got, want) then
    error(string.format("%s:\n  want %s\n  got  %s", what or "values differ", vim.inspect(want), vim.inspect(got)), 2)
  end
end

--- `fn` raises an error whose text holds every one of `parts`.
function M.raises(fn, parts)
  local ok, err = pcall(fn)
  if ok then
    error("expected an error holding " .. vim.inspect(parts), 2)
  end
  for _, p in ipairs(parts) do
    if not tostring(err):find(p, 1, true) then
      error(string.format("error %q does not hold %q", tostring(err), p), 2)
    end
  end
end

return M
