--- `:Mia mcp` and `:checkhealth mia`'s MCP section: each configured server's
--- state as the core knows it. Reading it never starts a server and never
--- waits: servers start when the agent loop first needs the tool list.

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

--- Each configured server `{ name, state, tools?, reason? }`; the state is
--- "not_started" for all when the native library is not loaded yet.
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

--- One line per server (and its tools when `name` is given).
--- @param only? string a server's name
--- @return string[]
function M.lines(only)
  local lines = {}
  for _, s in ipairs(M.status()) do
    if not only or only == "" or only == s.name then
      local line
      if s.state == "ready" then
        line = string.format("%s: ready, %d tool%s", s.name, #s.tools, #s.tools == 1 and "" or "s")
      elseif s.state == "failed" then
        line = string.format("%s: failed: %s", s.name, s.reason)
      elseif s.state == "starting" then
        line = s.name .. ": starting"
      else
        line = s.name .. ": not started (starts when the agent first needs tools)"
      end
      lines[#lines + 1] = line
      if only and only ~= "" and s.tools then
        for _, t in ipairs(s.tools) do
          lines[#lines + 1] = "  " .. t
        end
      end
    end
  end
  return lines
end

--- `:Mia mcp [name]`.
--- @param args string
function M.show(args)
  local name = vim.trim(args or "")
  if #M.names() == 0 then
    vim.notify(
      'mia: no MCP servers configured. Add setup({ mcp = { servers = { NAME = { command = { "program" } } } } }) (:h mia-mcp)',
      vim.log.levels.INFO
    )
    return
  end
  if name ~= "" and not vim.tbl_contains(M.names(), name) then
    error("mia: no MCP server named `" .. name .. "`; configured: " .. table.concat(M.names(), ", "), 0)
  end
  vim.api.nvim_echo({ { table.concat(M.lines(name), "\n") } }, true, {})
end

return M
