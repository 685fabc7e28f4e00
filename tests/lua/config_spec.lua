-- setup()'s validation (lua/mia/config.lua): one error naming the option.
local config = require("mia.config")
local expect = require("expect")

return {
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
