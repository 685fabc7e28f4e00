-- Slash command names (lua/mia/slash.lua): what a typo is offered.
local slash = require("mia.slash")
local expect = require("expect")

return {
  {
    "a near miss is offered the commands two edits away or starting with it",
    function()
      local close = slash.close_matches("cost")
      assert(vim.tbl_contains(close, "/costs"), vim.inspect(close))
      close = slash.close_matches("clera")
      assert(vim.tbl_contains(close, "/clear"), vim.inspect(close))
      expect.eq(slash.close_matches("zzzzzzzz"), {})
    end,
  },
  {
    "text that is not a slash command is left for the model",
    function()
      expect.eq(slash.dispatch("hello /costs"), false)
      expect.eq(slash.dispatch("  just words"), false)
    end,
  },
}
