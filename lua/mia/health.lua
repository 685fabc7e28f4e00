--- :checkhealth mia

local M = {}

local health = vim.health

function M.check()
  health.start("mia: Neovim")
  local v = vim.version()
  local vs = string.format("%d.%d.%d", v.major, v.minor, v.patch)
  if vim.fn.has("nvim-0.10") == 1 then
    health.ok("Neovim " .. vs)
  else
    health.error("Neovim " .. vs .. " is too old", { "mia needs Neovim 0.10 or newer" })
  end

  health.start("mia: native library")
  local loader = require("mia.core")
  local want = require("mia.version")
  local path = loader.lib_path()
  health.info("Lua side: version " .. want.version .. ", protocol " .. want.protocol)
  health.info("library path: " .. path)
  local core, err = loader.load()
  if core then
    health.ok(string.format("library loaded: version %s, protocol %d (matches)", core.version, core.protocol))
    local ok, status = pcall(core.status)
    if ok then
      health.info(
        string.format(
          "runtime %s; HTTP clients built: %d",
          status.runtime_started and "running" or "not started (starts on first request)",
          status.clients
        )
      )
    end
  else
    health.error(err or "cannot load the library")
  end

  health.start("mia: providers")
  local cfg = require("mia.config").get()
  local providers = vim.tbl_extend("force", {}, require("mia.config").builtin_providers, cfg.providers)
  local names = vim.tbl_keys(providers)
  table.sort(names)
  local default_provider = cfg.model:match("^([^/]+)/")
  for _, name in ipairs(names) do
    local p = providers[name]
    local line = string.format("%s (%s) %s", name, p.kind, p.base_url or "(no base_url)")
    local key
    if p.api_key then
      key = "API key set in setup()"
    elseif p.api_key_env then
      key = (vim.env[p.api_key_env] and vim.env[p.api_key_env] ~= "") and ("$" .. p.api_key_env .. " is set")
        or ("$" .. p.api_key_env .. " is NOT set")
    else
      key = "no API key needed"
    end
    local used = name == default_provider
    if key:find("NOT set") then
      if used then
        health.error(line .. ": " .. key, { "Set " .. p.api_key_env .. " in the environment Neovim starts from" })
      else
        health.info(line .. ": " .. key)
      end
    else
      health.ok(line .. ": " .. key)
    end
  end
  if not providers[default_provider or ""] then
    health.error("default model " .. cfg.model .. " names an unknown provider", { "Add it under `providers` in setup()" })
  else
    health.info("default model: " .. cfg.model)
  end

  health.start("mia: files")
  health.info("data directory: " .. cfg.data_dir)
  health.info("log file: " .. cfg.log_file)
end

return M
