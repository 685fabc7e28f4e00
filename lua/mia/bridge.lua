--- The main-thread half of the runtime bridge. The core signals one file
--- descriptor when its event queue goes non-empty; a libuv poll watcher sees
--- it, and `drain` (scheduled on the main loop) takes every pending event in
--- one call. Drains that write text are capped at one per frame (~33 ms,
--- 30 a second); the first event after a quiet spell is delivered at once.

local M = {}

local uv = vim.uv or vim.loop

-- Two 60 Hz display frames. Each drain that writes text costs a buffer
-- change and a redraw of the line it grows; 30 a second halves that work at
-- 1 kHz (and cuts it by 40% at 50 Hz) against 60, and keeps every gap
-- between visible updates under 40 ms (benches/stream_bench.py).
local FRAME_NS = 33 * 1000 * 1000

--- @class mia.StreamCallbacks
--- @field on_delta? fun(delta: table)
--- @field on_done? fun(done: table)
--- @field on_error? fun(err: table)
--- @field on_update? fun(update: table) a chat session's ACP `session/update`
--- @field on_mia? fun(event: table) mia's own events (retry, warning)
--- @field on_end? fun(turn_end: table) the end of a chat session's turn

--- @type table<integer, mia.StreamCallbacks>
local callbacks = {}
local core = nil
local poll = nil
local timer = nil
local scheduled = false
local last_drain = 0

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

local function drain()
  scheduled = false
  local ok, events = pcall(core.drain)
  if not ok then
    report("drain", events)
    return
  end
  -- The frame cap is about buffer changes: only a drain that delivered
  -- streamed text starts a frame, so the first text after other events
  -- (a turn starting, usage, a tool's status) is still written at once.
  for i = 1, #events do
    local ev = events[i]
    local d = ev.data
    if
      (ev.kind == "delta" and (d.type == "text" or d.type == "reasoning"))
      or (
        ev.kind == "update"
        and (d.sessionUpdate == "agent_message_chunk" or d.sessionUpdate == "agent_thought_chunk")
      )
    then
      last_drain = uv.hrtime()
      break
    end
  end
  dispatch(events)
  local flushed, err = pcall(require("mia.writer").flush)
  if not flushed then
    report("buffer write", err)
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
    return
  end
  scheduled = true
  local wait_ns = last_drain + FRAME_NS - uv.hrtime()
  -- Text waits for the next frame; a call into Lua (a tool, a question) does not.
  if wait_ns <= 0 or urgent then
    timer:stop()
    vim.schedule(drain)
  else
    timer:start(math.ceil(wait_ns / 1e6), 0, function()
      vim.schedule(drain)
    end)
  end
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
