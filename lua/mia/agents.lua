--- External agents speaking the Agent Client Protocol (`setup({ agents =
--- { NAME = { command, env, cwd } } })`): which one the chat talks to, and
--- the calls into the core that start, prompt and configure it. The core
--- runs the process and the protocol; everything here returns at once.

local M = {}

--- The agent the chat talks to: "mia" (mia's own) or a configured name.
local current = "mia"
--- Agent name -> the stream id whose out-of-turn events the chat watches.
local watched = {}

local function core()
  return require("mia")._core()
end

--- The configured agents' names, sorted.
--- @return string[]
function M.names()
  local names = vim.tbl_keys(require("mia.config").get().agents or {})
  table.sort(names)
  return names
end

--- The agent the chat talks to ("mia" for mia's own).
function M.current()
  return current
end

--- True while the chat talks to an external agent.
function M.external()
  return current ~= "mia"
end

--- The core's view of agent `name`'s configuration.
--- @return { name: string, command: string[], env: table<string,string>, cwd?: string }
function M.spec(name)
  local a = (require("mia.config").get().agents or {})[name]
  if not a then
    local names = M.names()
    error(
      string.format(
        "mia: no agent `%s` is configured. %s",
        tostring(name),
        #names > 0 and ("Configured: mia, " .. table.concat(names, ", "))
          or 'Add one with setup({ agents = { NAME = { command = { "program", "arg" } } } })'
      ),
      0
    )
  end
  local env = {}
  for k, v in pairs(a.env or {}) do
    env[k] = v
  end
  return {
    name = name,
    command = a.command,
    env = vim.empty_dict and (next(env) and env or vim.empty_dict()) or env,
    cwd = a.cwd and vim.fn.fnamemodify(a.cwd, ":p") or vim.fn.getcwd(),
  }
end

--- Watches agent `name`'s own stream (status, updates between turns).
local function watch(name, stream)
  if watched[name] == stream then
    return
  end
  watched[name] = stream
  local chat = require("mia.chat")
  require("mia.bridge").watch(stream, {
    on_update = function(u)
      if current == name then
        chat._agent_update(u)
      end
    end,
    on_mia = function(ev)
      if current == name then
        chat._mia_event(ev)
      elseif ev.type == "warning" then
        vim.notify(ev.text, vim.log.levels.WARN)
      end
    end,
  })
end

--- Switches the chat to agent `name` ("mia" switches back to mia's own).
--- The agent starts in the background; its startup shows in the chat.
function M.switch(name)
  name = vim.trim(name or "")
  if name == "" then
    local names = M.names()
    vim.notify(
      string.format("mia: the chat talks to `%s`. Agents: mia%s", current, #names > 0 and (", " .. table.concat(names, ", ")) or ""),
      vim.log.levels.INFO
    )
    return
  end
  if name == current then
    return
  end
  if name ~= "mia" then
    local spec = M.spec(name) -- fails with the list of configured agents
    local c = core()
    current = name
    require("mia.prompt").open()
    watch(name, require("mia.core").call(c.agent_connect, spec))
    local info = c.agent_info(name)
    require("mia.slash").set_external_commands(type(info) == "table" and info.commands or nil)
  else
    current = "mia"
    require("mia.slash").set_external_commands(nil)
  end
  require("mia.chat")._switched(name)
  vim.api.nvim_exec_autocmds("User", { pattern = "MiaAgentChanged", data = { agent = name } })
end

--- Sends `content` to the current external agent; returns the native handle.
function M.prompt(content, session_id)
  local spec = M.spec(current)
  local c = core()
  watch(current, require("mia.core").call(c.agent_connect, spec))
  return require("mia.core").call(c.agent_prompt, spec, {
    content = content,
    session_id = session_id,
    utc_offset_s = require("mia.costs").utc_offset(),
  })
end

--- What the current agent said about itself (`agentInfo`, `authMethods`,
--- `modes`, `configOptions`, `commands`), or nil before it started.
function M.info(name)
  local ok, info = pcall(function()
    return core().agent_info(name or current)
  end)
  return ok and type(info) == "table" and info or nil
end

--- The current agent's modes as ACP's SessionModeState, or nil.
function M.modes()
  local info = M.info()
  local modes = info and info.modes
  if type(modes) ~= "table" or type(modes.availableModes) ~= "table" then
    return nil
  end
  return modes
end

--- Asks the current agent to switch to mode `id` (`session/set_mode`).
function M.set_mode(id)
  local modes = M.modes()
  local known = {}
  for _, m in ipairs(modes and modes.availableModes or {}) do
    known[#known + 1] = m.id
    if m.id == id then
      local native = require("mia.core").call(core().agent_set_mode, M.spec(current), id)
      require("mia.bridge").watch(native.id, {
        on_done = function()
          vim.notify(string.format("mia: %s's mode is now %s", current, id), vim.log.levels.INFO)
        end,
        on_error = function(err)
          vim.notify(err.message, vim.log.levels.ERROR)
        end,
      })
      return
    end
  end
  error(
    string.format(
      "mia: the agent `%s` has no mode `%s`%s",
      current,
      tostring(id),
      #known > 0 and (". Its modes: " .. table.concat(known, ", ")) or " (it lists no modes)"
    ),
    0
  )
end

--- Ends agent `name`'s process (the next prompt starts it again).
function M.stop(name)
  pcall(core().agent_stop, name or current)
end

return M
