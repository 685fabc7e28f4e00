-- What `:Mia edit` takes of an answer (lua/mia/edit.lua `extract`): the
-- replacement, with prose and code fences around it stripped.
local edit = require("mia.edit")
local expect = require("expect")

return {
  {
    "a plain answer is the replacement, its final newline ending the last line",
    function()
      expect.eq(edit.extract("a = 1\n\tb = 2\n", "python"), { "a = 1", "\tb = 2" })
      expect.eq(edit.extract("a = 1", "python"), { "a = 1" })
    end,
  },
  {
    "a fenced block is the replacement; prose before and after it goes",
    function()
      expect.eq(edit.extract("Here it is:\n```python\nx = 1\n```\nShorter now.", "python"), { "x = 1" })
      expect.eq(edit.extract("```\n  y\n```", "c"), { "  y" })
      expect.eq(edit.extract("~~~lua\nz()\n~~~\n", "lua"), { "z()" })
    end,
  },
  {
    "an empty or prose-only answer holds no replacement (prose files excepted)",
    function()
      expect.eq(edit.extract("", "python"), nil)
      expect.eq(edit.extract("  \n", "python"), nil)
      expect.eq(edit.extract("I cannot do that. The lines are fine as they are.", "python"), nil)
      expect.eq(edit.extract("Sorry, this code has no bug.", "c"), nil)
      expect.eq(edit.extract("This is a sentence of the doc.", "markdown"), { "This is a sentence of the doc." })
      -- code that happens to end with a period is kept
      expect.eq(edit.extract("foo() -> ok.", "erlang"), { "foo() -> ok." })
    end,
  },
  {
    "while streaming: an opening fence shows nothing yet, an unclosed block shows what came",
    function()
      expect.eq(edit.extract("``", "python", true), {})
      expect.eq(edit.extract("```python\nx = 1\ny", "python", true), { "x = 1", "y" })
      expect.eq(edit.extract("```python\nx = 1\n``", "python", true), { "x = 1" })
      expect.eq(edit.extract("x = 1\ny", "python", true), { "x = 1", "y" })
    end,
  },
}
