-- Neovim config for benches/stream_bench.py. Loads mia (unless
-- MIA_BENCH_NO_MIA is set) and a baseline client that streams the way
-- today's Lua plugins do: a curl subprocess, each SSE line decoded in Lua
-- and written with its own scheduled nvim_buf_set_text.
local root = assert(vim.env.MIA_BENCH_ROOT)
local base_url = assert(vim.env.MIA_BENCH_BASE_URL)
vim.o.laststatus = 2
vim.o.shortmess = vim.o.shortmess .. "I"

_G.bench = { t = {}, n = {}, done = false, t0 = 0 }
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
  bench.t, bench.n, bench.done = {}, {}, false
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

--- mia's full path: :Mia prompt into the chat buffer.
function bench.start_mia(prompt)
  bench.detach = true
  require("mia.chat").clear()
  bench.detach = false
  bench.t0 = uv.hrtime()
  vim.cmd("Mia prompt " .. prompt)
  record(require("mia.chat").buffer())
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

function bench.result()
  return { t0 = bench.t0, t = bench.t, n = bench.n }
end
