--- The chat: a markdown buffer in a split that shows the conversation and
--- streams answers into it, through the one buffer writer.

local M = {}

--- The mark a cancelled answer ends with, live and after a load.
local CANCELLED = "\n\n*[cancelled]*"
--- The note that marks a compaction in the transcript, live and after a load.
local COMPACTED = "> _context compacted_"

local api = vim.api
local writer = require("mia.writer")

local buf = nil
--- @type table[] the conversation so far (internal message format)
local history = {}
--- @type { handle: mia.StreamHandle, model: string, text: string[] }?
local current = nil
--- "idle" | "streaming" | "done" | "cancelled" | "error"
local last_state = "idle"
--- the last finished answer's done table
local last_done = nil
--- the chat's session (a new one after :Mia clear)
local session = { id = nil, cost_usd = 0, title = nil }

local function new_session_id()
  -- random bytes from the OS: two Neovims started together never collide
  local bytes = (vim.uv or vim.loop).random(6)
  local hex = bytes and bytes:gsub(".", function(c)
    return string.format("%02x", c:byte())
  end) or string.format("%x%x", vim.uv.hrtime(), vim.fn.getpid())
  return string.format("%s-%s", os.date("!%Y%m%dT%H%M%S"), hex)
end

--- The id of the chat's session (created on first use).
function M.session_id()
  if not session.id then
    session.id = new_session_id()
  end
  return session.id
end

--- The conversation so far (internal message format).
function M.history()
  return history
end

--- The chat's current mode (the configured default until changed).
function M.mode()
  return session.mode or require("mia.config").get().mode
end

--- Sets the chat's mode (see mia.set_mode, which validates and announces it).
function M.set_mode(id)
  session.mode = id
end

local function message_text(m)
  local out = {}
  for _, p in ipairs(m.parts or {}) do
    if p.type == "text" then
      out[#out + 1] = p.text
    elseif p.type == "tool_call" then
      out[#out + 1] = "⚙ **" .. p.name .. "**"
    end
  end
  return table.concat(out, "\n\n")
end

--- Reopens a stored session (from mia.sessions.load): its history and transcript.
function M.load(data)
  if current then
    current.handle:cancel()
  end
  local b = M.buffer()
  api.nvim_buf_set_lines(b, 0, -1, false, {})
  require("mia.chat.blocks").reset()
  history = {}
  session = {
    id = data.session.sessionId,
    title = data.session.title,
    mode = data.mode ~= "" and data.mode or nil,
    cost_usd = 0,
  }
  local model = data.model ~= "" and data.model or require("mia.config").get().model
  local parts = {}
  for _, m in ipairs(data.messages) do
    local text = message_text(m)
    if m.kind == "compaction" then
      -- The summary itself is for the model; the transcript keeps every message and marks the spot.
      parts[#parts + 1] = (#parts > 0 and "\n\n" or "") .. COMPACTED
    elseif m.role == "user" then
      parts[#parts + 1] = (#parts > 0 and "\n\n" or "") .. "## You\n\n" .. text
    elseif m.role == "assistant" then
      parts[#parts + 1] = "\n\n## mia · " .. model .. "\n\n" .. text .. (m.state == "cancelled" and CANCELLED or "")
    end
  end
  -- What the next prompt sends, as indexes in `data.messages`: the core puts
  -- the latest compaction's summary in place of what it covers.
  for _, i in ipairs(data.history or {}) do
    local m = data.messages[i]
    if m then
      history[#history + 1] = { role = m.role, parts = m.parts }
    end
  end
  writer.append(b, table.concat(parts))
  writer.flush()
  last_state = "idle"
  M.open()
end

--- Renames the current session (stored at once when it already exists).
function M.rename(title)
  session.title = title
  if session.id then
    pcall(require("mia.sessions").rename, session.id, title)
  end
end

--- The session's cost-saving suggestions, shown when it ends (if any).
local function suggest_on_end()
  if not session.id or #history == 0 or not require("mia")._started then
    return
  end
  pcall(require("mia.costs").fetch, { scope = "session", session_id = session.id }, function(err, report)
    if not err and report.suggestions and #report.suggestions > 0 then
      local lines = { "mia: the session that just ended could have cost less:" }
      for _, s in ipairs(report.suggestions) do
        lines[#lines + 1] = "  • " .. s.text
      end
      vim.notify(table.concat(lines, "\n"), vim.log.levels.INFO)
    end
  end)
end

--- Starts a fresh session: an empty chat with a new id (the ended session's
--- cost suggestions, if any, are shown).
function M.new_session()
  suggest_on_end()
  M.clear()
end

--- Summarizes the conversation so far (the model of the session does it).
function M.compact()
  if #history == 0 then
    error("mia: nothing to compact: the chat is empty", 0)
  end
  local mia = require("mia")
  local loader = require("mia.core")
  local core = mia._core()
  local h = loader.call(core.compact, {
    model = require("mia.config").get().model,
    messages = history,
    session_id = M.session_id(),
  })
  require("mia.bridge").watch(h.id, {
    on_done = function(messages)
      history = messages
      writer.append(M.buffer(), "\n\n" .. COMPACTED)
      writer.flush()
    end,
    on_error = function(err)
      vim.notify("mia: /compact failed: " .. err.message, vim.log.levels.ERROR)
    end,
  })
end

--- What the statusline shows of the session's cost: known dollars, and
--- whether some answers had no price (then it never reads as $0.00).
function M.session_cost()
  return session.cost_usd, session.unknown_cost == true
end

local status_ns = api.nvim_create_namespace("mia_chat_status")

api.nvim_set_hl(0, "MiaReasoning", { default = true, link = "Comment" })
api.nvim_set_hl(0, "MiaStatus", { default = true, link = "DiagnosticWarn" })

--- The live status line under the answer ("⏳ rate limited, retrying in 12s").
local status = { timer = nil, mark = nil }

local function clear_status()
  if status.timer then
    status.timer:stop()
    status.timer:close()
    status.timer = nil
  end
  if buf and api.nvim_buf_is_valid(buf) then
    api.nvim_buf_clear_namespace(buf, status_ns, 0, -1)
  end
  status.mark = nil
end

local function retry_text(d, seconds)
  if d.class == "rate_limit" and d.attempt == 0 then
    return string.format("⏳ waiting for the rate-limit window to reset, %ds", seconds)
  end
  local what = ({
    rate_limit = "rate limited",
    server_error = "server error",
    network_error = "connection failed",
    timeout = "timed out",
  })[d.class] or d.class
  return string.format("⏳ %s, retrying in %ds (attempt %d) — :Mia stop cancels", what, seconds, d.attempt)
end

--- Shows a retry status below the last line, counting down each second.
local function show_retry(d)
  clear_status()
  local deadline = vim.uv.now() + d.delay_ms
  local function draw()
    if not (buf and api.nvim_buf_is_valid(buf)) then
      return
    end
    local seconds = math.max(0, math.ceil((deadline - vim.uv.now()) / 1000))
    local last = api.nvim_buf_line_count(buf) - 1
    status.mark = api.nvim_buf_set_extmark(buf, status_ns, last, 0, {
      id = status.mark,
      virt_lines = { { { retry_text(d, seconds), "MiaStatus" } } },
    })
  end
  draw()
  status.timer = vim.uv.new_timer()
  status.timer:start(1000, 1000, vim.schedule_wrap(function()
    if status.timer then
      draw()
    end
  end))
end

--- The status text shown under the answer, or nil (for tests and statuslines).
function M.status_text()
  if not (buf and api.nvim_buf_is_valid(buf)) then
    return nil
  end
  local marks = api.nvim_buf_get_extmarks(buf, status_ns, 0, -1, { details = true })
  local m = marks[1]
  return m and m[4].virt_lines and m[4].virt_lines[1][1][1] or nil
end

local function valid(b)
  return b and api.nvim_buf_is_valid(b)
end

local function create_buffer()
  local b = api.nvim_create_buf(false, true)
  pcall(api.nvim_buf_set_name, b, "mia://chat")
  vim.bo[b].buftype = "nofile"
  vim.bo[b].bufhidden = "hide"
  vim.bo[b].swapfile = false
  -- A streamed answer is not an edit to undo, and undo history grows with every change.
  vim.bo[b].undolevels = -1
  vim.bo[b].filetype = "markdown"
  vim.bo[b].synmaxcol = require("mia.config").get().chat.synmaxcol
  vim.keymap.set("n", "<C-c>", M.stop, { buffer = b, desc = "mia: stop the answer" })
  return b
end

--- The chat buffer (created on first use).
function M.buffer()
  if not valid(buf) then
    buf = create_buffer()
  end
  return buf
end

--- Opens the chat in a split, or focuses the window that shows it.
--- @return integer buf, integer win
function M.open()
  local b = M.buffer()
  local wins = vim.fn.win_findbuf(b)
  if #wins > 0 then
    return b, wins[1]
  end
  local chat = require("mia.config").get().chat
  local cmd = ({ right = "botright vsplit", left = "topleft vsplit", bottom = "botright split", top = "topleft split" })[chat.position]
  local size = (chat.size and chat.size > 0) and tostring(chat.size) or ""
  vim.cmd(size .. " " .. (cmd or "botright vsplit"))
  local win = api.nvim_get_current_win()
  api.nvim_win_set_buf(win, b)
  vim.wo[win].wrap = true
  vim.wo[win].linebreak = true
  vim.wo[win].number = false
  vim.wo[win].relativenumber = false
  vim.wo[win].foldmethod = "manual"
  vim.wo[win].foldenable = true
  return b, win
end

local function is_empty(b)
  return api.nvim_buf_line_count(b) == 1 and api.nvim_buf_get_lines(b, 0, 1, true)[1] == ""
end

local function finish(state, suffix)
  clear_status()
  if current and suffix then
    writer.append(buf, suffix)
  end
  current = nil
  last_state = state
  vim.api.nvim_exec_autocmds("User", { pattern = "MiaAnswerEnd", data = { state = state } })
  vim.cmd.redrawstatus({ bang = true }) -- statuslines showing mia.statusline() drop the "…"
end

--- Sends `text` as the next user turn and streams the answer.
--- @param text string
--- @param opts? { model?: string, context?: string }
function M.prompt(text, opts)
  opts = opts or {}
  if text == nil or vim.trim(text) == "" then
    error("mia: nothing to send. Usage: :Mia prompt {text}", 0)
  end
  if current then
    error("mia: an answer is still streaming. Stop it with :Mia stop (or <C-c> in the chat) first.", 0)
  end
  local mia = require("mia")
  mia._core() -- fails early, with the loader's message, before anything changes
  local cfg = require("mia.config").get()
  local model = opts.model or cfg.model
  local content = text
  if opts.context and opts.context ~= "" then
    content = text .. "\n\n" .. opts.context
  end
  local b = M.open()
  local header = string.format("## You\n\n%s\n\n## mia · %s\n\n", content, model)
  writer.append(b, is_empty(b) and header or ("\n\n" .. header))
  writer.flush()
  table.insert(history, { role = "user", content = content })
  local answer = {}
  local entry = { model = model, text = answer, retries = 0 }
  current = entry
  last_state = "streaming"
  local in_reasoning = false
  local after_block = false
  local function on_text(delta)
    clear_status()
    if in_reasoning or after_block then
      in_reasoning, after_block = false, false
      writer.append(buf, "\n\n")
    end
    answer[#answer + 1] = delta
    writer.append(buf, delta)
  end
  session.title = session.title or vim.trim(text):sub(1, 80)
  entry.handle = mia._agent({
    model = model,
    system = cfg.system,
    messages = vim.deepcopy(history),
    mode = M.mode(),
    root = vim.fn.getcwd(),
    session_id = M.session_id(),
    title = session.title,
    utc_offset_s = require("mia.costs").utc_offset(),
  }, {
    on_delta = function(d)
      if current ~= entry then
        return
      end
      if d.type == "text" then
        on_text(d.text)
      elseif d.type == "reasoning" then
        clear_status()
        if after_block then
          after_block = false
          writer.append(buf, "\n\n")
        end
        in_reasoning = true
        writer.append(buf, d.text, "MiaReasoning")
      elseif d.type == "retry" then
        entry.retries = d.attempt
        show_retry(d)
      end
    end,
    on_agent = function(ev)
      if ev.type == "message" then
        table.insert(history, ev.message)
        answer = {}
        entry.text = answer
      elseif ev.type == "tool" then
        require("mia.chat.blocks").update(buf, ev, in_reasoning or #answer > 0 or after_block)
        in_reasoning = false
        after_block = true
        if ev.status == "done" or ev.status == "failed" or ev.status == "rejected" or ev.status == "cancelled" then
          api.nvim_exec_autocmds("User", {
            pattern = "MiaToolInvoked",
            data = { name = ev.name, status = ev.status, duration_ms = ev.duration_ms, id = ev.id },
          })
        end
      elseif ev.type == "usage" then
        session.cost_usd = ev.session_cost_usd or session.cost_usd
        if ev.cost and ev.cost.known == false then
          session.unknown_cost = true
        end
        entry.footer = ev.footer
        vim.cmd.redrawstatus({ bang = true })
      elseif ev.type == "warning" then
        vim.notify(ev.text, vim.log.levels.WARN)
      elseif ev.type == "notice" then
        if ev.text == "context compacted" and ev.messages then
          history = ev.messages
        end
        writer.append(buf, "\n\n> _" .. ev.text .. "_")
        after_block = true
      end
    end,
    on_done = function(done)
      entry.done = done
      last_done = done
      local footer = done.footer or entry.footer
      if footer then
        writer.append(buf, "\n\n" .. footer, "MiaCost")
      end
      finish("done", nil)
    end,
    on_error = function(err)
      local partial = table.concat(answer)
      if partial ~= "" then
        table.insert(history, { role = "assistant", content = partial })
      end
      entry.error = err
      if err.class == "cancelled" then
        finish("cancelled", CANCELLED)
      else
        finish("error", string.format("\n\n> **Error** (%s): %s", err.class, err.message))
      end
    end,
  })
end

--- Cancels the answer in flight.
function M.stop()
  if not current then
    vim.notify("mia: no answer is streaming", vim.log.levels.INFO)
    return
  end
  current.handle:cancel()
end

--- The last finished answer's done table (for tests and scripts).
function M._last_done()
  return last_done
end

--- State of the chat: "idle", "streaming", "done", "cancelled" or "error".
function M.state()
  return last_state
end

--- Forgets the conversation (the buffer is cleared).
function M.clear()
  if current then
    current.handle:cancel()
  end
  history = {}
  session = { id = nil, cost_usd = 0, title = nil, mode = session.mode }
  if valid(buf) then
    api.nvim_buf_set_lines(buf, 0, -1, false, {})
  end
  require("mia.chat.blocks").reset()
  last_state = "idle"
end

return M
