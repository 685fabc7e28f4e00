--- The agent the chat talks to: mia's own, or an external agent speaking
--- the Agent Client Protocol (`setup({ agents = { NAME = { command, env,
--- cwd } } })`). The core answers for both through one interface (the
--- `agent_*` functions, given `M.target()`): what the agent offers (its
--- modes and settings, as it announced them), and the checks of what the
--- user chose. The core runs the process and the protocol; everything here
--- returns at once.

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

--- The current agent as the core's `agent_*` functions take it: nil for
--- mia's own, else the external agent's spec.
function M.target()
  if current == "mia" then
    return nil
  end
  return M.spec(current)
end

--- What the chat's live figures line names for an answer: the model for
--- mia's own agent, the agent's name for an external one (its model is its own).
--- @param model string
--- @return string
function M.answer_label(model)
  return current == "mia" and model or current
end

--- Whether the current agent runs mia's tools (the project's tools are
--- loaded for it); an external agent brings its own.
function M.runs_mia_tools()
  return current == "mia"
end

--- The current agent's `available_commands_update`: an external agent's
--- commands are typed as prompts (`mia.slash`); mia's own go to `own(list)`.
--- @param list table[]
--- @param own fun(list: table[])
function M.commands_changed(list, own)
  if current == "mia" then
    own(list)
  else
    require("mia.slash").set_external_commands(list)
  end
end

--- The core's view of agent `name`'s configuration.
--- @return { name: string, command: string[], env: table<string,string>, cwd?: string, mcp_servers?: table[] }
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
    cwd = vim.fs.normalize(a.cwd and vim.fn.fnamemodify(a.cwd, ":p") or vim.fn.getcwd()),
    -- The configured MCP servers go to its sessions unless `mcp = false`.
    mcp_servers = a.mcp ~= false and require("mia.settings").mcp_servers() or nil,
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
    M.spec(name) -- fails with the list of configured agents
    current = name
    require("mia.prompt").open()
    M.connect()
    local info = core().agent_info(name)
    require("mia.slash").set_external_commands(type(info) == "table" and info.commands or nil)
  else
    current = "mia"
    require("mia.slash").set_external_commands(nil)
  end
  require("mia.chat")._switched(name)
  vim.api.nvim_exec_autocmds("User", { pattern = "MiaAgentChanged", data = { agent = name } })
end

--- Starts the current agent if it is external (its stream is watched for
--- what it says between turns); nothing for mia's own.
function M.connect()
  local target = M.target()
  local stream = require("mia.core").call(core().agent_connect, target)
  if stream then
    watch(current, stream)
  end
  return target
end

--- Sends one prompt (the table `mia.chat.prompt_table` builds) of the
--- chat's session `session_id` to the current agent; returns the native handle.
function M.prompt(session_id, prompt)
  return require("mia.core").call(core().agent_prompt, M.connect(), session_id, prompt)
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

--- The current agent's config options (ACP's SessionConfigOption list,
--- from `session/new`, `session/load`, `config_option_update` and
--- `session/set_config_option`), or an empty list.
--- @return table[]
function M.config_options(name)
  local info = M.info(name)
  local list = {}
  for _, o in ipairs(info and type(info.configOptions) == "table" and info.configOptions or {}) do
    if type(o) == "table" and type(o.id) == "string" and (o.type == "select" or o.type == "boolean") then
      list[#list + 1] = o
    end
  end
  return list
end

--- The ids of the current agent's config options, in its order.
--- @return string[]
function M.config_ids()
  return vim.tbl_map(function(o)
    return o.id
  end, M.config_options())
end

--- A config option's values (a select's groups flattened; a boolean's
--- `true` and `false`), each `{ value, name }`.
--- @return { value: string, name: string }[]
function M.config_values(option)
  if option.type == "boolean" then
    return { { value = "true", name = "on" }, { value = "false", name = "off" } }
  end
  local out = {}
  local function add(o)
    if type(o) == "table" and o.value ~= nil then
      out[#out + 1] = { value = tostring(o.value), name = tostring(o.name or o.value) }
    end
  end
  for _, o in ipairs(type(option.options) == "table" and option.options or {}) do
    if type(o) == "table" and type(o.options) == "table" then
      for _, g in ipairs(o.options) do
        add(g)
      end
    else
      add(o)
    end
  end
  return out
end

local function config_option(id)
  for _, o in ipairs(M.config_options()) do
    if o.id == id then
      return o
    end
  end
  return nil
end

local function value_list(option)
  return table.concat(
    vim.tbl_map(function(v)
      return v.value
    end, M.config_values(option)),
    ", "
  )
end

--- Sets the current agent's config option `id` to `value`
--- (`session/set_config_option`); the core refuses unknown ids and values
--- with what exists (and mia's own agent, which has no settings).
--- @param id string
--- @param value string a select's value id, or "true"/"false" for a boolean
function M.set_config(id, value)
  local option = config_option(id) or {}
  local name = current
  local native = require("mia.core").call(core().agent_set_config, M.target(), id, value)
  local wire = value
  if option.type == "boolean" then
    wire = value == "true"
  end
  require("mia.bridge").watch(native.id, {
    on_done = function()
      vim.notify(string.format("mia: %s's %s is now %s", name, option.name or id, value), vim.log.levels.INFO)
      vim.api.nvim_exec_autocmds("User", { pattern = "MiaConfigOptionChanged", data = { agent = name, configId = id, value = wire } })
      vim.cmd.redrawstatus({ bang = true })
    end,
    on_error = function(err)
      vim.notify(err.message, vim.log.levels.ERROR)
    end,
  })
end

--- What `:Mia mode` shows for the current agent: its mode and settings with
--- their current values and choices.
--- @return string[]
function M.describe()
  local lines = {}
  local modes = M.modes()
  if modes then
    local ids = vim.tbl_map(function(m)
      return m.id
    end, modes.availableModes)
    lines[#lines + 1] = string.format("mode: %s  (%s)", tostring(modes.currentModeId or ""), table.concat(ids, ", "))
  else
    lines[#lines + 1] = string.format("mode: (%s lists no modes)", current)
  end
  for _, o in ipairs(M.config_options()) do
    lines[#lines + 1] = string.format(
      "%s = %s  (%s: %s)",
      o.id,
      tostring(o.currentValue),
      tostring(o.name or o.id),
      value_list(o)
    )
  end
  return lines
end

--- Completion after `:Mia mode`: with no word yet,
--- its mode ids and setting ids; after a setting id, that setting's values.
--- @param words string[] the whole words typed after `mode`
--- @return string[]
function M.complete_mode(words)
  if #words == 0 then
    local out = {}
    for _, m in ipairs((M.modes() or {}).availableModes or {}) do
      out[#out + 1] = m.id
    end
    vim.list_extend(out, M.config_ids())
    return out
  end
  local option = #words == 1 and config_option(words[1])
  if not option then
    return {}
  end
  return vim.tbl_map(function(v)
    return v.value
  end, M.config_values(option))
end

--- Loads session `id` of agent `name` (`session/load`): the chat switches
--- to the agent, clears, and draws the session as the agent replays it;
--- the next prompt continues it. Returns at once.
--- @param opts? { cwd?: string, title?: string, on_done?: fun(err?: table) }
function M.load(name, id, opts)
  opts = opts or {}
  local spec = M.spec(name) -- fails with the list of configured agents
  if current ~= name then
    M.switch(name)
  end
  local chat = require("mia.chat")
  chat._begin_agent_load(opts.title)
  M.connect()
  local native = require("mia.core").call(core().agent_load, spec, id, opts.cwd)
  require("mia.bridge").watch(native.id, {
    on_done = function()
      chat._agent_loaded(nil)
      vim.notify(string.format("mia: loaded %s's session %s", name, opts.title or id), vim.log.levels.INFO)
      if opts.on_done then
        opts.on_done(nil)
      end
    end,
    on_error = function(err)
      chat._agent_loaded(err)
      vim.notify(err.message, vim.log.levels.ERROR)
      if opts.on_done then
        opts.on_done(err)
      end
    end,
  })
end

--- Ends agent `name`'s process (the next prompt starts it again).
function M.stop(name)
  pcall(core().agent_stop, name or current)
end

return M
