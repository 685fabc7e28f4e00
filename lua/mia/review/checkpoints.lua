--- Checkpoints: `:Mia checkpoints` lists the session's turns with the
--- files each changed, `:Mia undo` puts back the files of the newest one
--- (the core keeps and restores them; this is their UI).

local M = {}

local buffers = require("mia.buffers")

local api = vim.api

--- The chat's session id, or nil (an error) when it has none yet.
local function session_or_error(what)
  local chat = require("mia.chat")
  if not chat.has_messages() then
    error("mia: " .. what .. ": the chat has no session yet (send a prompt first, or resume one with :Mia sessions)", 0)
  end
  return chat.session_id()
end

local CHANGE = { modified = "M", created = "A", deleted = "D" }

--- The lines of `:Mia checkpoints` for `list` (newest first).
function M.lines(list)
  local lines = { "Checkpoints of this session, newest first (:Mia undo restores the newest)", "" }
  if #list == 0 then
    lines[#lines + 1] = "No checkpoints: no turn of this session changed a file."
  end
  for _, cp in ipairs(list) do
    local when = type(cp.created_ms) == "number" and os.date("%Y-%m-%d %H:%M:%S", math.floor(cp.created_ms / 1000)) or "?"
    local prompt = type(cp.prompt) == "string" and cp.prompt or ""
    local what = cp.kind == "restore" and ("restore (:Mia undo) of “" .. prompt .. "”") or ("turn “" .. prompt .. "”")
    lines[#lines + 1] = string.format("#%s  %s  %s", tostring(cp.id), when, what)
    for _, f in ipairs(cp.files or {}) do
      lines[#lines + 1] = string.format("    %s %s  (%s)", CHANGE[f.change] or "?", tostring(f.path), tostring(f.by))
    end
    for _, gap in ipairs(cp.uncovered or {}) do
      lines[#lines + 1] = "    ! not covered: " .. tostring(gap)
    end
  end
  return lines
end

local function show_lines(lines, title)
  local buf = api.nvim_create_buf(false, true)
  vim.bo[buf].bufhidden = "wipe"
  api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].filetype = "mia-checkpoints"
  local win = require("mia.float").open(buf, title, { max_width = 110, height = #lines, min_height = 3 })
  return buf, win
end

local function message_of(err)
  local msg = type(err) == "table" and err.message or tostring(err)
  msg = tostring(msg)
  return msg:match("^mia: ") and msg or ("mia: " .. msg)
end

--- `:Mia checkpoints`: the session's turns with the files each touched.
function M.show()
  local id = session_or_error("no checkpoints")
  require("mia")._job("checkpoints", function(err, list)
    if err then
      vim.notify(message_of(err), vim.log.levels.ERROR)
      return
    end
    show_lines(M.lines(type(list) == "table" and list or {}), " mia checkpoints ")
  end, id)
end

--- Reloads the buffers of restored files: unmodified ones are read again
--- (`:edit!`, undoable), deleted ones wiped; modified ones are named.
local function reload(restored)
  local kept = {}
  for _, f in ipairs(restored) do
    local want = buffers.real_path(tostring(f.path))
    for _, b in ipairs(api.nvim_list_bufs()) do
      if api.nvim_buf_is_loaded(b) and buffers.real_name(b) == want then
        if vim.bo[b].modified then
          kept[#kept + 1] = vim.fn.fnamemodify(want, ":.")
        elseif f.deleted then
          pcall(api.nvim_buf_delete, b, { force = true })
        else
          pcall(api.nvim_buf_call, b, function()
            vim.cmd("silent edit!")
          end)
        end
      end
    end
  end
  return kept
end

--- `:Mia undo`: puts back the files of the session's newest checkpoint (a
--- restore is a checkpoint too: undo again undoes it).
function M.undo()
  local id = session_or_error("nothing to undo")
  require("mia")._job("checkpoint_undo", function(err, result)
    if err then
      vim.notify(message_of(err), vim.log.levels.ERROR)
      return
    end
    local restored = type(result) == "table" and result.restored or {}
    local skipped = type(result) == "table" and result.skipped or {}
    local uncovered = type(result) == "table" and result.uncovered or {}
    local kept = reload(restored)
    local names = {}
    for _, f in ipairs(restored) do
      names[#names + 1] = vim.fn.fnamemodify(tostring(f.path), ":.") .. (f.deleted and " (deleted)" or "")
    end
    local lines = {
      string.format(
        "mia: restored %d file%s from turn #%s%s (:Mia undo again undoes this)",
        #restored,
        #restored == 1 and "" or "s",
        tostring(result.checkpoint),
        #names > 0 and (": " .. table.concat(names, ", ")) or ""
      ),
    }
    for _, s in ipairs(skipped) do
      lines[#lines + 1] = string.format("  not restored: %s (%s)", vim.fn.fnamemodify(tostring(s.path), ":."), tostring(s.reason))
    end
    local since = type(result) == "table" and result.changed_since or {}
    if #since > 0 then
      local shown = {}
      for _, p in ipairs(since) do
        shown[#shown + 1] = vim.fn.fnamemodify(tostring(p), ":.")
      end
      lines[#lines + 1] = "  changed after the turn (saved since), so undo replaced those changes too (:Mia undo again "
        .. "brings them back): "
        .. table.concat(shown, ", ")
    end
    for _, what in ipairs(uncovered) do
      lines[#lines + 1] = "  not covered by the checkpoint, so not restored: " .. tostring(what)
    end
    if #kept > 0 then
      lines[#lines + 1] = "  these buffers have unsaved changes and still show them (:edit! to load the restored file): "
        .. table.concat(kept, ", ")
    end
    local warn = #skipped > 0 or #kept > 0 or #uncovered > 0 or #since > 0
    vim.notify(table.concat(lines, "\n"), warn and vim.log.levels.WARN or vim.log.levels.INFO)
  end, id)
end

return M
