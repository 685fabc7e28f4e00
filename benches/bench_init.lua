-- Neovim config for benches/stream_bench.py. Loads mia (unless
-- MIA_BENCH_NO_MIA is set) and a baseline client that streams the way
-- today's Lua plugins do: a curl subprocess, each SSE line decoded in Lua
-- and written with its own scheduled nvim_buf_set_text.
local root = assert(vim.env.MIA_BENCH_ROOT)
local base_url = assert(vim.env.MIA_BENCH_BASE_URL)
if vim.env.MIA_BENCH_LOADER and vim.loader then
  -- Lua modules from Neovim's bytecode cache, as lazy.nvim sets up by default.
  vim.loader.enable()
end
vim.o.laststatus = 2
vim.o.shortmess = vim.o.shortmess .. "I"
-- No hit-enter prompt (Neovim 0.11+): while one shows, Neovim answers no
-- request until a key is pressed. An error stays in v:errmsg, which the
-- bench checks as it waits (stream_bench.py's Tui.poll).
pcall(function()
  vim.o.messagesopt = "wait:0,history:500"
end)

_G.bench = { t = {}, n = {}, done = false, t0 = 0, notices = {} }
-- Notices are kept, not echoed: a session summary's lines would stop the
-- TUI at a hit-enter prompt between runs.
vim.notify = function(msg)
  bench.notices[#bench.notices + 1] = msg
end
local api = vim.api
local uv = vim.uv or vim.loop

if not vim.env.MIA_BENCH_NO_MIA then
  vim.opt.rtp:prepend(root)
  vim.cmd("runtime plugin/mia.lua")
  require("mia").setup({
    model = "bench/echo",
    providers = { bench = { kind = "openai_compatible", base_url = base_url } },
  })
end

local function record(buf)
  bench.t, bench.n, bench.done, bench.buf = {}, {}, false, buf
  local total = 0
  api.nvim_buf_attach(buf, false, {
    on_bytes = function(_, _, _, _, _, _, _, _, _, _, _, new_end_byte)
      if bench.detach then
        return true
      end
      total = total + new_end_byte
      bench.t[#bench.t + 1] = uv.hrtime()
      bench.n[#bench.n + 1] = total
    end,
  })
end

--- mia's own work per frame on the main thread, one entry per drain that
--- took something: `drain` (the core's drain call), `dispatch` (from its
--- return to the writer's flush: the callbacks and the chat's renderer) and
--- `write` (the flush: one nvim_buf_set_text). `text` marks a frame whose
--- one event was plain answer text (the drain's string form); the others
--- carry more (most often a live cost update beside the text). The bridge
--- looks both functions up on every drain, so wrapping them here times the
--- frames without a change to mia; the wrappers add four clock reads.
bench.frames = {}
local function time_frames()
  if bench.frames_timed then
    return
  end
  bench.frames_timed = true
  local core = require("mia.core").get()
  local writer = require("mia.writer")
  local drain, flush = core.drain, writer.flush
  local open = nil -- the frame drained whose flush has not run yet
  core.drain = function(...)
    open = nil
    local t0 = uv.hrtime()
    -- All four values: the third names the stream of a plain text frame,
    -- the fourth holds the live figures that came with it (an "other" frame).
    local events, next_ms, text_stream, figures = drain(...)
    local t1 = uv.hrtime()
    local text = text_stream ~= nil and figures == nil
    if text or #events > 0 then
      open = { t0 = t0, t1 = t1, text = text }
    end
    return events, next_ms, text_stream, figures
  end
  writer.flush = function(...)
    local f = open
    open = nil
    if not f then
      return flush(...)
    end
    local t2 = uv.hrtime()
    flush(...)
    local t3 = uv.hrtime()
    bench.frames[#bench.frames + 1] = { who = "mia", text = f.text, drain = f.t1 - f.t0, dispatch = t2 - f.t1, write = t3 - t2 }
  end
end

--- The frames timed since the last call (see time_frames).
function bench.take_frames()
  local out = bench.frames
  bench.frames = {}
  return out
end

--- mia's full path: :Mia prompt into the chat buffer (with the chat's
--- regex syntax set to `syntax` when given, e.g. "markdown").
function bench.start_mia(prompt, syntax)
  bench.detach = true
  require("mia.chat").clear()
  bench.detach = false
  local chat = require("mia.chat").buffer()
  local want = syntax or require("mia.config").get().chat.syntax
  if vim.bo[chat].syntax ~= want then
    vim.bo[chat].syntax = want
  end
  time_frames()
  bench.frames = {}
  bench.t0 = uv.hrtime()
  vim.cmd("Mia prompt " .. prompt)
  record(chat)
end

--- The first prompt after start, timed to its end (MiaAnswerEnd).
function bench.first_turn()
  local t0 = uv.hrtime()
  vim.api.nvim_create_autocmd("User", {
    pattern = "MiaAnswerEnd",
    once = true,
    callback = function()
      bench.first_turn_ms = (uv.hrtime() - t0) / 1e6
    end,
  })
  vim.cmd("Mia prompt echo first")
end

--- The floor: no client, no server. The same text (the header, then the
--- scenario's tokens as they fall due) written into the chat window with
--- bare nvim_buf_set_text, one change per frame at mia's frame rate
--- (events.rs FRAME): what Neovim itself spends to show the stream.
function bench.start_floor(prompt)
  local words = vim.split(prompt, " ", { plain = true })
  local n = assert(tonumber(words[2]))
  local rate = words[1] == "slow" and assert(tonumber(words[3])) or math.huge
  bench.detach = true
  require("mia.chat").clear()
  bench.detach = false
  local chat = require("mia.chat").buffer()
  local want = require("mia.config").get().chat.syntax
  if vim.bo[chat].syntax ~= want then
    vim.bo[chat].syntax = want
  end
  bench.floor_finished = false
  bench.frames = {}
  bench.t0 = uv.hrtime()
  record(chat)
  local was_modifiable = vim.bo[chat].modifiable
  vim.bo[chat].modifiable = true
  local row, col = 0, 0
  local function put(text)
    local lines = vim.split(text, "\n", { plain = true })
    api.nvim_buf_set_text(chat, row, col, row, col, lines)
    row = row + #lines - 1
    col = #lines == 1 and col + #lines[1] or #lines[#lines]
  end
  put(string.format("## You\n\n%s\n\n## mia · bench/echo\n\n", prompt))
  local sent, start = 0, uv.hrtime()
  local timer = assert(uv.new_timer())
  local function frame()
    if bench.floor_finished then
      return
    end
    local due = rate == math.huge and n or math.min(n, math.floor((uv.hrtime() - start) / 1e9 * rate) + 1)
    if due > sent then
      local parts = {}
      for i = sent, due - 1 do
        parts[#parts + 1] = string.format("w%05d ", i)
      end
      sent = due
      local t0 = uv.hrtime()
      put(table.concat(parts))
      -- The floor's whole frame is its write: to set beside mia's (time_frames).
      bench.frames[#bench.frames + 1] = { who = "floor", text = true, drain = 0, dispatch = 0, write = uv.hrtime() - t0 }
    end
    if sent >= n then
      timer:stop()
      timer:close()
      vim.bo[chat].modifiable = was_modifiable
      bench.floor_finished = true
    end
  end
  timer:start(0, 33, function()
    vim.schedule(frame)
  end)
end

function bench.floor_done()
  return bench.floor_finished
end

function bench.start_mia_md(prompt)
  bench.start_mia(prompt, "markdown")
end

bench.mia_md_done = function()
  return bench.mia_done()
end

function bench.mia_done()
  return require("mia.chat").state() ~= "streaming"
end

local baseline_buf = nil
local function baseline_buffer()
  if baseline_buf and api.nvim_buf_is_valid(baseline_buf) then
    bench.detach = true
    api.nvim_buf_set_lines(baseline_buf, 0, -1, false, {})
    bench.detach = false
    return baseline_buf
  end
  baseline_buf = api.nvim_create_buf(false, true)
  vim.bo[baseline_buf].filetype = "markdown"
  vim.cmd("botright vsplit")
  api.nvim_win_set_buf(0, baseline_buf)
  vim.wo.wrap = true
  vim.wo.linebreak = true
  return baseline_buf
end

--- The baseline: what current Lua plugins do.
function bench.start_curl(prompt)
  local buf = baseline_buffer()
  record(buf)
  bench.t0 = uv.hrtime()
  local body = vim.json.encode({
    model = "echo",
    stream = true,
    messages = { { role = "user", content = prompt } },
  })
  local partial = ""
  vim.system({
    "curl", "-sS", "-N", "-H", "Content-Type: application/json", "-d", body, base_url .. "/chat/completions",
  }, {
    stdout = function(_, data)
      if not data then
        return
      end
      partial = partial .. data
      while true do
        local nl = partial:find("\n", 1, true)
        if not nl then
          break
        end
        local line = partial:sub(1, nl - 1)
        partial = partial:sub(nl + 1)
        if line:sub(1, 6) == "data: " then
          local payload = line:sub(7)
          vim.schedule(function()
            if payload == "[DONE]" then
              bench.done = true
              return
            end
            local ok, chunk = pcall(vim.json.decode, payload)
            local delta = ok and chunk.choices and chunk.choices[1] and chunk.choices[1].delta
            local text = delta and delta.content
            if type(text) == "string" and text ~= "" then
              local last = api.nvim_buf_line_count(buf) - 1
              local cur = api.nvim_buf_get_lines(buf, last, last + 1, true)[1]
              api.nvim_buf_set_text(buf, last, #cur, last, #cur, vim.split(text, "\n", { plain = true }))
            end
          end)
        end
      end
    end,
  })
end

function bench.curl_done()
  return bench.done
end

--- The times and byte counts of every change; `offset` is where the answer's
--- first word starts (mia's chat writes the prompt and a header first).
function bench.result()
  local offset = 0
  if bench.buf and api.nvim_buf_is_valid(bench.buf) then
    local text = table.concat(api.nvim_buf_get_lines(bench.buf, 0, -1, true), "\n")
    offset = (text:find("w00000 ", 1, true) or 1) - 1
  end
  return { t0 = bench.t0, t = bench.t, n = bench.n, offset = offset }
end

--- Typing while a stream runs: a scratch buffer in its own window, in
--- insert mode. Records when each typed change lands (on_bytes) and when
--- each redraw ends (a decoration provider's on_end, just before the grid
--- goes to the UI).
local typing = { buf = nil, win = nil, keys = {}, redraws = {} }
local typing_ns = api.nvim_create_namespace("bench_typing")
api.nvim_set_decoration_provider(typing_ns, {
  on_end = function()
    if typing.on then
      typing.redraws[#typing.redraws + 1] = uv.hrtime()
    end
  end,
})

--- Starts `client`'s stream of `prompt` (nil: none), then puts the cursor
--- in the typing window (the caller types `i`, as a user would).
function bench.typing_start(client, prompt)
  if client ~= nil and client ~= vim.NIL then
    bench["start_" .. client](prompt)
  end
  if not (typing.buf and api.nvim_buf_is_valid(typing.buf)) then
    typing.buf = api.nvim_create_buf(false, true)
    vim.cmd("topleft split")
    typing.win = api.nvim_get_current_win()
    api.nvim_win_set_buf(typing.win, typing.buf)
    -- Keys that wait in typeahead are inserted together: one change
    -- carries several, so each change records the bytes typed so far.
    api.nvim_buf_attach(typing.buf, false, {
      on_bytes = function(_, _, _, _, _, _, _, _, _, _, _, new_end_byte)
        if typing.on then
          typing.total = typing.total + new_end_byte
          typing.keys[#typing.keys + 1] = uv.hrtime()
          typing.counts[#typing.counts + 1] = typing.total
        end
      end,
    })
  end
  api.nvim_buf_set_lines(typing.buf, 0, -1, false, { "" })
  typing.keys, typing.counts, typing.redraws, typing.total, typing.on = {}, {}, {}, 0, true
  api.nvim_set_current_win(typing.win)
end

function bench.typing_result()
  typing.on = false
  vim.cmd("stopinsert")
  return {
    keys = typing.keys,
    counts = typing.counts,
    redraws = typing.redraws,
    text = api.nvim_buf_get_lines(typing.buf, 0, 1, true)[1],
  }
end
