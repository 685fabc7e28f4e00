--- Buffers matched to the core's paths: the core names files absolute with
--- links resolved, so a buffer is found by its file resolved the same way.
--- Shared by the editor tools and the review.

local M = {}

local api = vim.api

--- Buffer `b`'s file, absolute with links resolved, or nil for a buffer
--- without a name.
function M.real_name(b)
  local name = api.nvim_buf_get_name(b)
  if name == "" then
    return nil
  end
  return vim.fn.resolve(vim.fn.fnamemodify(name, ":p"))
end

--- `path` absolute with links resolved, as `real_name` gives a buffer's.
function M.real_path(path)
  return vim.fn.resolve(vim.fn.fnamemodify(path, ":p"))
end

--- The loaded buffer whose real file is `real` (a resolved absolute path),
--- or nil.
function M.loaded(real)
  for _, b in ipairs(api.nvim_list_bufs()) do
    if api.nvim_buf_is_loaded(b) and M.real_name(b) == real then
      return b
    end
  end
  return nil
end

return M
