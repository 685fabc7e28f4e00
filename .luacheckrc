-- Lua lint for mia (luacheck; scripts/test runs it).
std = "luajit"
globals = { "vim" }
max_line_length = false
-- Callbacks keep Neovim's argument lists even when they use only some.
unused_args = false
exclude_files = { ".venv/**", "target/**" }
files["benches/bench_init.lua"] = { globals = { "bench" } }
