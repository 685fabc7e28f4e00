--- `:Mia paste`: attaches the clipboard's image to the next message. The
--- image is read with the first clipboard tool found (wl-paste, xclip,
--- pngpaste), in the background, and shows in the prompt as a mention
--- (`@clipboard-1.png`) that the user may move or delete before sending.

local M = {}

--- The clipboard tools tried, in order, with the command that prints the clipboard's PNG image.
M.tools = {
  { name = "wl-paste", cmd = { "wl-paste", "--no-newline", "--type", "image/png" } },
  { name = "xclip", cmd = { "xclip", "-selection", "clipboard", "-t", "image/png", "-o" } },
  { name = "pngpaste", cmd = { "pngpaste", "-" } },
}

--- The first clipboard tool on $PATH, or nil.
--- @return { name: string, cmd: string[] }?
function M.tool()
  for _, t in ipairs(M.tools) do
    if vim.fn.executable(t.name) == 1 then
      return t
    end
  end
  return nil
end

local function names()
  return table.concat(vim.tbl_map(function(t)
    return t.name
  end, M.tools), ", ")
end

--- Puts `@name` at the end of the prompt buffer (opening the chat).
local function show(name)
  local prompt = require("mia.prompt")
  prompt.open()
  local b = prompt.buffer()
  local lines = vim.api.nvim_buf_get_lines(b, 0, -1, false)
  local last = lines[#lines] or ""
  local sep = (last == "" or last:match("%s$")) and "" or " "
  vim.api.nvim_buf_set_lines(b, #lines - 1, #lines, false, { last .. sep .. "@" .. name .. " " })
end

--- Reads the clipboard's image and attaches it to the next message.
--- `on_done(err, name)` runs when it is attached (or not), on the main loop.
--- @param on_done? fun(err: string?, name: string?)
function M.paste(on_done)
  local function finish(err, name)
    if err then
      vim.notify(err, vim.log.levels.ERROR)
    end
    if on_done then
      on_done(err, name)
    end
  end
  local tool = M.tool()
  if not tool then
    finish("mia: no clipboard tool for images: install one of " .. names() .. " (wl-paste for Wayland, xclip for X11, pngpaste on macOS)")
    return
  end
  vim.system(tool.cmd, { text = false }, function(r)
    vim.schedule(function()
      local data = r.stdout or ""
      local media_type = data:sub(1, 8) == "\137PNG\r\n\26\n" and "image/png" or nil
      if r.code ~= 0 or not media_type then
        local why = vim.trim(r.stderr or "")
        finish(string.format("mia: the clipboard holds no image (%s%s); copy an image first", tool.name, why ~= "" and (": " .. why) or ""))
        return
      end
      local name = require("mia.mentions").add_pasted(media_type, vim.base64.encode(data))
      show(name)
      finish(nil, name)
    end)
  end)
end

return M
