-- Finding @-mentions in a prompt (lua/mia/mentions.lua).
local mentions = require("mia.mentions")
local expect = require("expect")

local function names(text)
  local found, n = mentions.find(text)
  local out = {}
  for kind, list in pairs(found) do
    for _, m in ipairs(list) do
      out[#out + 1] = kind.name .. ":" .. tostring(m.name or m.path or m.token or "")
    end
  end
  table.sort(out)
  return out, n
end

return {
  {
    "a mention is @ at the start or after a space, up to the next space",
    function()
      local _, n = names("look at @buffer and @selection.")
      expect.eq(n, 2, "two mentions")
      local _, none = names("mail me at a@b.c")
      expect.eq(none, 0, "an address is not a mention")
    end,
  },
  {
    "the same mention twice counts once, and a sentence's end is not part of it",
    function()
      local out, n = names("@buffer:init.lua, then @buffer:init.lua!")
      expect.eq(n, 1)
      expect.eq(out, { "buffer:init.lua" })
    end,
  },
}
