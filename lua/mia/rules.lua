--- Validation of permission rules for setup(): a rule with a typo must fail
--- loudly, never silently match nothing (a deny rule that never matches
--- allows everything). The glob syntax checked here is the one the core
--- compiles (globset's); the core checks again when it starts.

local M = {}

--- Tools mia ships (Rust and the editor tools in Lua); a test keeps this list
--- equal to what the core registers.
M.builtin_tools = {
  "read_file",
  "write_file",
  "edit_file",
  "list_dir",
  "glob",
  "grep",
  "bash",
  "update_plan",
  "list_buffers",
  "read_buffer",
  "diagnostics",
  "apply_buffer_edit",
  "switch_mode",
}

--- Why `pattern` is not a valid glob, or nil when it is.
--- @param pattern string
--- @return string?
function M.glob_problem(pattern)
  local i, n = 1, #pattern
  local depth = 0 -- of alternate groups {a,b}
  while i <= n do
    local c = pattern:sub(i, i)
    if c == "\\" then
      if i == n then
        return "dangling '\\' at the end"
      end
      i = i + 2
    elseif c == "[" then
      -- a class: `]` right after `[`, `[!` or `[^` is a literal member
      local j = i + 1
      if pattern:sub(j, j) == "!" or pattern:sub(j, j) == "^" then
        j = j + 1
      end
      local first = true
      local closed = false
      while j <= n do
        local d = pattern:sub(j, j)
        if d == "]" and not first then
          closed = true
          break
        end
        if pattern:sub(j + 1, j + 1) == "-" and j + 2 <= n and pattern:sub(j + 2, j + 2) ~= "]" then
          local lo, hi = d, pattern:sub(j + 2, j + 2)
          if lo > hi then
            return string.format("invalid range '%s-%s' in a character class", lo, hi)
          end
          j = j + 3
        else
          j = j + 1
        end
        first = false
      end
      if not closed then
        return "unclosed character class: missing ']' (write '\\[' for a literal '[')"
      end
      i = j + 1
    elseif c == "{" then
      depth = depth + 1
      i = i + 1
    elseif c == "}" then
      if depth == 0 then
        return "'}' without an opening '{' (write '\\}' for a literal '}')"
      end
      depth = depth - 1
      i = i + 1
    else
      i = i + 1
    end
  end
  if depth > 0 then
    return "unclosed alternate group: missing '}'"
  end
  return nil
end

local function is_glob(name)
  return name:find("[%*%?%[{]") ~= nil
end

local distance = require("mia.distance")

--- Every tool name known now: built-in ones and those registered so far.
local function known_tools()
  local names = {}
  for _, n in ipairs(M.builtin_tools) do
    names[n] = true
  end
  local tools = package.loaded["mia.tools"]
  if tools and tools.registered_names then
    for _, n in ipairs(tools.registered_names()) do
      names[n] = true
    end
  end
  return names
end

--- Raises the first problem of `rules`, naming the rule.
--- @param rules table[]
--- @param modes table<string, true> known mode ids
--- @param fail fun(path: string, what: string, got: any)
function M.validate(rules, modes, fail)
  local actions = { allow = true, ask = true, deny = true }
  local keys = { tool = true, pattern = true, action = true, mode = true }
  local known = nil
  for i, r in ipairs(rules) do
    local path = string.format("permissions.rules[%d]", i)
    if type(r) ~= "table" then
      fail(path, 'must be a table like { tool = "bash", pattern = "git status", action = "allow" }', r)
    end
    for k in pairs(r) do
      if not keys[k] then
        fail(path .. "." .. tostring(k), "is not a rule key (tool, pattern, action, mode)", r[k])
      end
    end
    if type(r.tool) ~= "string" or r.tool == "" then
      fail(path .. ".tool", 'must name a tool, or a glob such as "*"', r.tool)
    end
    if r.pattern ~= nil and type(r.pattern) ~= "string" then
      fail(path .. ".pattern", "must be a string (a glob on the path or command)", r.pattern)
    end
    if not actions[r.action] then
      fail(path .. ".action", 'must be "allow", "ask" or "deny"', r.action)
    end
    if r.mode ~= nil and not modes[r.mode] then
      local ids = vim.tbl_keys(modes)
      table.sort(ids)
      fail(path .. ".mode", "is not a mode (" .. table.concat(ids, ", ") .. ")", r.mode)
    end
    for _, key in ipairs({ "tool", "pattern" }) do
      local problem = r[key] and M.glob_problem(r[key])
      if problem then
        fail(path .. "." .. key, "is not a valid glob: " .. problem, r[key])
      end
    end
    if not is_glob(r.tool) then
      known = known or known_tools()
      if not known[r.tool] then
        local best, best_d = nil, math.huge
        for name in pairs(known) do
          local d = distance(r.tool, name)
          if d < best_d then
            best, best_d = name, d
          end
        end
        local hint = (best and best_d <= 3) and string.format(' (did you mean "%s"?)', best) or ""
        fail(
          path .. ".tool",
          "names no known tool"
            .. hint
            .. "; register your own tools before setup(), or write a glob (e.g. \"deploy*\") for tools registered later",
          r.tool
        )
      end
    end
  end
end

return M
