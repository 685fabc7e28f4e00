--- Editor-aware tools written in Lua: they read what only Neovim knows
--- (open buffers, unsaved text, diagnostics) and edit open buffers as one
--- undo step. Registered as built-in tools when the core starts.

local M = {}

local api = vim.api
local buffers = require("mia.buffers")

--- The loaded buffer of the call's path. The core has already checked the
--- path against the rules and resolved it (ctx.subject.path), so every
--- spelling of a file finds the same buffer.
local function buffer_by_path(path, ctx)
  return buffers.loaded(ctx and ctx.subject and ctx.subject.path or buffers.real_path(path))
end

--- True when buffer `b`'s file is inside the project root.
local function inside_root(b, root)
  local name = buffers.real_name(b)
  local real_root = vim.fn.resolve(root)
  return name ~= nil and (name == real_root or vim.startswith(name, real_root .. "/"))
end

M.tools = {
  {
    name = "list_buffers",
    description = "List the files open in the editor, with unsaved-changes flags.",
    parameters = { type = "object", properties = vim.empty_dict() },
    effect = "read",
    execute = function()
      local out = {}
      for _, b in ipairs(api.nvim_list_bufs()) do
        local name = api.nvim_buf_get_name(b)
        if api.nvim_buf_is_loaded(b) and name ~= "" and vim.bo[b].buftype == "" then
          out[#out + 1] = string.format("%s%s", vim.fn.fnamemodify(name, ":."), vim.bo[b].modified and " [modified]" or "")
        end
      end
      return table.concat(out, "\n")
    end,
  },
  {
    name = "read_buffer",
    description = "Read the current text of a file open in the editor, including unsaved changes.",
    parameters = {
      type = "object",
      properties = { path = { type = "string", description = "Path of the open file" } },
      required = { "path" },
    },
    effect = "read",
    subject = "path",
    outside = "ask",
    execute = function(args, ctx)
      local b = buffer_by_path(args.path, ctx)
      if not b then
        error(string.format("`%s` is not open in the editor; use read_file for files on disk", args.path), 0)
      end
      local lines = api.nvim_buf_get_lines(b, 0, -1, false)
      for i, l in ipairs(lines) do
        lines[i] = string.format("%6d\t%s", i, l)
      end
      ctx.metadata({ summary = string.format("📖 read buffer %s (%d lines)", args.path, #lines) })
      return table.concat(lines, "\n")
    end,
  },
  {
    name = "diagnostics",
    description = "List the editor's diagnostics (LSP errors and warnings) for a file, or for all open files.",
    parameters = {
      type = "object",
      properties = { path = { type = "string", description = "Limit to this file" } },
    },
    effect = "read",
    subject = "path",
    outside = "ask",
    execute = function(args, ctx)
      local bufnr = nil
      if args.path then
        bufnr = buffer_by_path(args.path, ctx)
        if not bufnr then
          return "no open buffer for " .. args.path
        end
      end
      local out = {}
      for _, d in ipairs(vim.diagnostic.get(bufnr)) do
        -- without a path: only files inside the project (others need their path, which the rules check)
        if bufnr or inside_root(d.bufnr, ctx.root) then
          out[#out + 1] = string.format(
            "%s:%d:%d: %s: %s",
            vim.fn.fnamemodify(api.nvim_buf_get_name(d.bufnr), ":."),
            d.lnum + 1,
            d.col + 1,
            vim.diagnostic.severity[d.severity] or "?",
            d.message
          )
        end
      end
      return #out > 0 and table.concat(out, "\n") or "no diagnostics"
    end,
  },
  {
    name = "apply_buffer_edit",
    description = "Replace lines of a file open in the editor (1-based, inclusive) with new text. The user reviews the change; it lands as one undo step and is saved.",
    parameters = {
      type = "object",
      properties = {
        path = { type = "string" },
        start_line = { type = "integer", minimum = 1 },
        end_line = { type = "integer", minimum = 0, description = "Last line replaced; start_line - 1 inserts" },
        text = { type = "string", description = "The new lines" },
      },
      required = { "path", "start_line", "end_line", "text" },
    },
    subject = "path",
    outside = "ask",
    -- A proposal: the whole buffer with the lines replaced; mia reviews and writes it.
    edit = function(args, ctx)
      local b = buffer_by_path(args.path, ctx)
      if not b then
        error(string.format("`%s` is not open in the editor", args.path), 0)
      end
      local count = api.nvim_buf_line_count(b)
      if args.end_line > count or args.start_line > count + 1 or args.end_line < args.start_line - 1 then
        error(string.format("lines %d-%d are outside %s (%d lines)", args.start_line, args.end_line, args.path, count), 0)
      end
      local lines = api.nvim_buf_get_lines(b, 0, -1, false)
      local new = vim.split(args.text, "\n", { plain = true })
      local out = {}
      vim.list_extend(out, lines, 1, args.start_line - 1)
      vim.list_extend(out, new)
      vim.list_extend(out, lines, args.end_line + 1, #lines)
      local eol = (vim.bo[b].eol or vim.bo[b].fixeol) and "\n" or ""
      return {
        content = table.concat(out, "\n") .. eol,
        message = string.format("replaced lines %d-%d of %s with %d lines", args.start_line, args.end_line, args.path, #new),
      }
    end,
  },
}

--- Architect mode's way out: the plan is shown and the user picks the next
--- mode with the Agent Client Protocol's permission options.
M.switch_mode = {
  name = "switch_mode",
  description = "When your plan is ready, show it to the user and ask to switch to a mode that can carry it out.",
  parameters = {
    type = "object",
    properties = {
      plan = { type = "string", description = "The plan, in Markdown" },
    },
    required = { "plan" },
  },
  effect = "read",
  timeout_ms = 3600000,
  execute = function(args, ctx)
    local options = {
      { name = "Yes, and auto-accept all actions", kind = "allow_always", mode = "code" },
      { name = "Yes, and manually accept actions", kind = "allow_once", mode = "ask" },
      { name = "No, stay in architect mode", kind = "reject_once" },
    }
    local names = vim.tbl_map(function(o)
      return o.name
    end, options)
    local choice = ctx.ask("Plan ready:\n" .. args.plan .. "\n\nSwitch mode?", { choices = names, default = names[3] })
    for _, o in ipairs(options) do
      if o.name == choice and o.mode then
        require("mia").set_mode(o.mode)
        return string.format("The user approved the plan (%s); mode is now %s. Carry out the plan.", o.kind, o.mode)
      end
    end
    return "The user chose to stay in architect mode (reject_once). Refine the plan or ask what to change."
  end,
}

--- Registers the editor tools (source "builtin").
--- ACP's client-side `fs/read_text_file`, as the core asks it before a
--- file tool reads the disk: a loaded buffer of `data.path` with unsaved
--- changes (or any loaded one, when `_meta.mia.loaded`) answers `{ content }`,
--- what the user sees rather than the file on disk; otherwise the answer is
--- empty and the core reads the file.
function M.read_text_file(call, data)
  local core = require("mia.core").get()
  local b = type(data) == "table" and type(data.path) == "string" and buffer_by_path(data.path) or nil
  local meta = type(data) == "table" and type(data._meta) == "table" and data._meta.mia or {}
  if not (b and (vim.bo[b].modified or meta.loaded == true)) then
    pcall(core.reply, call, true, vim.NIL)
    return
  end
  local lines = api.nvim_buf_get_lines(b, 0, -1, false)
  local text = table.concat(lines, "\n") .. ((vim.bo[b].eol or vim.bo[b].fixeol) and "\n" or "")
  -- How the text maps to the file, so the core can tell a file changed behind the buffer.
  local state = {
    modified = vim.bo[b].modified,
    fileformat = vim.bo[b].fileformat,
    bomb = vim.bo[b].bomb,
    fileencoding = vim.bo[b].fileencoding,
  }
  pcall(core.reply, call, true, { content = text, _meta = { mia = state } })
end

--- The text of buffer `b` as `fs/read_text_file` gives it.
local function text_of(b)
  local lines = api.nvim_buf_get_lines(b, 0, -1, false)
  return table.concat(lines, "\n") .. ((vim.bo[b].eol or vim.bo[b].fixeol) and "\n" or "")
end

--- Puts `content` in buffer `b` as one undo step and saves it.
local function set_and_save(b, content)
  local eol = content:sub(-1) == "\n"
  if eol then
    content = content:sub(1, -2)
  end
  local lines = vim.split(content, "\n", { plain = true })
  local was = vim.bo[b].modifiable
  vim.bo[b].modifiable = true
  -- Its own undo step: setting 'undolevels' closes the block before it.
  vim.bo[b].undolevels = vim.bo[b].undolevels
  api.nvim_buf_set_lines(b, 0, -1, false, lines)
  vim.bo[b].modifiable = was
  vim.bo[b].eol = eol
  api.nvim_buf_call(b, function()
    vim.cmd("silent keepalt keepjumps write!")
  end)
end

local KEEP_REASON = "the user kept their unsaved changes in the editor"

--- ACP's client-side `fs/write_text_file`: a loaded buffer of `data.path`
--- gets `data.content` as one undo step and is saved, so the buffer, the
--- disk and what the model was told agree. `{ written = false }` when no
--- buffer holds the file (the core writes the disk).
---
--- A landing (`_meta.mia = { base, reviewed, name }`) never replaces
--- unsaved changes nobody reviewed, nor text that changed since the
--- proposal was made from `base`: the user is asked, and keeping their
--- text answers `{ written = false, rejected = true, reason }`.
function M.write_text_file(call, data)
  local core = require("mia.core").get()
  local b = type(data) == "table" and type(data.path) == "string" and buffer_by_path(data.path) or nil
  if not b or type(data.content) ~= "string" then
    pcall(core.reply, call, true, { written = false })
    return
  end
  local function land(content)
    local ok, err = pcall(set_and_save, b, content)
    if ok then
      pcall(core.reply, call, true, { written = true })
    else
      pcall(core.reply, call, false, tostring(err))
    end
  end
  local meta = type(data._meta) == "table" and type(data._meta.mia) == "table" and data._meta.mia or nil
  if not meta then
    land(data.content)
    return
  end
  local current = text_of(b)
  if current == data.content then
    local ok, err = pcall(api.nvim_buf_call, b, function()
      vim.cmd("silent keepalt keepjumps write!")
    end)
    if ok then
      pcall(core.reply, call, true, { written = true })
    else
      pcall(core.reply, call, false, tostring(err))
    end
    return
  end
  local base = type(meta.base) == "string" and meta.base or nil
  if current == base and (meta.reviewed == true or not vim.bo[b].modified) then
    land(data.content)
    return
  end
  local name = type(meta.name) == "string" and meta.name or vim.fn.fnamemodify(data.path, ":.")
  local prompt = vim.bo[b].modified and string.format("`%s` has unsaved changes that mia's edit would replace", name)
    or string.format("`%s` changed in the editor since mia's edit was proposed", name)
  local choices = { "Apply mia's edit and save", "Keep my changes (reject the edit)" }
  vim.ui.select(choices, { prompt = prompt, kind = "mia_conflict" }, function(_, idx)
    if idx == 1 and api.nvim_buf_is_valid(b) then
      land(data.content)
    else
      pcall(core.reply, call, true, { written = false, rejected = true, reason = KEEP_REASON })
    end
  end)
end

function M.register()
  for _, spec in ipairs(M.tools) do
    require("mia.tools").register(spec, "builtin")
  end
  require("mia.tools").register(M.switch_mode, "builtin")
end

return M
