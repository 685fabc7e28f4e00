--- Project tools: `.mia/tools/*.lua` in a project. Each file returns a tool
--- spec (or a list of them). Since that runs code, the directory is loaded
--- only after the user trusts it once; the answer is remembered in
--- `data_dir/trusted.json` ("trust" or "never").

local M = {}

local uv = vim.uv or vim.loop

--- directories already handled in this Neovim (loaded, refused, or asked)
local seen = {}

local function trust_file()
  return require("mia.config").get().data_dir .. "/trusted.json"
end

local function read_trust()
  local f = io.open(trust_file(), "r")
  if not f then
    return {}
  end
  local text = f:read("*a")
  f:close()
  local ok, t = pcall(vim.json.decode, text)
  return ok and type(t) == "table" and t or {}
end

local function write_trust(t)
  vim.fn.mkdir(vim.fn.fnamemodify(trust_file(), ":h"), "p")
  local tmp = trust_file() .. ".tmp"
  local f = assert(io.open(tmp, "w"))
  f:write(vim.json.encode(t))
  f:close()
  assert(uv.fs_rename(tmp, trust_file()))
end

--- The remembered answer for `dir`: "trust", "never" or nil.
function M.trust_of(dir)
  return read_trust()[dir]
end

local function load_dir(dir)
  local files = vim.fn.glob(dir .. "/*.lua", false, true)
  table.sort(files)
  local loaded = {}
  for _, file in ipairs(files) do
    local ok, spec = pcall(dofile, file)
    if not ok then
      vim.notify(string.format("mia: project tool %s failed to load: %s", file, spec), vim.log.levels.ERROR)
    elseif type(spec) == "table" then
      local specs = spec.name and { spec } or spec
      for _, s in ipairs(specs) do
        local reg_ok, err = pcall(require("mia.tools").register, s, "project")
        if reg_ok then
          loaded[#loaded + 1] = s.name
        else
          vim.notify(string.format("mia: project tool in %s is invalid: %s", file, err), vim.log.levels.ERROR)
        end
      end
    end
  end
  return loaded
end

--- Loads the project tools of `root` (default: the working directory) if
--- the user trusts them; asks once when they have not decided yet.
--- @param root? string
function M.load(root)
  root = vim.fn.fnamemodify(root or vim.fn.getcwd(), ":p"):gsub("/$", "")
  local dir = root .. "/.mia/tools"
  if seen[dir] or vim.fn.isdirectory(dir) == 0 then
    return
  end
  seen[dir] = true
  local answer = M.trust_of(dir)
  if answer == "trust" then
    load_dir(dir)
    return
  elseif answer == "never" then
    return
  end
  local choices = { "Trust and load them", "Not now", "Never for this directory" }
  vim.ui.select(choices, {
    prompt = string.format("mia: %s holds project tools (Lua code). Load them?", dir),
    kind = "mia_trust",
  }, function(_, idx)
    if idx == 1 or idx == 3 then
      local t = read_trust()
      t[dir] = idx == 1 and "trust" or "never"
      write_trust(t)
    end
    if idx == 1 then
      local names = load_dir(dir)
      vim.notify(string.format("mia: loaded %d project tool(s): %s", #names, table.concat(names, ", ")))
    elseif idx ~= 3 then
      seen[dir] = nil -- ask again next time
    end
  end)
end

return M
