--- `:Mia costs export {csv|json} [since] [until]`: every recorded request of
--- the range in a new scratch buffer (filetype csv or json), which the user
--- `:w`s wherever they like. The core reads the rows off the main thread
--- and keeps the text as chunks of lines; Lua takes one chunk per turn of the loop
--- and appends it, so a large export never freezes the editor.

local M = {}

local api = vim.api

local USAGE = "mia: usage: :Mia costs export {csv|json} [since] [until] (dates YYYY-MM-DD, inclusive)"

--- Appends the export's chunks to `buf`, one per turn of the event loop
--- (each a few thousand lines, taken from the core only when it is appended);
--- `done()` at the end.
local function fill(buf, id, first, done)
  local core = require("mia")._core()
  if not api.nvim_buf_is_valid(buf) then
    core.costs_export_drop(id)
    return
  end
  local chunk = core.costs_export_take(id)
  if not chunk then
    done()
    return
  end
  local lines = vim.split(chunk, "\n", { plain = true })
  if first then
    api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  else
    api.nvim_buf_set_lines(buf, -1, -1, false, lines)
  end
  -- The next chunk on the loop's next turn, not with vim.schedule: Neovim
  -- runs scheduled callbacks until none is left, so a chain of them would
  -- hold off typing, timers and redraws until the whole export is in.
  vim.defer_fn(function()
    fill(buf, id, false, done)
  end, 0)
end

--- Starts the export; the buffer opens when the rows arrive.
--- @param format string "csv" or "json"
--- @param since string? first local day (YYYY-MM-DD)
--- @param until_ string? last local day (YYYY-MM-DD), inclusive
--- @param extra string? anything after `until` (an error)
function M.run(format, since, until_, extra)
  if (format ~= "csv" and format ~= "json") or extra then
    error(USAGE, 0)
  end
  local query = {
    format = format,
    since = since,
    ["until"] = until_,
    utc_offset_s = require("mia.costs").utc_offset(),
  }
  require("mia")._job("costs_export", function(err, out)
    if err then
      vim.notify("mia: cost export failed: " .. tostring(err.message), vim.log.levels.ERROR)
      return
    end
    local buf = api.nvim_create_buf(true, true)
    vim.bo[buf].filetype = format
    if format == "csv" then
      -- RFC 4180 lines end in CRLF; `:w` writes them so.
      vim.bo[buf].fileformat = "dos"
    end
    vim.b[buf].mia_costs_export = { format = format, rows = out.rows, done = false }
    vim.cmd("tab sbuffer " .. buf)
    fill(buf, out.id, true, function()
      local rows = out.rows
      vim.b[buf].mia_costs_export = { format = format, rows = rows, done = true }
      vim.bo[buf].modified = false
      vim.notify(
        string.format("mia: %d usage rows exported as %s; :w {file} saves them", rows, format),
        vim.log.levels.INFO
      )
    end)
  end, query)
end

return M
