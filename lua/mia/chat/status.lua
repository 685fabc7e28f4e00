--- The live status line under the answer ("⏳ rate limited, retrying in 12s"):
--- virtual text, never part of the transcript.

local M = {}

local api = vim.api
local ns = api.nvim_create_namespace("mia_chat_status")

api.nvim_set_hl(0, "MiaStatus", { default = true, link = "DiagnosticWarn" })

local status = { timer = nil, mark = nil, buf = nil }

--- Removes the status line.
function M.clear()
  if not status.timer and not status.mark then
    return -- nothing shown: the common case, once per streamed chunk
  end
  if status.timer then
    status.timer:stop()
    status.timer:close()
    status.timer = nil
  end
  if status.buf and api.nvim_buf_is_valid(status.buf) then
    api.nvim_buf_clear_namespace(status.buf, ns, 0, -1)
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
    overloaded = "provider overloaded",
    network_error = "connection failed",
    timeout = "timed out",
  })[d.class] or d.class
  if type(d.max_retries) == "number" then
    return string.format("⏳ %s, retrying in %d s, %d/%d — :Mia stop cancels", what, seconds, d.attempt, d.max_retries)
  end
  return string.format("⏳ %s, retrying in %d s (attempt %d) — :Mia stop cancels", what, seconds, d.attempt)
end

--- Shows a retry (`{ attempt, delay_ms, class }`) below the last line of
--- `buf`, counting down each second.
function M.retry(buf, d)
  M.clear()
  status.buf = buf
  local deadline = vim.uv.now() + d.delay_ms
  local function draw()
    if not api.nvim_buf_is_valid(buf) then
      return
    end
    local seconds = math.max(0, math.ceil((deadline - vim.uv.now()) / 1000))
    local last = api.nvim_buf_line_count(buf) - 1
    status.mark = api.nvim_buf_set_extmark(buf, ns, last, 0, {
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

--- Shows `text` below the last line of `buf` (e.g. "starting the agent…").
function M.show(buf, text)
  M.clear()
  if not api.nvim_buf_is_valid(buf) then
    return
  end
  status.buf = buf
  local last = api.nvim_buf_line_count(buf) - 1
  status.mark = api.nvim_buf_set_extmark(buf, ns, last, 0, { virt_lines = { { { text, "MiaStatus" } } } })
end

local live_ns = api.nvim_create_namespace("mia_chat_live")
local live = { buf = nil, mark = nil }

--- Shows the live figures line (tokens and cost so far) below the last
--- line of `buf`; moves the one mark, so a redraw costs one extmark call.
function M.live(buf, text)
  if not api.nvim_buf_is_valid(buf) then
    return
  end
  if live.buf ~= buf then
    M.clear_live()
    live.buf = buf
  end
  local last = api.nvim_buf_line_count(buf) - 1
  live.mark = api.nvim_buf_set_extmark(buf, live_ns, last, 0, {
    id = live.mark,
    virt_lines = { { { text, "MiaCost" } } },
  })
end

--- Removes the live figures line.
function M.clear_live()
  if live.buf and api.nvim_buf_is_valid(live.buf) then
    api.nvim_buf_clear_namespace(live.buf, live_ns, 0, -1)
  end
  live.buf, live.mark = nil, nil
end

--- The live figures line shown under the answer in `buf`, or nil.
function M.live_text(buf)
  if not (buf and api.nvim_buf_is_valid(buf)) then
    return nil
  end
  local m = api.nvim_buf_get_extmarks(buf, live_ns, 0, -1, { details = true })[1]
  return m and m[4].virt_lines and m[4].virt_lines[1][1][1] or nil
end

--- Redraws every statusline now (they may show mia.statusline()'s live
--- cost) without redrawing the windows: `:redrawstatus!` runs a whole
--- screen update, which drew the chat's growing line a second time in the
--- frame (once for the statusline, once for the text written after it).
--- The windows are drawn once, when the event loop next redraws. Nothing
--- is redrawn until some statusline has called mia.statusline(): with
--- none showing mia's figures there is nothing new to draw.
function M.redraw_statuslines()
  local shown = package.loaded["mia.api"]
  if not (shown and shown._statusline_shown) then
    return
  end
  if api.nvim__redraw then
    api.nvim__redraw({ statusline = true, flush = false })
  else
    vim.cmd.redrawstatus({ bang = true })
  end
end

--- The status text shown under the answer in `buf`, or nil.
function M.text(buf)
  if not (buf and api.nvim_buf_is_valid(buf)) then
    return nil
  end
  local marks = api.nvim_buf_get_extmarks(buf, ns, 0, -1, { details = true })
  local m = marks[1]
  return m and m[4].virt_lines and m[4].virt_lines[1][1][1] or nil
end

return M
