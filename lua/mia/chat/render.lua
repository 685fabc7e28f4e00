--- The one renderer: draws a chat session's Agent Client Protocol
--- `session/update`s and turn ends into the chat buffer. A turn streaming
--- live and the same turn replayed from the store (`:Mia sessions`) go
--- through the same functions, so they draw the same bytes.

local M = {}

local api = vim.api
local writer = require("mia.writer")
local blocks = require("mia.chat.blocks")

--- The mark a cancelled answer ends with.
M.CANCELLED = "*[cancelled]*"
--- The note that marks a compaction in the transcript.
M.COMPACTED = "> _context compacted_"

api.nvim_set_hl(0, "MiaReasoning", { default = true, link = "Comment" })

--- Per buffer: what was drawn last ("header", "text", "thought", "block",
--- "end"), and each tool call's name and input (by id).
--- @type table<integer, { last: string?, calls: table<string, table> }>
local state = {}

local function st(buf)
  local s = state[buf]
  if not s then
    s = { last = nil, calls = {} }
    state[buf] = s
  end
  return s
end

--- Forgets what was drawn in `buf` (it was cleared).
function M.reset(buf)
  state[buf] = nil
  blocks.reset()
end

local function is_empty(buf)
  return api.nvim_buf_line_count(buf) == 1 and api.nvim_buf_get_lines(buf, 0, 1, true)[1] == ""
end

--- A paragraph break unless the text goes right under a heading.
local function gap(s)
  return (s.last == nil or s.last == "header") and "" or "\n\n"
end

local function text_of(content)
  if type(content) == "table" and content.type == "text" then
    return content.text or ""
  end
  return ""
end

local function mia_meta(u)
  local meta = type(u._meta) == "table" and u._meta.mia or nil
  return type(meta) == "table" and meta or {}
end

--- True for an update that echoes one attachment of the prompt (drawn with the prompt).
function M.is_mention(u)
  return mia_meta(u).mention == true
end

--- The tool block event for one ACP tool update.
local function tool_event(s, u)
  local meta = mia_meta(u)
  local call = s.calls[u.toolCallId] or {}
  local output = nil
  if type(u.content) == "table" and u.content[1] and type(u.content[1].content) == "table" then
    output = text_of(u.content[1].content)
  end
  local status = meta.status
  if not status and u.status then
    status = ({ pending = "pending", in_progress = "running", completed = "done", failed = "failed" })[u.status]
  end
  -- A running tool's own report (an MCP server's progress).
  local progress = type(meta.metadata) == "table" and meta.metadata.progress or nil
  if not status and type(progress) == "table" then
    status = "running"
  end
  return {
    id = u.toolCallId,
    name = call.name or u.title or "tool",
    arguments = call.arguments,
    status = status,
    output = output,
    duration_ms = meta.duration_ms,
    metadata = { summary = meta.summary },
    progress = type(progress) == "table" and progress or nil,
  }
end

--- Draws a piece of the answer's text in `buf` (an `agent_message_chunk`'s).
--- @param buf integer
--- @param text string
function M.text(buf, text)
  local s = st(buf)
  if s.last ~= "text" then
    writer.append(buf, gap(s))
  end
  writer.append(buf, text)
  s.last = "text"
end

--- Draws one `session/update` in `buf`.
--- @param buf integer
--- @param u table the update (`u.sessionUpdate` names its kind)
--- @return table? ev for tool updates, the tool block event that was drawn
function M.update(buf, u)
  local s = st(buf)
  local kind = u.sessionUpdate
  if kind == "user_message_chunk" and mia_meta(u).mention then
    return -- an attachment of the prompt just drawn (its `_meta.mia.mentions` line)
  elseif kind == "user_message_chunk" then
    local meta = mia_meta(u)
    local model = meta.model or ""
    local who = meta.agent and meta.agent ~= model and (meta.agent .. " · " .. model) or meta.agent or ("mia · " .. model)
    local attached = ""
    if type(meta.mentions) == "table" and #meta.mentions > 0 then
      local lines = {}
      for _, m in ipairs(meta.mentions) do
        lines[#lines + 1] = string.format("📎 @%s (%s)", tostring(m.label), tostring(m.summary))
      end
      attached = table.concat(lines, "\n") .. "\n\n"
    end
    local header = string.format("## You\n\n%s\n\n%s## %s\n\n", text_of(u.content), attached, who)
    if type(meta.rules) == "table" and #meta.rules > 0 then
      header = header .. "_rules: " .. table.concat(vim.tbl_map(tostring, meta.rules), ", ") .. "_\n\n"
    end
    writer.append(buf, (s.last == nil and is_empty(buf)) and header or ("\n\n" .. header))
    s.last = "header"
  elseif kind == "agent_message_chunk" then
    M.text(buf, text_of(u.content))
  elseif kind == "agent_thought_chunk" then
    if s.last ~= "thought" then
      writer.append(buf, gap(s))
    end
    writer.append(buf, text_of(u.content), "MiaReasoning")
    s.last = "thought"
  elseif kind == "tool_call" then
    s.calls[u.toolCallId] = { name = u.title, arguments = u.rawInput }
    local ev = tool_event(s, u)
    blocks.update(buf, ev, gap(s) ~= "")
    s.last = "block"
    return ev
  elseif kind == "tool_call_update" then
    local ev = tool_event(s, u)
    if ev.status and s.calls[u.toolCallId] then
      blocks.update(buf, ev, false)
      return ev
    end
  elseif kind == "plan" then
    local marks = { completed = "x", in_progress = "~" }
    local lines = { "📋 **Plan**" }
    for _, e in ipairs(u.entries or {}) do
      local text = tostring(e.content or ""):gsub("\n", " ")
      lines[#lines + 1] = string.format("- [%s] %s", marks[e.status] or " ", text)
    end
    writer.append(buf, ((s.last == nil and is_empty(buf)) and "" or gap(s)) .. table.concat(lines, "\n"))
    s.last = "block"
  elseif kind == "compaction_update" then
    writer.append(buf, ((s.last == nil and is_empty(buf)) and "" or gap(s)) .. M.COMPACTED)
    s.last = "block"
  end
  return nil
end

--- Draws the end of a turn: the footer with its totals, the cancelled
--- mark, or the error.
--- @param buf integer
--- @param e table the turn end (`stopReason`, `model`, `usage`, `cost`, `error`, `notice`)
function M.turn_end(buf, e)
  local s = st(buf)
  if e.notice then
    writer.append(buf, gap(s) .. "> _" .. e.notice .. "_")
    s.last = "block"
  end
  if e.stopReason == "cancelled" then
    writer.append(buf, gap(s) .. M.CANCELLED)
  elseif e.stopReason == "error" then
    local err = e.error or {}
    writer.append(buf, gap(s) .. string.format("> **Error** (%s): %s", err.class or "error", err.message or ""))
  else
    local ok, footer = pcall(require("mia.core").get().format_footer, e)
    writer.append(buf, gap(s) .. (ok and footer or "── " .. (e.model or "") .. " ──"), "MiaCost")
  end
  s.last = "end"
end

--- Draws a whole replayed session: `items` as `agent_load` returns them
--- (`{ update = u }` or ``{ ["end"] = e }``).
function M.replay(buf, items)
  for _, item in ipairs(items) do
    if item.update then
      M.update(buf, item.update)
    elseif item["end"] then
      M.turn_end(buf, item["end"])
    end
  end
  writer.flush()
end

return M
