--- The chat: a view of one session the core owns. Lua sends only what the
--- user adds (a prompt, a mode or model change, a cancel); the core keeps
--- the conversation and answers with Agent Client Protocol session updates,
--- which `mia.chat.render` draws the same way live and after a load.

local M = {}

local api = vim.api
local window = require("mia.chat.window")
local render = require("mia.chat.render")
local status = require("mia.chat.status")

--- @type { handle: mia.StreamHandle, model: string, retries: integer, done: table?, error: table? }?
local current = nil
--- "idle" | "streaming" | "loading" | "done" | "cancelled" | "error"
local last_state = "idle"
--- the last finished turn's end (`stopReason`, `model`, `usage`, `cost`, …)
local last_done = nil
--- Defined below M.send, which calls it.
local post_response
--- The chat's session: its id in the core (nil until the first prompt),
--- and what the statusline shows of it.
local session = { id = nil, cost_usd = 0, title = nil, prompts = 0, messages = 0 }

local function core()
  return require("mia")._core()
end

--- Loads the working directory's project tools (|mia-project-tools|). Their
--- module (~460 lines) is loaded only when the project has a tools
--- directory, or when it was loaded before (to unload another project's).
local function project_tools()
  local cwd = vim.fn.getcwd()
  if package.loaded["mia.tools.project"] or vim.fn.isdirectory(cwd .. "/.mia/tools") == 1 then
    require("mia.tools.project").load(cwd)
  end
end

--- The core's commands for the chat's session (its available_commands_update).
--- They are kept here, and `mia.slash` (13 KB of Lua) gets them when it is
--- loaded: a plain prompt does not need it. It is loaded now only when a
--- `User MiaCommandsChanged` autocommand waits for the change.
M._agent_commands = {}

local function set_agent_commands(list)
  M._agent_commands = list or {}
  local slash = package.loaded["mia.slash"]
  if not slash and #api.nvim_get_autocmds({ event = "User", pattern = "MiaCommandsChanged" }) > 0 then
    slash = require("mia.slash")
  end
  if slash then
    slash.set_agent_commands(M._agent_commands)
  end
end

--- The chat buffer (created on first use).
function M.buffer()
  return window.buffer(M.stop)
end

--- Opens the chat in a split, or focuses the window that shows it.
--- @return integer buf, integer win
function M.open()
  return window.open(M.stop)
end

--- The chat's current mode (the configured default until changed).
function M.mode()
  return session.mode or require("mia.config").get().mode
end

--- The id of the chat's session, started in the core on first use (the
--- agent's answer also says its modes, as ACP's session/new does).
function M.session_id()
  if not session.id then
    local cfg = require("mia.config").get()
    local started = require("mia.core").call(core().agent_new_session, require("mia.agents").target(), {
      cwd = vim.fn.getcwd(),
      mode = M.mode(),
      model = cfg.model,
      title = session.title,
    })
    session.id = started.sessionId
  end
  return session.id
end

--- Switches the agent's mode (`mia.set_mode`); the core refuses a mode the
--- agent does not offer. An agent that switched at once (mia's own) answers
--- with its `current_mode_update`, drawn as any agent's is, and the chat's
--- session uses the mode from its next request, also mid-answer; one that
--- was asked (an external agent) announces the switch on its own stream.
function M.set_mode(id)
  local agents = require("mia.agents")
  local name = agents.current()
  local switched = require("mia.core").call(core().agent_set_mode, agents.target(), session.id, id)
  if switched.update then
    session.mode = id
    M._agent_update(switched.update)
  end
  if switched.pending then
    require("mia.bridge").watch(switched.pending.id, {
      on_done = function()
        vim.notify(string.format("mia: %s's mode is now %s", name, id), vim.log.levels.INFO)
      end,
      on_error = function(err)
        vim.notify(err.message, vim.log.levels.ERROR)
      end,
    })
  end
end

--- True once the session holds something a request would send.
function M.has_messages()
  return session.prompts > 0
end

--- Renames the current session (stored at once when it already exists).
function M.rename(title)
  session.title = title
  if session.id then
    pcall(require("mia.core").call, core().agent_set_session, session.id, { title = title })
    pcall(require("mia.sessions").rename, session.id, title)
  end
end

--- What the statusline shows of the session's cost: known dollars, and
--- whether some answers had no price (then it never reads as $0.00).
function M.session_cost()
  if session.live and session.live_cost_usd then
    return session.live_cost_usd, session.unknown_cost == true, true
  end
  return session.cost_usd, session.unknown_cost == true, false
end

--- The status text shown under the answer, or nil (for tests and statuslines).
function M.status_text()
  return status.text(window.existing())
end

--- Keeps the session's summary current, for the exit (|mia-session-summary|).
local function refresh_summary()
  local s = session
  if not s.id or not require("mia")._started then
    return
  end
  pcall(require("mia.costs").fetch, { scope = "session", session_id = s.id }, function(err, report)
    if not err and session == s then
      s.summary = require("mia.summary").of(report, s.title)
    end
  end)
end

--- The session ends in the editor: its summary is shown once.
local function end_session()
  if session.id and session.prompts > 0 and require("mia")._started then
    require("mia.summary").show(session.id, session.title)
  end
  session.prompts = 0
end

local function thousands(n)
  return require("mia.costs").int(math.floor(n or 0))
end

--- The live figures line under a streaming answer:
--- `── model · ~1,247 in · ~832 out · ~$0.031 ──` (`~`: estimated so far).
--- @return string
function M.live_line(model, usage, cost)
  usage = type(usage) == "table" and usage or {}
  local mark = usage.estimated and "~" or ""
  local input = (usage.input_tokens or 0) + (usage.cache_read_tokens or 0) + (usage.cache_write_tokens or 0)
  local parts = { model and (model:match("/(.+)$") or model) or nil }
  parts[#parts + 1] = mark .. thousands(input) .. " in"
  parts[#parts + 1] = mark .. thousands(usage.output_tokens) .. " out"
  if type(cost) == "table" and cost.known and cost.total_usd then
    -- the turn's earlier calls as an LLM gateway priced them (|mia-gateway-cost|)
    local by = cost.source == "gateway" and " (gateway)" or cost.source == "mixed" and " (partly gateway)" or ""
    parts[#parts + 1] = mark .. require("mia.costs").usd(cost.total_usd) .. by
  end
  return "── " .. table.concat(parts, " · ") .. " … ──"
end

--- The live figures line shown under the streaming answer, or nil.
function M.live_text()
  return status.live_text(window.existing())
end

--- What the statusline shows of the session's tokens and context fill:
--- `{ tokens, used, size, estimated }` (`estimated` while an answer streams).
function M.figures()
  local live = session.live
  if live then
    local u = type(live.usage) == "table" and live.usage or {}
    local now = (u.input_tokens or 0) + (u.output_tokens or 0) + (u.cache_read_tokens or 0) + (u.cache_write_tokens or 0)
    return {
      tokens = (session.tokens or 0) + now,
      used = live.used,
      size = live.size,
      estimated = u.estimated == true,
      messages = session.messages or 0,
    }
  end
  return { tokens = session.tokens or 0, used = session.used, size = session.size, estimated = false, messages = session.messages or 0 }
end

local function finish(state)
  status.clear()
  status.clear_live()
  session.live = nil
  current = nil
  last_state = state
  refresh_summary()
  api.nvim_exec_autocmds("User", { pattern = "MiaAnswerEnd", data = { state = state } })
  -- Statuslines showing mia.statusline() drop the "…". Not `:redrawstatus!`:
  -- that draws every window now, and again after this drain (a 1.4 MB
  -- answer line took 58 ms to draw).
  status.redraw_statuslines()
end

--- mia's own events: retries and warnings.
local function on_mia(ev)
  if ev.type == "retry" then
    if current then
      current.retries = ev.attempt
    end
    status.retry(M.buffer(), ev)
  elseif ev.type == "warning" then
    vim.notify(ev.text, vim.log.levels.WARN)
  elseif ev.type == "status" then
    if ev.text == "" then
      status.clear()
    else
      status.show(M.buffer(), ev.text)
    end
  end
end

--- A finite number from an update's figures, else nil.
local function number(v)
  return type(v) == "number" and v == v and v ~= math.huge and v ~= -math.huge and v or nil
end

--- The figures of a usage update's `_meta.mia`, numbers only: an external
--- agent's update can carry anything there, mia's own name included.
local function figures_of(meta)
  local u = type(meta.usage) == "table" and meta.usage or {}
  local c = type(meta.cost) == "table" and meta.cost or nil
  return {
    input_tokens = number(u.input_tokens),
    output_tokens = number(u.output_tokens),
    cache_read_tokens = number(u.cache_read_tokens),
    cache_write_tokens = number(u.cache_write_tokens),
    estimated = u.estimated == true,
  },
    c and {
      known = c.known == true,
      total_usd = number(c.total_usd),
      source = type(c.source) == "string" and c.source or nil,
    }
end

--- Draws one update of the chat's session and keeps the statusline's figures.
local function on_update(u)
  if u.sessionUpdate == "current_mode_update" then
    -- Any agent's switch, mia's own included (`_meta.mia.previousModeId`:
    -- the mode it left, when the agent says).
    local meta = type(u._meta) == "table" and type(u._meta.mia) == "table" and u._meta.mia or {}
    -- An external agent's update does not name the mode it left: the chat
    -- remembers the last one announced (else the agent's session started in).
    local previous = meta.previousModeId or session.seen_mode
    if previous == nil then
      local agents = package.loaded["mia.agents"]
      local modes = agents and agents.modes() or nil
      local started = modes and modes.currentModeId
      previous = started ~= u.currentModeId and started or nil
    end
    session.seen_mode = u.currentModeId
    local data = { modeId = u.currentModeId, previousModeId = previous }
    api.nvim_exec_autocmds("User", { pattern = "MiaModeChanged", data = data })
    vim.cmd.redrawstatus({ bang = true })
    return
  end
  local buf = M.buffer()
  if u.sessionUpdate == "usage_update" then
    local meta = type(u._meta) == "table" and type(u._meta.mia) == "table" and u._meta.mia or {}
    local usage, cost = figures_of(meta)
    if meta.live then
      -- At most one every ~333 ms (the core throttles): one extmark move.
      session.live = { usage = usage, cost = cost, used = u.used, size = u.size }
      session.live_cost_usd = number(meta.session_cost_usd)
      status.live(buf, M.live_line(current and current.model, usage, cost))
      status.redraw_statuslines()
      return
    end
    session.live = nil
    session.tokens = (session.tokens or 0)
      + (usage.input_tokens or 0)
      + (usage.output_tokens or 0)
      + (usage.cache_read_tokens or 0)
      + (usage.cache_write_tokens or 0)
    session.used, session.size = u.used, u.size
    session.cost_usd = number(meta.session_cost_usd) or session.cost_usd
    if type(meta.cost) == "table" and meta.cost.known == false then
      session.unknown_cost = true
    end
    status.redraw_statuslines()
    return
  end
  if u.sessionUpdate == "available_commands_update" then
    require("mia.agents").commands_changed(u.availableCommands, set_agent_commands)
    return
  end
  if u.sessionUpdate == "config_option_update" then
    -- The core keeps the options (`:Mia mode` lists them); others may hook.
    api.nvim_exec_autocmds("User", { pattern = "MiaConfigOptionsChanged", data = { configOptions = u.configOptions } })
    vim.cmd.redrawstatus({ bang = true })
    return
  end
  if u.sessionUpdate ~= "user_message_chunk" then
    status.clear()
  end
  local ev = render.update(buf, u)
  if ev and (ev.status == "done" or ev.status == "failed" or ev.status == "rejected" or ev.status == "cancelled") then
    local agents = package.loaded["mia.agents"]
    api.nvim_exec_autocmds("User", {
      pattern = "MiaToolInvoked",
      data = {
        name = ev.name,
        status = ev.status,
        duration_ms = ev.duration_ms,
        id = ev.id,
        agent = { name = agents and agents.current() or "mia", mode = M.mode() },
        metadata = ev.metadata,
      },
    })
  end
end

--- The file being discussed: the most recently used buffer that holds a
--- file (rules files nested on its path apply, |mia-rules|).
--- @return string?
function M.focus_file()
  local best, used = nil, -1
  for _, info in ipairs(vim.fn.getbufinfo({ buflisted = 1 })) do
    if info.name ~= "" and vim.bo[info.bufnr].buftype == "" and info.lastused > used then
      best, used = info.name, info.lastused
    end
  end
  return best
end

--- The table `agent_prompt` takes for `content` (and `:Mia context`
--- counts): one place builds it, so the count is of what is sent.
--- @param content string
--- @param model? string
--- @return table
function M.prompt_table(content, model)
  local cfg = require("mia.config").get()
  return {
    content = content,
    model = model or cfg.model,
    mode = M.mode(),
    system = cfg.system,
    title = session.title,
    utc_offset_s = require("mia.costs").utc_offset(),
    focus = M.focus_file(),
  }
end

--- What the session's next request would carry if `content` were sent
--- now (`:Mia context`); `cb(err, report)` on the main thread.
--- @param content string
--- @param cb fun(err: table?, report: table?)
--- @param attachments? table[] what the text's @-mentions attach (|mia-mentions|)
function M.context(content, cb, attachments)
  local agents = require("mia.agents")
  if agents.runs_mia_tools() then
    project_tools()
  end
  local t = M.prompt_table(content)
  t.attachments = attachments
  return require("mia")._job("agent_context", cb, agents.target(), M.session_id(), t)
end

--- Sends `text` as the next user turn and streams the answer.
--- @param text string
--- @param opts? { model?: string, context?: string, attachments?: table[] }
function M.prompt(text, opts)
  opts = opts or {}
  if text == nil or vim.trim(text) == "" then
    error("mia: nothing to send. Usage: :Mia prompt {text}", 0)
  end
  if current then
    error("mia: an answer is still streaming. Stop it with :Mia stop (or <C-c> in the chat) first.", 0)
  end
  if last_state == "loading" then
    error("mia: the agent is still replaying the session you picked; send your prompt when it is drawn.", 0)
  end
  core() -- fails early, with the loader's message, before anything changes
  local agents = require("mia.agents")
  local cfg = require("mia.config").get()
  local model = opts.model or cfg.model
  local content = text
  if opts.context and opts.context ~= "" then
    content = text .. "\n\n" .. opts.context
  end
  session.title = session.title or vim.trim(text):sub(1, 80)
  local id = M.session_id()
  if agents.runs_mia_tools() then
    project_tools()
  end
  local table_ = M.prompt_table(content, model)
  table_.attachments = opts.attachments
  local sent, native = pcall(agents.prompt, id, table_)
  -- The request is on its way: the chat opens (filetype plugins and all)
  -- while it flies; its answer is drawn after this command returns.
  M.open()
  if not sent then
    error(native, 0)
  end
  local entry = { model = agents.answer_label(model), retries = 0, text = {} }
  entry.handle = require("mia")._handle_of(native)
  current = entry
  last_state = "streaming"
  session.prompts = session.prompts + 1
  session.messages = (session.messages or 0) + 1
  -- After :Mia clear or a load, the old turn's last events draw nothing.
  require("mia.bridge").watch(native.id, {
    on_update = function(u)
      if current == entry then
        entry.recorded = entry.recorded or u.sessionUpdate == "user_message_chunk"
        if u.sessionUpdate == "agent_message_chunk" and type(u.content) == "table" and type(u.content.text) == "string" then
          entry.text[#entry.text + 1] = u.content.text
        end
        on_update(u)
      end
    end,
    -- Most frames: a plain piece of the answer, drawn as on_update would.
    on_text = function(piece)
      if current == entry then
        entry.text[#entry.text + 1] = piece
        status.clear()
        render.text(M.buffer(), piece)
      end
    end,
    on_mia = function(ev)
      if current == entry then
        on_mia(ev)
      end
    end,
    on_end = function(e)
      if current ~= entry then
        return
      end
      render.turn_end(M.buffer(), e)
      session.cost_usd = e.session_cost_usd or session.cost_usd
      if e.stopReason == "cancelled" then
        finish("cancelled")
      elseif e.stopReason == "error" then
        entry.error = e.error
        if not entry.recorded and package.loaded["mia.prompt"] then
          -- Refused before it was recorded (a mention the core would not
          -- read): the text goes back to the prompt to fix and send again.
          require("mia.prompt").restore(text)
        end
        finish("error")
      else
        entry.done = e
        last_done = e
        session.messages = (session.messages or 0) + 1
        post_response(entry, e)
        finish("done")
      end
    end,
  })
end

--- Runs the `post_response` hooks (|mia.register_transform_hook()|) over a
--- finished turn: `{ text, model, stop_reason, usage, cost, session_id }`.
--- The answer is already shown and stored, so what they return is not
--- used: they see chat turns (to log, count, check), they do not rewrite them.
function post_response(entry, e)
  local hooks = require("mia.hooks")
  if not hooks.has("post_response") then
    return
  end
  local model = entry.model or require("mia.config").get().model
  local done = {
    text = table.concat(entry.text),
    model = e.model,
    stop_reason = e.stopReason,
    usage = e.usage,
    cost = e.cost,
    session_id = session.id,
  }
  hooks.run("post_response", done, hooks.info(model))
end

--- Reopens a stored session (from mia.sessions.load): the core owns it
--- again, and the chat draws every update it stored.
function M.load(data)
  if current then
    current.handle:cancel()
    current = nil
  end
  if session.id and session.id ~= data.session.sessionId then
    end_session()
    pcall(core().agent_close_session, session.id)
  end
  local b = M.buffer()
  window.clear()
  render.reset(b)
  status.clear()
  status.clear_live()
  local prompts, answers = 0, 0
  local commands = {}
  for _, item in ipairs(data.items) do
    if item["end"] and item["end"].stopReason ~= "error" then
      answers = answers + 1
    end
    if item.update and item.update.sessionUpdate == "user_message_chunk" and not render.is_mention(item.update) then
      prompts = prompts + 1
    elseif item.update and item.update.sessionUpdate == "available_commands_update" then
      commands = item.update.availableCommands
    end
  end
  session = {
    id = data.session.sessionId,
    title = data.session.title ~= vim.NIL and data.session.title or nil,
    mode = data.session.mode ~= "" and data.session.mode or nil,
    cost_usd = data.cost_usd or 0,
    prompts = prompts,
    messages = prompts + answers,
  }
  render.replay(b, data.items)
  set_agent_commands(commands)
  last_state = "idle"
  M.open()
end

--- Starts a fresh session: an empty chat with a new id (the ended session's
--- summary is shown).
function M.new_session()
  M.clear()
end

--- The session's summary as last read (after each answer), or nil.
function M._summary()
  return session.summary
end

--- Neovim is leaving: the session's last summary goes to the log and to the
--- next start (called by the bridge before the runtime stops).
function M._on_exit()
  if session.id and session.summary then
    require("mia.summary").at_exit(session.summary)
  end
end

--- Summarizes the conversation so far (the model of the session does it).
--- Refused while an answer streams.
function M.compact()
  if current then
    error("mia: an answer is still streaming; /compact after it ends (or stop it with :Mia stop).", 0)
  end
  if not M.has_messages() then
    error("mia: nothing to compact: the chat is empty", 0)
  end
  local native = require("mia.core").call(core().agent_compact, require("mia.agents").target(), session.id)
  local id = session.id
  require("mia.bridge").watch(native.id, {
    on_update = function(u)
      if session.id == id then
        on_update(u)
      end
    end,
    on_mia = on_mia,
    on_done = function() end,
    on_error = function(err)
      vim.notify("mia: /compact failed: " .. err.message, vim.log.levels.ERROR)
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

--- Draws an update of an external agent's session that came between turns.
function M._agent_update(u)
  on_update(u)
end

--- Shows one of mia's own events (status, warning) for an external agent.
function M._mia_event(ev)
  on_mia(ev)
end

--- An external agent's session is about to be replayed into the chat
--- (`mia.agents.load`): the chat starts empty, titled `title`, and refuses
--- prompts until the replay ends.
function M._begin_agent_load(title)
  M.clear()
  session.title = title
  last_state = "loading"
  M.open()
end

--- The replay of an agent's session ended (`err` when it failed).
function M._agent_loaded(err)
  if last_state == "loading" then
    last_state = err and "error" or "idle"
  end
  require("mia.writer").flush()
end

--- The chat now talks to agent `name`: an answer in flight is stopped.
function M._switched(name)
  if current then
    current.handle:cancel()
  end
  vim.notify(string.format("mia: the chat now talks to `%s`", name), vim.log.levels.INFO)
end

--- The last finished turn's end (for tests and scripts).
function M._last_done()
  return last_done
end

--- State of the chat: "idle", "streaming", "done", "cancelled" or "error".
function M.state()
  return last_state
end

--- Forgets the conversation (the buffer is cleared; the core closes the session).
function M.clear()
  if current then
    current.handle:cancel()
    current = nil
  end
  end_session()
  if session.id then
    pcall(core().agent_close_session, session.id)
  end
  session = { id = nil, cost_usd = 0, title = nil, mode = session.mode, prompts = 0, messages = 0 }
  set_agent_commands({})
  window.clear()
  local b = window.existing()
  if b then
    render.reset(b)
  end
  status.clear()
  status.clear_live()
  last_state = "idle"
end

return M
