--- `:Mia tools`: every registered tool grouped by source (built-in, plugin,
--- user, project) with its description and a summary of its parameters;
--- the current mode may offer the model fewer (|:Mia-tools| says so).

local M = {}

local TITLES = { builtin = "Built-in", mcp = "MCP", plugin = "Plugin", user = "User", project = "Project" }

local function params_summary(schema)
  if type(schema) ~= "table" or type(schema.properties) ~= "table" then
    return "()"
  end
  local required = {}
  for _, r in ipairs(schema.required or {}) do
    required[r] = true
  end
  local names = vim.tbl_keys(schema.properties)
  table.sort(names)
  local parts = {}
  for _, n in ipairs(names) do
    local p = schema.properties[n]
    parts[#parts + 1] = string.format("%s%s: %s", n, required[n] and "" or "?", type(p) == "table" and (p.type or "any") or "any")
  end
  return "(" .. table.concat(parts, ", ") .. ")"
end

--- The listing as lines.
function M.lines()
  local tools = require("mia.tools").list()
  local by = {}
  for _, t in ipairs(tools) do
    by[t.source] = by[t.source] or {}
    table.insert(by[t.source], t)
  end
  local out = {}
  -- sources in the core's order of precedence (list() has loaded it)
  for _, source in ipairs(require("mia.settings").shared().tool_precedence) do
    if by[source] then
      out[#out + 1] = string.format("## %s (%d)", TITLES[source] or source, #by[source])
      out[#out + 1] = ""
      for _, t in ipairs(by[source]) do
        out[#out + 1] = string.format("- **%s**%s [%s]", t.name, params_summary(t.parameters), t.effect)
        local desc = (t.description or ""):match("^[^\n]*")
        if desc ~= "" then
          out[#out + 1] = "  " .. desc
        end
      end
      out[#out + 1] = ""
    end
  end
  return out
end

--- Shows the listing in a scratch split.
function M.show()
  local lines = M.lines()
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].filetype = "markdown"
  vim.bo[buf].modifiable = false
  vim.bo[buf].bufhidden = "wipe"
  vim.cmd("botright split")
  vim.api.nvim_win_set_buf(0, buf)
  vim.api.nvim_buf_set_name(buf, "mia://tools")
  vim.keymap.set("n", "q", "<cmd>close<cr>", { buffer = buf, desc = "close" })
end

return M
