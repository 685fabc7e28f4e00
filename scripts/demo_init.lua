-- Neovim config for scripts/demo: mia from this checkout and nothing else.
local root = assert(vim.env.MIA_DEMO_ROOT, "run this through scripts/demo")
vim.opt.rtp:prepend(root)
vim.cmd("runtime plugin/mia.lua")
vim.o.laststatus = 2
vim.o.statusline = "%f %= %{v:lua.require'mia'.statusline()} "

local base_url = vim.env.MIA_DEMO_BASE_URL
if base_url then
  require("mia").setup({
    model = "scenarios/echo",
    providers = { scenarios = { kind = "openai_compatible", base_url = base_url } },
    -- a made-up price, so the demo shows the cost footer and :MiaCosts with figures
    pricing = { ["scenarios/echo"] = { input = 3, output = 15 } },
  })
else
  require("mia").setup({ model = "openai/gpt-4.1-mini" })
end
vim.api.nvim_echo({ { "mia demo: :Mia prompt {text}   :Mia stop   :checkhealth mia   :h mia", "MoreMsg" } }, false, {})
