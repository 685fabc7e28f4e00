--- Slash commands: `/help`, `/costs`, `/tools`, `/mode`, `/model`,
--- `/sessions`, `/new`, `/clear`, `/compact` and the user's own
--- (`mia.register_command`), and each MCP server's prompts as
--- `/server:prompt`. A line starting with `/` is a command, never a
--- message to the model; an unknown one says so and suggests close names.
--- Their shape follows the Agent Client Protocol's AvailableCommand.

local M = {}

--- @class mia.Command
--- @field name string without the slash
--- @field description string
--- @field input_hint? string shown after the name while typing its input
--- @field run fun(input: string, ctx: { session_id: string })
--- @field available? fun(): boolean false hides the command (e.g. /compact on an empty chat)
--- @field complete? fun(arglead: string): string[]

--- @type table<string, mia.Command>
local commands = {}
local order = {}

local function add(cmd)
  if not commands[cmd.name] then
    order[#order + 1] = cmd.name
  end
  commands[cmd.name] = cmd
end

local function chat()
  return require("mia.chat")
end

local function lines_message(lines)
  vim.api.nvim_echo({ { table.concat(lines, "\n") } }, true, {})
end

add({
  name = "help",
  description = "list the slash commands",
  run = function()
    local lines = { "mia slash commands:" }
    for _, c in ipairs(M.available()) do
      lines[#lines + 1] = string.format("  /%-10s %s%s", c.name, c.description, c.input and ("  (" .. c.input.hint .. ")") or "")
    end
    lines_message(lines)
  end,
})
add({
  name = "costs",
  description = "cost report",
  input_hint = "session | daily | weekly | model {id} | provider {id}",
  run = function(input)
    require("mia.commands").subcommands.costs.run(input ~= "" and input or "session")
  end,
  complete = function()
    return { "session", "daily", "weekly", "model ", "provider " }
  end,
})
add({
  name = "tools",
  description = "list the tools the model can call",
  run = function()
    require("mia.tools.view").show()
  end,
})
add({
  name = "mode",
  description = "show or switch the mode (an external agent's settings too)",
  input_hint = "mode id | setting value",
  run = function(input)
    local agents = require("mia.agents")
    if input == "" then
      lines_message(agents.describe())
      return
    end
    local id, value = input:match("^(%S+)%s+(.-)%s*$")
    if id then
      agents.set_config(id, value)
      return
    end
    require("mia").set_mode(input)
  end,
  complete = function(arg)
    local agents = require("mia.agents")
    local first = arg:match("^(%S+)%s")
    if first then
      return vim.tbl_map(function(v)
        return first .. " " .. v
      end, agents.complete_mode({ first }))
    end
    return agents.complete_mode({})
  end,
})
add({
  name = "model",
  description = "show or switch the model",
  input_hint = "provider/model",
  run = function(input)
    local config = require("mia.config")
    if input == "" then
      lines_message({ "model: " .. config.get().model })
      return
    end
    if not input:match("^[^/]+/.+") then
      error('mia: /model needs "provider/model", e.g. /model openai/gpt-4.1', 0)
    end
    config.get().model = input
    vim.cmd.redrawstatus({ bang = true })
  end,
  complete = function()
    local out = {}
    for name, p in pairs(require("mia.config").get().providers) do
      for _, m in ipairs(p.models or {}) do
        out[#out + 1] = name .. "/" .. m
      end
    end
    table.sort(out)
    return out
  end,
})
add({
  name = "sessions",
  description = "pick a past session to resume",
  run = function()
    require("mia.sessions").pick()
  end,
})
add({
  name = "new",
  description = "start a new session",
  run = function()
    chat().new_session()
  end,
})
add({
  name = "clear",
  description = "clear the chat (starts a new session)",
  run = function()
    chat().clear()
  end,
})
--- The commands the core offers for the chat's session (its
--- available_commands_update), by name.
local agent_commands = {}

--- `list` by name (entries without a name are skipped).
local function by_name(list)
  local out = {}
  for _, c in ipairs(type(list) == "table" and list or {}) do
    if type(c) == "table" and type(c.name) == "string" then
      out[c.name] = c
    end
  end
  return out
end

--- Takes the core's available_commands_update for the chat's session and
--- announces the change (`User MiaCommandsChanged`).
function M.set_agent_commands(list)
  agent_commands = by_name(list)
  M.announce()
end

add({
  name = "compact",
  description = "summarize the conversation so far to save context",
  available = function()
    return agent_commands.compact ~= nil
  end,
  run = function()
    chat().compact()
  end,
})

--- The commands of the external agent the chat talks to (its
--- available_commands_update), in their order; nil for mia's own agent.
local external = nil
--- Names of mia's commands that stay available beside an external agent's.
local KEEP_WITH_AGENT = { help = true, costs = true, mode = true, sessions = true, new = true, clear = true }

--- Takes an external agent's commands (nil: back to mia's own agent).
--- Typed in the chat, they are sent to the agent as the prompt text.
function M.set_external_commands(list)
  external = nil
  if type(list) == "table" then
    external = {}
    for _, c in ipairs(list) do
      if type(c) == "table" and type(c.name) == "string" then
        external[#external + 1] = c
      end
    end
  end
  M.announce()
end

--- The command named `name` in `list`, if any.
local function named(list, name)
  for _, c in ipairs(list or {}) do
    if c.name == name then
      return c
    end
  end
  return nil
end

local function external_command(name)
  return named(external, name)
end

--- The MCP servers' prompts as commands (`server:prompt`), when the chat
--- talks to mia's own agent and some server is ready.
--- @return { name: string, description: string, input?: { hint: string }, server: string, prompt: table }[]
local function mcp_prompt_commands()
  if external or not require("mia.settings").mcp_servers() then
    return {}
  end
  local mcp = require("mia.mcp")
  local ok, prompts = pcall(mcp.prompts)
  if not ok then
    return {}
  end
  local out = {}
  for _, p in ipairs(prompts) do
    local hint = mcp.prompt_hint(p)
    out[#out + 1] = {
      name = p.server .. ":" .. p.name,
      description = p.description or "",
      input = hint and { hint = hint } or nil,
      server = p.server,
      prompt = p,
    }
  end
  return out
end

local function mcp_prompt_command(name)
  return named(mcp_prompt_commands(), name)
end

--- The commands available now, in ACP's AvailableCommand shape.
--- @return { name: string, description: string, input?: { hint: string } }[]
function M.available()
  local out = {}
  for _, c in ipairs(external or {}) do
    local hint = type(c.input) == "table" and c.input.hint or nil
    out[#out + 1] = { name = c.name, description = c.description or "", input = hint and { hint = hint } or nil }
  end
  for _, name in ipairs(order) do
    local c = commands[name]
    if (not external or (KEEP_WITH_AGENT[name] and not external_command(name))) and (not c.available or c.available()) then
      out[#out + 1] = { name = c.name, description = c.description, input = c.input_hint and { hint = c.input_hint } or nil }
    end
  end
  for _, c in ipairs(mcp_prompt_commands()) do
    out[#out + 1] = { name = c.name, description = c.description, input = c.input }
  end
  return out
end

local last_announced = nil

--- Fires `User MiaCommandsChanged` (ACP's available_commands_update) when the
--- list of available commands differs from the last one announced.
function M.announce()
  local list = M.available()
  local key = vim.inspect(list)
  if key == last_announced then
    return
  end
  last_announced = key
  vim.api.nvim_exec_autocmds("User", {
    pattern = "MiaCommandsChanged",
    data = { sessionUpdate = "available_commands_update", availableCommands = list },
  })
end

--- Registers a user command (replaces one of the same name).
--- @param cmd mia.Command
function M.register(cmd)
  require("mia.validate")({
    cmd = { cmd, "table" },
    ["cmd.name"] = { cmd.name, "string" },
    ["cmd.description"] = { cmd.description, "string" },
    ["cmd.run"] = { cmd.run, "function" },
    ["cmd.input_hint"] = { cmd.input_hint, "string", true },
  })
  if not cmd.name:match("^[%w_%-]+$") then
    error("mia.register_command: `name` may hold only letters, digits, _ and - (got " .. vim.inspect(cmd.name) .. ")", 2)
  end
  add(cmd)
  M.announce()
end

local distance = require("mia.distance")

--- Names close to `name` (prefix, or at most two edits away).
function M.close_matches(name)
  local out = {}
  for _, c in ipairs(M.available()) do
    if vim.startswith(c.name, name) or distance(c.name, name) <= 2 then
      out[#out + 1] = "/" .. c.name
    end
  end
  return out
end

--- Runs `text` if it is a slash command. Returns true when it was one (run
--- or refused); false means it is a message for the model.
--- @param text string
function M.dispatch(text)
  local name, input = text:match("^%s*/([%w_%-%.:]*)%s*(.-)%s*$")
  if not name then
    return false
  end
  if external and external_command(name) then
    return false -- the agent's own command: the text goes to the agent
  end
  local server = not external and name:match("^([%w_%-]+):.")
  if server and vim.tbl_contains(require("mia.mcp").names(), server) then
    local c = mcp_prompt_command(name)
    if c then
      require("mia.mcp").run_prompt(c.server, c.prompt, input)
      return true
    end
    local mcp = require("mia.mcp")
    if mcp.any_not_started() then
      mcp.start()
      error(string.format("mia: MCP server `%s` was not started; it is starting now: send /%s again when it is ready (:Mia mcp)", server, name), 0)
    end
    error(string.format("mia: MCP server `%s` has no prompt `%s` (:Mia mcp %s lists its prompts)", server, name:sub(#server + 2), server), 0)
  end
  local cmd = commands[name]
  if external and cmd and not KEEP_WITH_AGENT[name] then
    cmd = nil
  end
  if not cmd or (cmd.available and not cmd.available()) then
    local close = M.close_matches(name)
    local hint = #close > 0 and (" Did you mean " .. table.concat(close, ", ") .. "?") or " Type /help for the list."
    if cmd then
      error(string.format("mia: /%s is not available now.%s", name, hint), 0)
    end
    error(string.format("mia: unknown command /%s.%s", name, hint), 0)
  end
  cmd.run(input, { session_id = chat().session_id() })
  M.announce()
  return true
end

--- Completion items for the text before the cursor (used by the prompt
--- buffer's omnifunc/completefunc): command names with descriptions, then
--- the command's input hint and values.
--- @param before string the line up to the cursor
--- @param on_more? fun() runs when more commands may be offered (MCP servers started for this completion are ready)
--- @return integer start_col (0-based), table[] items
function M.complete(before, on_more)
  local name_part = before:match("^%s*/([%w_%-%.:]*)$")
  if name_part then
    if on_more and not external and require("mia.settings").mcp_servers() then
      local mcp = require("mia.mcp")
      if mcp.any_not_started() then
        -- Not from inside the completion function (text is locked there).
        vim.schedule(function()
          local ok, err = pcall(mcp.start, on_more)
          if not ok then
            vim.notify(tostring(err), vim.log.levels.ERROR)
          end
        end)
      end
    end
    local items = {}
    for _, c in ipairs(M.available()) do
      if vim.startswith(c.name, name_part) then
        items[#items + 1] = { word = "/" .. c.name, menu = c.description, info = c.input and c.input.hint or "" }
      end
    end
    return before:find("/") - 1, items
  end
  local name, arg = before:match("^%s*/([%w_%-%.:]+)%s+(.*)$")
  local ext = name and (external_command(name) or (name:find(":", 1, true) and mcp_prompt_command(name)))
  if ext then
    local hint = type(ext.input) == "table" and ext.input.hint or nil
    if hint then
      return #before - #arg, { { word = arg, abbr = hint, menu = "input", empty = 1, dup = 1 } }
    end
    return -1, {}
  end
  local cmd = name and commands[name]
  if not cmd then
    return -1, {}
  end
  local items = {}
  local values = cmd.complete and cmd.complete(arg) or {}
  for _, v in ipairs(values) do
    if vim.startswith(v, arg) then
      items[#items + 1] = { word = v, menu = cmd.input_hint }
    end
  end
  if #items == 0 and cmd.input_hint then
    items[1] = { word = arg, abbr = cmd.input_hint, menu = "input", empty = 1, dup = 1 }
  end
  return #before - #arg, items
end

-- The core's commands that reached the chat before this module was loaded
-- (nobody listened for their announcement then, so none is made now).
if package.loaded["mia.chat"] then
  agent_commands = by_name(package.loaded["mia.chat"]._agent_commands)
end

return M
