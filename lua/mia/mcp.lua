--- MCP servers from the editor's side: `:Mia mcp` (state, tools, resources,
--- prompts; `start`, `restart {server}`), `:checkhealth mia`'s MCP section,
--- and what the chat takes from them: resources as `@server:uri` mentions
--- and prompts as `/server:prompt` slash commands. Reading the state never
--- starts a server and never waits; starting one runs on the core's runtime
--- and reports back through a callback.

local M = {}

--- The configured servers' names, sorted.
--- @return string[]
function M.names()
  local out = {}
  for _, s in ipairs(require("mia.settings").mcp_servers() or {}) do
    out[#out + 1] = s.name
  end
  return out
end

--- Each configured server `{ name, state, tools?, resources?, prompts?,
--- reason? }`; the state is "not_started" for all when the native library
--- is not loaded yet.
--- @return table[]
function M.status()
  local servers = require("mia.settings").mcp_servers()
  if not servers then
    return {}
  end
  local loader = require("mia.core")
  if not loader.is_loaded() then
    return vim.tbl_map(function(s)
      return { name = s.name, state = "not_started" }
    end, servers)
  end
  return loader.call(loader.get().mcp_status, servers)
end

local function count(n, word)
  return string.format("%d %s%s", n, word, n == 1 and "" or "s")
end

--- A prompt's arguments as an input hint: `city=<required> state=<optional>`.
--- @param p { arguments?: { name: string, required: boolean }[] }
--- @return string?
function M.prompt_hint(p)
  local parts = {}
  for _, a in ipairs(p.arguments or {}) do
    parts[#parts + 1] = string.format("%s=<%s>", a.name, a.required and "required" or "optional")
  end
  return #parts > 0 and table.concat(parts, " ") or nil
end

--- One line per server; a server's tools, resources and prompts too when
--- `only` names it.
--- @param only? string a server's name
--- @return string[]
function M.lines(only)
  local lines = {}
  for _, s in ipairs(M.status()) do
    if not only or only == "" or only == s.name then
      local line
      if s.state == "ready" then
        line = string.format(
          "%s: ready, %s, %s, %s",
          s.name,
          count(#s.tools, "tool"),
          count(#(s.resources or {}), "resource"),
          count(#(s.prompts or {}), "prompt")
        )
      elseif s.state == "failed" then
        line = string.format("%s: failed: %s", s.name, s.reason)
      elseif s.state == "starting" then
        line = s.name .. ": starting"
      else
        line = s.name .. ": not started (starts when the agent first needs tools, or :Mia mcp start)"
      end
      lines[#lines + 1] = line
      if only and only ~= "" and s.state == "ready" then
        lines[#lines + 1] = "  tools:"
        for _, t in ipairs(s.tools) do
          lines[#lines + 1] = "    " .. t
        end
        if s.skipped and #s.skipped > 0 then
          lines[#lines + 1] = "  left out (rename them in tool_names):"
          for _, why in ipairs(s.skipped) do
            lines[#lines + 1] = "    " .. why
          end
        end
        lines[#lines + 1] = "  resources (mention them in the chat as @" .. s.name .. ":URI):"
        for _, r in ipairs(s.resources or {}) do
          lines[#lines + 1] = "    " .. r.uri .. (r.name ~= "" and ("  " .. r.name) or "")
        end
        lines[#lines + 1] = "  prompts (slash commands in the chat):"
        for _, p in ipairs(s.prompts or {}) do
          local hint = M.prompt_hint(p)
          lines[#lines + 1] = "    /" .. s.name .. ":" .. p.name .. (hint and (" " .. hint) or "")
        end
      end
    end
  end
  return lines
end

--- Callbacks waiting for the start in flight (nil when none runs).
local waiting = nil

--- Starts the configured servers not started yet, in the core, without
--- waiting; `cb()` runs on the main thread once they are ready or failed
--- (each failure is reported once). A start already running is joined.
--- @param cb? fun()
function M.start(cb)
  local servers = require("mia.settings").mcp_servers()
  if not servers then
    if cb then
      cb()
    end
    return
  end
  if waiting then
    waiting[#waiting + 1] = cb
    return
  end
  waiting = { cb }
  local api = require("mia.api")
  local ok, err = pcall(api._job, "mcp_start", function(job_err, warnings)
    local cbs = waiting or {}
    waiting = nil
    if job_err then
      vim.notify("mia: MCP servers did not start: " .. tostring(job_err.message or job_err), vim.log.levels.ERROR)
    end
    for _, w in ipairs(warnings or {}) do
      vim.notify(w, vim.log.levels.WARN)
    end
    require("mia.slash").announce()
    for _, f in ipairs(cbs) do
      pcall(f)
    end
  end, servers)
  if not ok then
    waiting = nil
    error(err, 0)
  end
end

--- True when some configured server has not been started yet.
function M.any_not_started()
  for _, s in ipairs(M.status()) do
    if s.state == "not_started" then
      return true
    end
  end
  return false
end

--- Stops server `name` (its process ends) and starts it again; says when
--- it is ready or why it failed.
--- @param name string
function M.restart(name)
  if not vim.tbl_contains(M.names(), name) then
    error("mia: no MCP server named `" .. name .. "`; configured: " .. table.concat(M.names(), ", "), 0)
  end
  vim.notify("mia: restarting MCP server `" .. name .. "`…", vim.log.levels.INFO)
  require("mia.api")._job("mcp_restart", function(err, s)
    if err then
      vim.notify("mia: " .. tostring(err.message or err), vim.log.levels.ERROR)
    else
      vim.notify("mia: " .. (M.lines(s.name)[1] or (name .. ": ready")), vim.log.levels.INFO)
    end
    require("mia.slash").announce()
  end, require("mia.settings").mcp_servers(), name)
end

--- Every resource of the ready servers `{ server, uri, name, description, mime_type }`.
--- @return table[]
function M.resources()
  local out = {}
  for _, s in ipairs(M.status()) do
    for _, r in ipairs(s.resources or {}) do
      out[#out + 1] = vim.tbl_extend("force", r, { server = s.name })
    end
  end
  return out
end

--- Every prompt of the ready servers `{ server, name, description, arguments }`.
--- @return table[]
function M.prompts()
  local out = {}
  for _, s in ipairs(M.status()) do
    for _, p in ipairs(s.prompts or {}) do
      out[#out + 1] = vim.tbl_extend("force", p, { server = s.name })
    end
  end
  return out
end

--- Splits `key=value key2="quoted value"` into a table; errors name the
--- word that is not `key=value`.
--- @param input string
--- @return table<string, string>
function M.parse_args(input)
  local args = {}
  local i = 1
  local n = #input
  while i <= n do
    local s = input:find("%S", i)
    if not s then
      break
    end
    local key, after = input:match("^([%w_%-%.]+)=()", s)
    if not key then
      local word = input:match("^%S+", s)
      error(string.format("mia: `%s` is not key=value (quote values with spaces: key=\"a b\")", word), 0)
    end
    local q = input:sub(after, after)
    local value
    if q == '"' or q == "'" then
      local close = input:find(q, after + 1, true)
      if not close then
        error(string.format("mia: the value of `%s` has no closing %s", key, q), 0)
      end
      value = input:sub(after + 1, close - 1)
      i = close + 1
    else
      local stop = input:find("%s", after) or (n + 1)
      value = input:sub(after, stop - 1)
      i = stop
    end
    args[key] = value
  end
  return args
end

--- Runs prompt `p` of server `server` with the typed `input` (key=value
--- pairs): its required arguments are checked here, the prompt is got in
--- the core, and its messages are sent to the model as the user's message.
--- @param server string
--- @param p table the prompt as listed
--- @param input string
function M.run_prompt(server, p, input)
  local args = M.parse_args(input)
  for _, a in ipairs(p.arguments or {}) do
    if a.required and (args[a.name] == nil or args[a.name] == "") then
      error(
        string.format(
          "mia: /%s:%s needs the argument `%s` (usage: /%s:%s %s)",
          server,
          p.name,
          a.name,
          server,
          p.name,
          M.prompt_hint(p) or ""
        ),
        0
      )
    end
  end
  require("mia.api")._job("mcp_prompt", function(err, text)
    if err then
      vim.notify("mia: /" .. server .. ":" .. p.name .. " failed: " .. tostring(err.message or err), vim.log.levels.ERROR)
      return
    end
    local ok, e = pcall(require("mia.chat").prompt, text)
    if not ok then
      vim.notify(tostring(e), vim.log.levels.ERROR)
    end
  end, require("mia.settings").mcp_servers(), server, p.name, args)
end

--- Completion of `:Mia mcp …`: `before` is the command line after `Mia `.
--- @param before string
--- @param arglead string
--- @return string[]
function M.complete(before, arglead)
  local list
  if before:match("^mcp%s+restart%s+%S*$") then
    list = M.names()
  elseif before:match("^mcp%s+%S*$") then
    list = vim.list_extend(M.names(), { "restart", "start" })
  else
    list = {}
  end
  return vim.tbl_filter(function(n)
    return vim.startswith(n, arglead)
  end, list)
end

--- `:Mia mcp [name]`, `:Mia mcp start`, `:Mia mcp restart {name}`.
--- @param args string
function M.show(args)
  local words = vim.split(vim.trim(args or ""), "%s+", { trimempty = true })
  if #M.names() == 0 then
    vim.notify(
      'mia: no MCP servers configured. Add setup({ mcp = { servers = { NAME = { command = { "program" } } } } }) (:h mia-mcp)',
      vim.log.levels.INFO
    )
    return
  end
  local names = M.names()
  if words[1] == "restart" and not vim.tbl_contains(names, "restart") then
    if not words[2] then
      error("mia: usage: :Mia mcp restart {server} (configured: " .. table.concat(names, ", ") .. ")", 0)
    end
    M.restart(words[2])
    return
  end
  if words[1] == "start" and not vim.tbl_contains(names, "start") then
    if not M.any_not_started() then
      vim.notify("mia: every MCP server has been started (:Mia mcp restart {server} starts one again)", vim.log.levels.INFO)
      return
    end
    vim.notify("mia: starting MCP servers…", vim.log.levels.INFO)
    M.start(function()
      vim.api.nvim_echo({ { table.concat(M.lines(), "\n") } }, true, {})
    end)
    return
  end
  local name = words[1] or ""
  if name ~= "" and not vim.tbl_contains(names, name) then
    error("mia: no MCP server named `" .. name .. "`; configured: " .. table.concat(names, ", "), 0)
  end
  vim.api.nvim_echo({ { table.concat(M.lines(name), "\n") } }, true, {})
end

return M
