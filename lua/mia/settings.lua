--- What the native core and the UI derive from the configuration: the
--- provider and agent settings handed to the core, the modes. Kept apart
--- from mia.config so that setup() stays cheap.
---
--- The built-in providers, modes and tool precedence are the core's
--- (`mia_core.shared()`, crates/engine/src/shared.rs): this module reads them from there,
--- loading the native library on first need.

local M = {}

--- @type table? what mia_core.shared() returned
local shared = nil

--- The facts the core owns: `providers` (built-ins by name), `provider_kinds`,
--- `modes` (built-in, in order), `user_mode_permissions`, `default_mode`,
--- `tool_precedence`, and the formatters `format_usd`, `format_tokens`,
--- `provider_views`. Loads the native library (not its runtime) when needed;
--- raises the loader's one-line reason when it cannot.
--- @return table
function M.shared()
  local loader = require("mia.core")
  local core = loader.get()
  if not shared or shared.core ~= core then
    shared = { core = core, data = loader.call(core.shared) }
  end
  return shared.data
end

local function get()
  return require("mia.config").get()
end

--- The part of the configuration the native core needs.
function M.core()
  local c = get()
  local providers = {}
  for name, p in pairs(c.providers) do
    local entry = {
      kind = p.kind or M.shared().providers[name].kind,
      base_url = p.base_url,
      api_key_env = p.api_key_env,
      api_key = p.api_key,
      api_key_cmd = p.api_key_cmd,
      ["local"] = p["local"],
      prompt_caching = p.prompt_caching,
      api_version = p.api_version,
      api = p.api,
    }
    if p.native_tools ~= nil then
      entry.native_tools = p.native_tools
    end
    if p.headers and next(p.headers) then
      entry.headers = p.headers
    end
    if p.models and #p.models > 0 then
      entry.models = p.models
    end
    providers[name] = entry
  end
  return {
    providers = next(providers) and providers or nil,
    timeouts = c.timeouts,
    retry = c.retry,
    limits = c.limits,
    http = c.http,
    pricing = (c.pricing and next(c.pricing)) and c.pricing or nil,
  }
end

--- The part of the configuration the agent loop needs.
function M.agent()
  local c = get()
  local modes = M.modes()
  local policies, prompts, tools = {}, {}, {}
  for id, m in pairs(modes.by_id) do
    if m.tools then
      tools[id] = m.tools
    end
    policies[id] = vim.tbl_extend("force", m.permissions, (c.permissions.modes or {})[id] or {})
    if m.system then
      prompts[id] = m.system
    end
  end
  local rules = vim.deepcopy(c.permissions.rules or {})
  -- switch_mode belongs to the modes that propose leaving themselves (architect)
  for id, m in pairs(modes.by_id) do
    if not m.switch_mode then
      rules[#rules + 1] = { tool = "switch_mode", action = "deny", mode = id }
    end
  end
  -- The modes mia's own agent announces (ACP's availableModes), in order.
  local announced = {}
  for _, id in ipairs(modes.order) do
    local m = modes.by_id[id]
    announced[#announced + 1] = { id = id, name = m.name, description = m.description }
  end
  return {
    modes = announced,
    mode = c.mode,
    permissions = { modes = policies, rules = rules },
    mode_prompts = next(prompts) and prompts or vim.empty_dict(),
    mode_tools = next(tools) and tools or vim.empty_dict(),
    costs = c.budgets == false and { enabled = false }
      or (c.costs and next(c.costs)) and c.costs
      or vim.empty_dict(),
    data_dir = c.data_dir,
    max_turns = (c.tools or {}).max_turns,
    bash_timeout_ms = (c.tools or {}).bash_timeout_ms,
    max_read_bytes = (c.tools or {}).max_read_bytes,
    output_cap_bytes = (c.tools or {}).output_cap_bytes,
    checkpoints = M.checkpoints(c.checkpoints),
    mcp = M.mcp_servers(),
    rules = M.rules(c.rules),
    sandbox = c.sandbox,
  }
end

--- `setup({ rules })` as the core takes it.
function M.rules(r)
  if r == false then
    return { enabled = false }
  end
  r = r or {}
  local user = r.user_file
  if user == nil then
    user = vim.fn.stdpath("config") .. "/mia/rules.md"
  end
  return {
    enabled = true,
    files = r.files,
    user_file = user ~= false and vim.fs.normalize(user) or nil,
    max_bytes = (r.max_kb or 32) * 1024,
  }
end

--- The MCP servers of `setup({ mcp })` as the core takes them: a list sorted by name (nil when none).
function M.mcp_servers()
  local servers = ((get().mcp or {}).servers) or {}
  local out = {}
  for name, s in pairs(servers) do
    out[#out + 1] = {
      name = name,
      command = s.command,
      env = (s.env and next(s.env)) and s.env or nil,
      cwd = s.cwd and vim.fs.normalize(s.cwd) or nil,
      url = s.url,
      headers = (s.headers and next(s.headers)) and s.headers or nil,
      timeout_ms = s.timeout_ms,
      tool_prefix = s.tool_prefix,
      tool_names = (s.tool_names and next(s.tool_names)) and s.tool_names or nil,
      path_rules = s.path_rules,
      sandbox = s.sandbox and { data_dir = get().data_dir } or nil,
    }
  end
  table.sort(out, function(a, b)
    return a.name < b.name
  end)
  return next(out) and out or nil
end

--- `setup({ checkpoints })` in the core's units (bytes): `cp` is complete,
--- the user's values over the core's defaults (mia.config).
function M.checkpoints(cp)
  return {
    max_age_days = cp.max_age_days,
    max_bytes = cp.max_mb * 1024 * 1024,
    max_file_bytes = cp.max_file_kb * 1024,
    max_scan_files = cp.max_scan_files,
  }
end

--- Every mode (built-in ones first, then the user's), with its policy.
--- @return { order: string[], by_id: table<string, { name: string, description: string, permissions: table, system?: string, switch_mode?: boolean }> }
function M.modes()
  local core = M.shared()
  local by_id, order = {}, {}
  for _, m in ipairs(core.modes) do
    order[#order + 1] = m.id
    by_id[m.id] = vim.deepcopy(m)
    by_id[m.id].id = nil
  end
  local user = get().modes or {}
  local names = vim.tbl_keys(user)
  table.sort(names)
  for _, id in ipairs(names) do
    if not by_id[id] then
      order[#order + 1] = id
    end
    by_id[id] = vim.tbl_deep_extend("force", by_id[id] or {
      name = id,
      description = "",
      permissions = vim.deepcopy(core.user_mode_permissions),
    }, user[id])
  end
  return { order = order, by_id = by_id }
end

return M
