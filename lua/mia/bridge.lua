--- The main-thread half of the runtime bridge. The core signals one file
--- descriptor when its event queue goes non-empty; a libuv poll watcher sees
--- it, and `drain` (scheduled on the main loop) takes every pending event in
--- one call. Drains that write text are capped at one per frame (~33 ms,
--- 30 a second, paced by the core: `events.rs` FRAME); the first event after
--- a quiet spell is delivered at once. While text streams, the core stays
--- quiet between frames and the next frame's drain runs from a timer, so
--- the editor wakes once per frame.

local M = {}

local uv = vim.uv or vim.loop

--- @class mia.StreamCallbacks
--- @field on_delta? fun(delta: table)
--- @field on_done? fun(done: table)
--- @field on_error? fun(err: table)
--- @field on_update? fun(update: table) a chat session's ACP `session/update`
--- @field on_text? fun(text: string) a plain piece of the answer (an
--- `agent_message_chunk` of text with nothing else in it), in place of
--- `on_update` with that chunk's table
--- @field on_mia? fun(event: table) mia's own events (retry, warning)
--- @field on_end? fun(turn_end: table) the end of a chat session's turn

--- @type table<integer, mia.StreamCallbacks>
local callbacks = {}
local core = nil
local poll = nil
local timer = nil
local scheduled = false
--- drains that failed in a row
local failed = 0
--- when a failed drain is tried again: one frame (the core's FRAME)
local RETRY_MS = 33

--- JSON null as nil (in objects and arrays), as the core's own lists decode.
local JSON_NIL = { luanil = { object = true, array = true } }

local function report(what, err)
  local msg = string.format("mia: %s failed: %s", what, tostring(err))
  vim.schedule(function()
    vim.notify(msg, vim.log.levels.ERROR)
  end)
end

--- Calls one callback in isolation: its error is reported, and the other
--- callbacks and streams go on.
local function call(fn, what, ...)
  if fn then
    local ok, err = pcall(fn, ...)
    if not ok then
      report(what, err)
    end
  end
end

local function dispatch(events)
  for i = 1, #events do
    local ev = events[i]
    local cb = callbacks[ev.stream]
    if ev.kind == "call" then
      if ev.call_kind == "tool" then
        call(require("mia.tools").run, "a Lua tool", ev.call, ev.data)
      elseif ev.call_kind == "subject" then
        call(require("mia.tools").subject, "a Lua tool's subject", ev.call, ev.data)
      elseif ev.call_kind == "fs/read_text_file" then
        call(require("mia.tools.editor").read_text_file, "reading a buffer", ev.call, ev.data)
      elseif ev.call_kind == "fs/write_text_file" then
        call(require("mia.tools.editor").write_text_file, "writing a buffer", ev.call, ev.data)
      elseif ev.call_kind == "session/request_permission" then
        call(require("mia.permission").ask, "a permission question", ev.call, ev.data)
      elseif ev.call_kind == "ask" then
        call(require("mia.permission").question, "a question", ev.call, ev.data)
      elseif ev.call_kind == "hook" then
        call(require("mia.hooks").answer, "a transform hook", ev.call, ev.data)
      elseif ev.call_kind:sub(1, 9) == "terminal/" then
        call(require("mia.terminal").handle, "an agent's terminal", ev.call, ev.call_kind, ev.data)
      elseif ev.call_kind == "confirm" then
        call(require("mia.permission").confirm, "a question", ev.call, ev.data)
      end
    elseif ev.kind == "abort" then
      call(require("mia.tools").abort, "aborting a Lua tool", ev.call)
    elseif ev.kind == "update" then
      if cb then
        call(cb.on_update, "on_update", ev.data)
      end
    elseif ev.kind == "mia" then
      if cb then
        call(cb.on_mia, "on_mia", ev.data)
      end
    elseif ev.kind == "end" then
      if cb then
        callbacks[ev.stream] = nil
        call(cb.on_end, "on_end", ev.data)
      end
    elseif cb then
      if ev.kind == "delta" then
        call(cb.on_delta, "on_delta", ev.data)
      elseif ev.kind == "done" or ev.kind == "result" then
        callbacks[ev.stream] = nil
        call(cb.on_done, "on_done", ev.data)
      else
        callbacks[ev.stream] = nil
        call(cb.on_error, "on_error", ev.data)
      end
    end
  end
end

local drain
--- The next frame's drain (a timer callback: a fast event).
local function on_frame()
  vim.schedule(drain)
end

drain = function()
  scheduled = false
  local ok, events, next_ms, text_stream, figures = pcall(core.drain)
  if not ok then
    report("drain", events)
    -- The core may be holding its wake back for this frame: try once more
    -- in a frame rather than wait for a wake that would not come (a drain
    -- that keeps failing is reported once per urgent wake, not every frame).
    failed = failed + 1
    if failed == 1 then
      scheduled = true
      timer:start(RETRY_MS, 0, on_frame)
    end
    return
  end
  failed = 0
  if next_ms then
    -- Text was just taken: the core wakes nobody for more text until this
    -- frame's time is up, and the next drain comes from the timer (started
    -- below, once the flush has said how long the line it grew is).
    scheduled = true
  end
  if text_stream then
    -- One plain piece of the answer (most frames), as its text; with the
    -- stream's live figures three times a second (JSON: a one-event list).
    local cb = callbacks[text_stream]
    local list = nil
    if cb and cb.on_text then
      call(cb.on_text, "on_text", events)
    else
      list = {
        { stream = text_stream, kind = "update", data = { sessionUpdate = "agent_message_chunk", content = { type = "text", text = events } } },
      }
    end
    if figures then
      local decoded, more = pcall(vim.json.decode, figures, JSON_NIL)
      if decoded then
        list = list or {}
        list[#list + 1] = more[1]
      else
        report("reading the live figures", more)
      end
    end
    events = list
  end
  if events then
    -- Each callback runs in isolation already; this keeps the next frame's
    -- timer (below) whatever else goes wrong.
    local dispatched, derr = pcall(dispatch, events)
    if not dispatched then
      report("dispatching events", derr)
    end
  end
  local flushed, err = pcall(require("mia.writer").flush)
  if not flushed then
    report("buffer write", err)
  end
  if next_ms and timer then -- (no timer: a callback stopped the bridge)
    -- A long line makes frames further apart (writer.pace).
    timer:start(require("mia.writer").pace(next_ms), 0, on_frame)
  end
end

--- Runs in a fast event (libuv callback): no buffer API here, only schedule.
local function on_readable(err)
  if err then
    report("the wake watcher", err)
    return
  end
  local urgent = core.ack()
  if scheduled and not urgent then
    return -- a drain is already on its way (the next frame's, or sooner)
  end
  -- A call into Lua (a tool, a question) does not wait for the frame.
  scheduled = true
  timer:stop()
  vim.schedule(drain)
end

--- Starts the bridge over a loaded core. Idempotent.
--- @param c table the mia_core module
--- @param opts { log_file: string, log_level: string }
function M.start(c, opts)
  if core then
    return
  end
  core = c
  local fd = core.init({ log_file = opts.log_file, log_level = opts.log_level })
  poll = assert(uv.new_poll(fd))
  timer = assert(uv.new_timer())
  poll:start("r", on_readable)
  vim.api.nvim_create_autocmd("VimLeavePre", {
    group = vim.api.nvim_create_augroup("mia_bridge", { clear = true }),
    callback = M.shutdown,
    desc = "mia: stop the native runtime (bounded at 100 ms)",
  })
end

--- Registers the callbacks of stream `id`.
--- @param id integer
--- @param cbs mia.StreamCallbacks
function M.watch(id, cbs)
  callbacks[id] = cbs
end

--- Number of streams still waiting for their done or error event.
function M.active()
  local n = 0
  for _ in pairs(callbacks) do
    n = n + 1
  end
  return n
end

--- Stops the runtime (bounded at 100 ms) and the watchers.
function M.shutdown()
  if not core then
    return
  end
  -- The chat's session summary is handed over first (the runtime writes it).
  local chat = package.loaded["mia.chat"]
  if chat then
    pcall(chat._on_exit)
  end
  if poll then
    poll:stop()
    poll:close()
    poll = nil
  end
  if timer then
    timer:stop()
    timer:close()
    timer = nil
  end
  pcall(core.shutdown, 100)
  core = nil
end

return M
