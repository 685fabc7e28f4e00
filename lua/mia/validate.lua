--- Argument checks for mia's Lua API, worded as vim.validate words them
--- ("spec.name: expected string, got nil"). Not vim.validate itself: its
--- table form is deprecated from Neovim 0.11 (`:checkhealth vim.deprecated`
--- would list mia), and its positional form does not exist in 0.10.
---
---     require("mia.validate")({ name = { value, "string", optional } })

--- @param spec table<string, { [1]: any, [2]: string, [3]: boolean? }>
return function(spec)
  for name, s in pairs(spec) do
    local value, want, optional = s[1], s[2], s[3]
    if type(value) ~= want and not (optional and value == nil) then
      error(string.format("%s: expected %s, got %s", name, want, type(value)), 2)
    end
  end
end
