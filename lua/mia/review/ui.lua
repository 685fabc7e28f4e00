--- What the review's modes share about the editor: the chat's window (a
--- float goes over it, a file never into it) and the review keys.

local M = {}

local api = vim.api

--- The chat's window, when the chat shows in this tabpage.
function M.chat_win()
  local chat = package.loaded["mia.chat.window"] and require("mia.chat.window").existing()
  if not chat then
    return nil
  end
  for _, w in ipairs(api.nvim_tabpage_list_wins(0)) do
    if api.nvim_win_get_buf(w) == chat then
      return w
    end
  end
  return nil
end

--- The review keys (`setup({ review_keys = ... })`).
function M.keys()
  return require("mia.config").get().review_keys or {}
end

return M
