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
  M.check_origin(path)
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
  local providers = M.providers(core)
  local names = vim.tbl_keys(providers)
  table.sort(names)
  local default_provider = (cfg.model or ""):match("^([^/]+)/")
  for _, name in ipairs(names) do
    local p = providers[name]
    local line = string.format("%s (%s) %s", name, p.kind or "?", p.base_url or "(no base_url)")
    local key
    if p.api_key_set then
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
    health.error("default model " .. tostring(cfg.model) .. " names an unknown provider", { "Add it under `providers` in setup()" })
  else
    health.info("default model: " .. tostring(cfg.model))
  end

  if M.online or vim.g.mia_health_online then
    M.check_online(providers, names)
  else
    health.info("run `:Mia health online` to also ask each provider with a key whether it answers")
  end

  M.check_context(core, cfg.model)
  M.check_telemetry(core, cfg)
  M.check_agents(core ~= nil)
  M.check_mcp()

  health.start("mia: review and checkpoints")
  if cfg.review == "hunks" then
    health.info("review mode: hunks (proposed edits show as pending hunks in the file's buffer; :Mia review list)")
  else
    health.info("review mode: diff (proposed edits show as a diff float; setup({ review = \"hunks\" }) for pending hunks)")
  end
  -- :Mia edit stages its answers as hunks whatever `review` says.
  local mapped = {}
  for _, mode in ipairs({ "n", "x" }) do
    if vim.fn.hasmapto("<Plug>(MiaEdit)", mode) == 1 then
      mapped[#mapped + 1] = mode == "n" and "Normal" or "Visual"
    end
  end
  health.info(string.format(
    ":Mia edit: answers are staged as pending hunks; <Plug>(MiaEdit) is %s (:h mia-edit)",
    #mapped > 0 and ("mapped in " .. table.concat(mapped, " and ") .. " mode") or "not mapped (no default mapping)"
  ))
  local cp = cfg.checkpoints
  if cp then -- the user's over the core's defaults (none when the library cannot load)
    health.info(string.format(
      "checkpoints: kept %d days, at most %d MB, files up to %d KB, scans up to %d files (:Mia checkpoints, :Mia undo)",
      cp.max_age_days,
      cp.max_mb,
      cp.max_file_kb,
      cp.max_scan_files
    ))
  end

  health.start("mia: files")
  health.info("data directory: " .. cfg.data_dir)
  local db = cfg.data_dir .. "/mia.sqlite3"
  local st = (vim.uv or vim.loop).fs_stat(db)
  health.info(string.format(
    "store: %s (%s)",
    db,
    st and string.format("%.1f MB", st.size / 1e6) or "created on the first prompt"
  ))
  -- Known once this Neovim has tried to open it (its first prompt or report).
  local status = core and core.status and select(2, pcall(core.status))
  if type(status) == "table" and type(status.store_error) == "string" then
    health.error(
      "the store could not be opened: chats and costs are not being saved",
      { status.store_error, "This Neovim keeps going without it: restart Neovim once the file is fixed." }
    )
  end
  if type(status) == "table" and type(status.store_unsaved) == "string" then
    if status.store_unsaved:find("^not saving") then
      health.error("the store cannot be written: " .. status.store_unsaved, {
        "mia writes what waits once the store can be written again (free some space, fix the permissions)",
      })
    else
      health.warn("some of this Neovim's chats and costs were not saved: " .. status.store_unsaved)
    end
  end
  health.info("log file: " .. cfg.log_file)
  local clip = require("mia.paste").tool()
  if clip then
    health.ok(":Mia paste reads images from the clipboard with " .. clip.name)
  else
    health.warn(":Mia paste has no clipboard tool for images", {
      "install wl-paste (Wayland), xclip (X11) or pngpaste (macOS)",
    })
  end

  M.check_mia_acp()
  M.check_sandbox(cfg)
end

--- The sandbox of commands (`:h mia-sandbox`): what the system offers, asked
--- of mia-acp (`--sandbox-probe`, which may fork to test user namespaces),
--- and what is in force under `sandbox.mode`.
function M.check_sandbox(cfg)
  health.start("mia: the sandbox of commands")
  local s = cfg.sandbox or {}
  local mode = s.mode or "auto"
  if mode == "off" then
    health.warn('sandbox.mode is "off": commands a model runs are not confined (:h mia-sandbox)')
    return
  end
  local path = vim.fn.fnamemodify(require("mia.core").lib_path(), ":h") .. "/mia-acp"
  local probe = {}
  if vim.fn.executable(path) == 1 then
    local ok, out = pcall(function()
      return vim.system({ path, "--sandbox-probe" }, { text = true }):wait(5000)
    end)
    for line in ((ok and out and out.stdout) or ""):gmatch("[^\n]+") do
      local k, v = line:match("^([%w_]+)=(.*)$")
      if k then
        probe[k] = v
      end
    end
  end
  local abi = tonumber(probe.landlock_abi or "")
  local missing
  if not probe.landlock_abi then
    missing = "mia-acp, the sandbox's supervisor, is missing or does not answer (" .. path .. ")"
  elseif abi == 0 then
    missing = probe.landlock_missing or "this kernel has no Landlock"
  end
  if probe.landlock_abi then
    health.info(string.format("Landlock ABI: %s%s", probe.landlock_abi, (abi or 0) >= 4 and " (TCP too)" or ""))
    health.info(
      "unprivileged user namespaces: "
        .. (
          probe.user_namespaces == "true" and "yes (denied paths are hidden by mounts)"
          or "no (Landlock alone holds denied paths)"
        )
    )
    health.info("bubblewrap: " .. (probe.bubblewrap ~= "" and probe.bubblewrap or "not found") .. " (not needed)")
  end
  if missing then
    if mode == "on" then
      health.error('sandbox.mode is "on" but commands cannot be sandboxed: every command is refused: ' .. missing)
    else
      health.warn("commands run unconfined: " .. missing, { "see :h mia-sandbox" })
    end
    return
  end
  health.ok(string.format(
    "in force (mode %q): writes in the project, the session's temporary directory%s; credentials and denied paths unreadable; network %s; nothing outlives a command",
    mode,
    (s.writable and #s.writable > 0) and (" and " .. table.concat(s.writable, ", ")) or "",
    s.network and "on" or "off"
  ))
end

--- OpenTelemetry export (`:h mia-telemetry`): state and the last export's
--- result. Header values are secrets: only their count is ever shown.
function M.check_telemetry(core, cfg)
  health.start("mia: telemetry (OpenTelemetry export)")
  local t = cfg.telemetry or {}
  local endpoint = (t.otlp or {}).endpoint or vim.env.OTEL_EXPORTER_OTLP_ENDPOINT
  local st
  if core and core.telemetry_status then
    local ok, got = pcall(core.telemetry_status)
    st = ok and got or nil
  end
  if not st or not st.enabled then
    if endpoint and endpoint ~= "" then
      health.info("configured for " .. endpoint .. "; starts with the core (on the first request)")
    else
      health.info("off (set telemetry.otlp.endpoint in setup() or $OTEL_EXPORTER_OTLP_ENDPOINT; :h mia-telemetry)")
    end
    return
  end
  health.ok(st.state)
  local counts = string.format(
    "%d export(s) sent (%d bytes), %d failed; backlog %d (%d bytes), %d dropped",
    st.exports_ok,
    st.bytes_sent,
    st.exports_failed,
    st.backlog,
    st.backlog_bytes,
    st.dropped
  )
  if st.last_ok == nil then
    health.info("nothing exported yet (metrics every interval_ms, events within 5 s); " .. counts)
  elseif st.last_ok then
    health.ok("last export: " .. st.last_result .. " at " .. os.date("%H:%M:%S", math.floor(st.last_at_ms / 1000)) .. "; " .. counts)
  else
    health.warn("last export failed: " .. st.last_result .. "; " .. counts, {
      "check that the collector listens at the endpoint (usually port 4318 for http/protobuf, 4317 for grpc)",
    })
  end
end

--- Where the library in use came from (|mia-install|): the stamp build.lua
--- or `:Mia install` wrote next to it, or cargo's build in the plugin.
function M.check_origin(path)
  local install = require("mia.install")
  local loader = require("mia.core")
  if path == install.lib_dir() .. "/" .. vim.fn.fnamemodify(path, ":t") then
    local stamp = install.stamp()
    if stamp then
      health.info("installed: " .. install.describe(stamp))
      if stamp.download_failed then
        health.info("(the download had failed: " .. tostring(stamp.download_failed) .. ")")
      end
    else
      health.warn("installed in " .. install.lib_dir() .. " without a stamp: its origin is unknown", { "Run `:Mia install`" })
    end
  elseif path == loader.root() .. "/target/release/" .. vim.fn.fnamemodify(path, ":t") then
    health.info("built from source by cargo in this plugin (target/release), for this machine")
  else
    health.info("from $MIA_CORE_PATH")
  end
end

--- mia-acp, mia's agent for other editors: built next to the library?
function M.check_mia_acp()
  health.start("mia: mia-acp (mia's agent for other editors)")
  local loader = require("mia.core")
  -- Next to the library in use (installed in lib/ or cargo's build).
  local lib = loader.lib_path()
  local path = vim.fn.fnamemodify(lib, ":h") .. "/mia-acp"
  if vim.fn.executable(path) ~= 1 then
    health.info("not built (" .. path .. "): `:Mia install` or `cargo build --release` puts it there; see :h mia-acp")
    return
  end
  local ok, out = pcall(function()
    return vim.system({ path, "--version" }, { text = true }):wait(2000)
  end)
  local said = ok and out and out.code == 0 and vim.trim(out.stdout or "") or ""
  local version = said:match("^mia%-acp (%S+)$")
  local want = require("mia.version").version
  if not version then
    health.warn(
      string.format("%s does not answer --version (%s)", path, ok and said ~= "" and said or "no answer within 2 s"),
      { "Rebuild it: `cargo build --release` in " .. loader.root() }
    )
  elseif version ~= want then
    health.warn(
      string.format("%s is version %s, the plugin is %s", path, version, want),
      { "Rebuild it: `cargo build --release` in " .. loader.root() }
    )
  else
    health.ok(string.format("%s, version %s: an ACP client starts it as `%s` (:h mia-acp)", path, version, path))
  end
end

--- Every provider as the core will use it: the configured ones merged field
--- by field over the built-ins by the core itself (an override that sets only
--- `base_url` keeps the built-in's kind and key variable). Without the
--- library, only the configured entries as written.
--- @return table<string, { kind?: string, base_url?: string, api_key_env?: string, api_key_set: boolean }>
function M.providers(core)
  if core then
    local ok, views = pcall(function()
      local settings = require("mia.settings")
      return settings.shared().provider_views(settings.core().providers)
    end)
    if ok then
      return views
    end
    health.error("cannot read the provider configuration: " .. tostring(views))
  else
    health.warn("the built-in providers are known to the native library, which is not loaded: only your own are listed")
  end
  local out = {}
  for name, p in pairs(require("mia.config").get().providers) do
    out[name] = { kind = p.kind, base_url = p.base_url, api_key_env = p.api_key_env, api_key_set = p.api_key ~= nil }
  end
  return out
end

--- How long each agent gets to start and answer `initialize` (they start together).
M.AGENT_TIMEOUT_MS = 5000

--- Starts every configured ACP agent, runs `initialize`, and reports its
--- name, version and login methods. Health is a command the user ran, so it
--- waits (bounded) for the answers; the agents start concurrently.
--- Each MCP server's state (never starts one).
function M.check_mcp()
  health.start("mia: MCP servers")
  local mcp = require("mia.mcp")
  if #mcp.names() == 0 then
    health.info('none configured (setup({ mcp = { servers = { NAME = { command = { "program" } } } } }))')
    return
  end
  for _, s in ipairs(mcp.status()) do
    local line = mcp.lines(s.name)[1]
    if s.state == "failed" then
      health.error(line)
    else
      health.ok(line)
    end
  end
end

function M.check_agents(loaded)
  health.start("mia: external agents (ACP)")
  local agents = require("mia.agents")
  local names = agents.names()
  if #names == 0 then
    health.info('none configured (setup({ agents = { NAME = { command = { "program" } } } }), then :Mia agent NAME)')
    return
  end
  health.info("the chat talks to: " .. agents.current())
  if not loaded then
    health.warn("skipped: the native library is not loaded")
    return
  end
  local results, pending = {}, 0
  for _, name in ipairs(names) do
    pending = pending + 1
    local ok, err = pcall(require("mia")._job, "agent_probe", function(e, r)
      results[name] = { err = e, r = r }
      pending = pending - 1
    end, agents.spec(name), M.AGENT_TIMEOUT_MS)
    if not ok then
      results[name] = { err = { message = tostring(err) } }
      pending = pending - 1
    end
  end
  vim.wait(M.AGENT_TIMEOUT_MS + 1000, function()
    return pending == 0
  end, 20)
  for _, name in ipairs(names) do
    local res = results[name]
    local cmd = table.concat(agents.spec(name).command, " ")
    if res and res.r then
      local info = type(res.r.agentInfo) == "table" and res.r.agentInfo or {}
      local auth = res.r.authMethods or {}
      local who = info.title or info.name or "an agent that does not name itself"
      if info.title and info.name and info.name ~= info.title then
        who = string.format("%s (%s)", info.title, info.name)
      end
      local sessions = {}
      if res.r.listSessions == true then
        sessions[#sessions + 1] = "list"
      end
      if res.r.loadSession == true then
        sessions[#sessions + 1] = "load"
      end
      health.ok(string.format(
        "%s (`%s`): %s %s, protocol %s; login: %s; past sessions: %s",
        name,
        cmd,
        who,
        info.version or "(no version)",
        tostring(res.r.protocolVersion),
        #auth > 0 and table.concat(auth, ", ") or "none needed",
        #sessions > 0 and table.concat(sessions, ", ") or "none (not in :Mia sessions)"
      ))
      M.report_agent_mcp(name, agents.spec(name), res.r.mcpHttp == true)
    elseif res and res.err then
      health.error(string.format("%s (`%s`): %s", name, cmd, res.err.message), {
        "Check agents." .. name .. ".command: run it in a shell; it should wait for ACP messages on stdin",
      })
    else
      health.warn(string.format("%s (`%s`): no answer to `initialize` within %d ms", name, cmd, M.AGENT_TIMEOUT_MS))
    end
  end
end

--- Which configured MCP servers agent `name` gets in its sessions (|mia-mcp-agents|).
function M.report_agent_mcp(name, spec, http)
  local configured = require("mia.settings").mcp_servers()
  if not configured then
    return
  end
  if not spec.mcp_servers then
    health.info(string.format("%s: passes no MCP servers (agents.%s.mcp = false)", name, name))
    return
  end
  local passed, left = {}, {}
  for _, s in ipairs(spec.mcp_servers) do
    if s.url and not http then
      left[#left + 1] = s.name
    else
      passed[#passed + 1] = s.name
    end
  end
  local text = string.format("%s: MCP servers passed: %s", name, #passed > 0 and table.concat(passed, ", ") or "none")
  if #left > 0 then
    text = text .. string.format(" (left out: %s: HTTP, and it does not offer mcpCapabilities.http)", table.concat(left, ", "))
  end
  health.info(text)
end

--- Asks every provider that has credentials to list its models (at most 10 s in all).
function M.check_online(providers, names)
  health.start("mia: providers online")
  local ok_core = pcall(require("mia")._core)
  if not ok_core then
    health.warn("skipped: the native library is not loaded")
    return
  end
  local results = {}
  local pending = 0
  for _, name in ipairs(names) do
    local p = providers[name]
    local has_key = p.api_key_set or not p.api_key_env or (vim.env[p.api_key_env] and vim.env[p.api_key_env] ~= "")
    if has_key then
      pending = pending + 1
      require("mia").health_check(name, function(err, r)
        results[name] = { err = err, r = r }
        pending = pending - 1
      end)
    end
  end
  vim.wait(10000, function()
    return pending == 0
  end, 20)
  for _, name in ipairs(names) do
    local res = results[name]
    if res and res.r and res.r.connected then
      local window = ""
      local rl = res.r.rate_limit
      if rl then
        window = string.format(
          "; %d requests left%s, window resets in %.1f s",
          rl.remaining,
          rl.limit and rl.limit ~= vim.NIL and (" of " .. rl.limit) or "",
          (rl.reset_ms or 0) / 1000
        )
      end
      health.ok(string.format("%s answers in %d ms: %d models%s", name, res.r.latency_ms, res.r.models, window))
    elseif res and res.r then
      health.error(string.format("%s: %s", name, res.r.error and res.r.error.message or "no answer"))
    elseif res and res.err then
      health.error(string.format("%s: %s", name, res.err.message))
    elseif res == nil and pending > 0 then
      health.warn(name .. ": no answer within 10 s")
    end
  end
end

--- What :Mia context and the statusline's `ctx` know of the default model.
function M.check_context(core, model)
  health.start("mia: context window and prices (:Mia context, live cost)")
  if not (core and core.model_info) then
    health.info("the native library is not loaded: nothing to check")
    return
  end
  local ok, info = pcall(core.model_info, model, require("mia.config").core().pricing or vim.empty_dict())
  if not ok or type(info) ~= "table" then
    health.warn(
      string.format("no price for %s: :Mia context and the live footer show tokens but no dollars", model),
      { string.format("add its prices: setup({ pricing = { [%q] = { input = 3, output = 15, context = 200000 } } })", model) }
    )
    return
  end
  local window = type(info.context) == "number" and info.context or nil
  if window then
    health.ok(string.format(
      "%s: %s tokens of context, $%s / $%s per million input / output tokens",
      model,
      require("mia.costs").int(window),
      tostring(info.input),
      tostring(info.output)
    ))
  else
    health.warn(
      string.format("%s has prices but no known context window: :Mia context shows no shares and the statusline no `ctx`", model),
      { string.format("add it: setup({ pricing = { [%q] = { input = …, output = …, context = 200000 } } })", model) }
    )
  end
end

return M
