-- setup()'s validation (lua/mia/config.lua): one error naming the option.
local config = require("mia.config")
local expect = require("expect")

local root = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h:h:h")

local function sorted(list)
  local out = vim.deepcopy(list)
  table.sort(out)
  return out
end

--- The `--- @field` names of `--- @class mia.Config` in lua/mia/config.lua.
local function luacats_fields()
  local out, inside = {}, false
  for line in io.lines(root .. "/lua/mia/config.lua") do
    if line == "--- @class mia.Config" then
      inside = true
    elseif inside then
      local name = line:match("^%-%-%- @field ([%w_]+)")
      if not name then
        break
      end
      out[#out + 1] = name
    end
  end
  return out
end

--- The options doc/mia.txt lists under *mia-config* (up to the next section).
local function documented()
  local out, inside = {}, false
  for line in io.lines(root .. "/doc/mia.txt") do
    if line:find("*mia-config*", 1, true) then
      inside = true
    elseif inside and line:match("^=+$") then
      break
    elseif inside then
      local name = line:match("^    ([%l_]+)  +")
      if name then
        out[#out + 1] = name
      end
    end
  end
  return out
end

return {
  {
    "setup()'s options, their LuaCATS fields and the doc name the same keys",
    function()
      expect.eq(sorted(luacats_fields()), sorted(config.options), "LuaCATS @field of mia.Config")
      expect.eq(sorted(documented()), sorted(config.options), "options in :h mia-config")
    end,
  },
  {
    "an unknown option is refused, with the closest ones",
    function()
      expect.raises(function()
        config.set({ modle = "a/b" })
      end, { "`modle` is not a mia option; did you mean `mode`, `model`, `modes`?" })
      expect.raises(function()
        config.set({ colour = true })
      end, { "`colour` is not a mia option; see :h mia-config" })
    end,
  },
  {
    "a valid table is stored over the defaults",
    function()
      config.set({ model = "openai/gpt-4.1-mini" })
      expect.eq(config.get().model, "openai/gpt-4.1-mini")
      config.set({})
    end,
  },
  {
    "errors name the option, what it must be and what it got",
    function()
      expect.raises(function()
        config.set({ model = "gpt" })
      end, { "mia.setup: `model`", '"provider/model"', '"gpt"' })
      expect.raises(function()
        config.set({ providers = { x = { kind = "olama" } } })
      end, { "`providers.x.kind` must be one of", "olama" })
      expect.raises(function()
        config.set({ providers = { x = { kind = "openai_compatible" } } })
      end, { "`providers.x.base_url` is required" })
      expect.raises(function()
        config.set({ costs = { daily_limit_usd = "5" } })
      end, { "costs.daily_limit_usd" })
    end,
  },
}
