--- What the native core and the UI derive from the configuration: the
--- provider and agent settings handed to the core, the modes, the built-in
--- providers. Kept apart from mia.config so that setup() stays cheap.

local M = {}

local function get()
  return require("mia.config").get()
end

--- The part of the configuration the native core needs.
function M.core()
  local c = get()
  local providers = {}
  for name, p in pairs(c.providers) do
    local entry = {
      kind = p.kind or M.builtin_providers[name].kind,
      base_url = p.base_url,
      api_key_env = p.api_key_env,
      api_key = p.api_key,
      prompt_caching = p.prompt_caching,
    }
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
  -- switch_mode belongs to architect mode only
  for id in pairs(modes.by_id) do
    if id ~= "architect" then
      rules[#rules + 1] = { tool = "switch_mode", action = "deny", mode = id }
    end
  end
  return {
    permissions = { modes = policies, rules = rules },
    mode_prompts = next(prompts) and prompts or vim.empty_dict(),
    mode_tools = next(tools) and tools or vim.empty_dict(),
    costs = (c.costs and next(c.costs)) and c.costs or vim.empty_dict(),
    data_dir = c.data_dir,
    max_turns = c.tools.max_turns,
    bash_timeout_ms = c.tools.bash_timeout_ms,
    max_read_bytes = c.tools.max_read_bytes,
    output_cap_bytes = c.tools.output_cap_bytes,
  }
end

local BUILTIN_MODES = {
  ask = {
    name = "Ask",
    description = "Asks before any change to files or any command",
    permissions = { read = "allow", write = "ask", execute = "ask" },
  },
  architect = {
    name = "Architect",
    description = "Plans and designs with read-only tools; proposes switching mode when the plan is ready",
    permissions = { read = "allow", write = "deny", execute = "deny" },
    system = "You are in architect mode: study the code with the read-only tools and produce a concrete plan. "
      .. "When the plan is ready, call switch_mode with the plan so the user can approve it.",
  },
  code = {
    name = "Code",
    description = "Full tool access; file changes inside the project are accepted without asking",
    permissions = { read = "allow", write = "allow", execute = "ask" },
  },
}

--- Every mode (built-in ones first, then the user's), with its policy.
--- @return { order: string[], by_id: table<string, { name: string, description: string, permissions: table, system?: string }> }
function M.modes()
  local by_id = vim.deepcopy(BUILTIN_MODES)
  local order = { "ask", "architect", "code" }
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
      permissions = { read = "allow", write = "ask", execute = "ask" },
    }, user[id])
  end
  return { order = order, by_id = by_id }
end

--- Built-in providers, as the core knows them (for :checkhealth).
M.builtin_providers = {
  anthropic = { kind = "anthropic", base_url = "https://api.anthropic.com", api_key_env = "ANTHROPIC_API_KEY" },
  openai = { kind = "openai", base_url = "https://api.openai.com/v1", api_key_env = "OPENAI_API_KEY" },
  gemini = {
    kind = "gemini",
    base_url = "https://generativelanguage.googleapis.com/v1beta",
    api_key_env = "GEMINI_API_KEY",
  },
}

return M
