--- mia's configuration: validation and the part handed to the core.
--- The configuration is defined once, in the core (crates/engine/src/config.rs,
--- `Config`): its keys at every depth, its types and its defaults. setup()
--- checks here first what needs no core (errors appear at once, naming the
--- option), then hands the table to the core's own check (`check_config`),
--- which refuses a misspelt key at any depth with its path.

--- @class mia.ProviderConfig
--- @field kind "anthropic"|"openai"|"gemini"|"openai_compatible"|"azure_openai"|"ollama" Which wire format the provider speaks.
--- @field base_url? string API root, e.g. "http://127.0.0.1:11434" for Ollama (kind "ollama").
--- @field api_key_env? string Environment variable holding the key (preferred: keys stay out of your config).
--- @field api_key? string The key itself, for setups that cannot use the environment.
--- @field api_key_cmd? string[] A program and its arguments that print the key, e.g. { "pass", "show", "openai" } (run in the background, cached; used before api_key_env).
--- @field headers? table<string,string> Extra HTTP headers sent with every request.
--- @field models? string[] Models this provider serves (shown in errors and completion).
--- @field prompt_caching? boolean Anthropic only: cache the system prompt and the conversation prefix.
--- @field native_tools? boolean false for a server or model that refuses `tools`: tools go in the system prompt (default true).
--- @field local? boolean Models on your own machine: a call without a price costs $0.00 (default true for kind "ollama").
--- @field api_version? string Azure OpenAI only: the `api-version` query parameter (default "2024-10-21").
--- @field api? "chat"|"responses" OpenAI's API to speak (kinds openai, azure_openai, openai_compatible); unset: kind openai picks per model, the others "chat".

--- @class mia.AgentConfig An external agent speaking the Agent Client Protocol over stdio (`:Mia agent NAME`)
--- @field command string[] The program and its arguments, e.g. { "claude-agent-acp" } or { "node", "/path/agent.js" }
--- @field env? table<string,string> Extra environment variables for the process
--- @field cwd? string Where the process runs and the agent's session works (default: Neovim's cwd)
--- @field mcp? boolean Pass the configured MCP servers (`mcp.servers`) to its sessions (default true)

--- @class mia.Timeouts
--- @field connect_ms? integer Establishing a connection (default 10000).
--- @field request_ms? integer From request sent to response headers (default 120000).
--- @field stream_idle_ms? integer Longest silence inside a streamed answer (default 90000).

--- @class mia.RetryConfig
--- @field max_retries? integer Retries of a failed request before giving up (default 3).
--- @field initial_delay_ms? integer First backoff delay (default 1000).
--- @field max_delay_ms? integer Longest backoff delay, jitter included (default 60000).
--- @field multiplier? number Growth of the delay per retry (default 2).
--- @field jitter? boolean|number Randomize each delay by up to this fraction either way, so clients do not retry in step (default 0.1; true = 0.1, false = 0).
--- @field retry_on? string[] The error classes retried (default all four: rate_limit, server_error, network_error, timeout).
--- @field pacing? boolean Spread the requests left in a provider's per-minute window that runs low until it resets (default true).
--- @field max_wait_ms? integer A provider asking to wait longer than this gets an error instead (default 120000).

--- @class mia.Limits
--- @field max_event_bytes? integer Largest single event of a streamed answer (one SSE event, NDJSON line or JSON-array element), or whole non-streamed answer, in bytes; a server sending more ends the answer with an error (default 8388608, 8 MiB).

--- @class mia.PermissionRule
--- @field tool string Tool name or glob ("*" for all); a plain name must be a known tool
--- @field pattern? string Glob on the canonical path (relative to the project) or on each simple command of a shell command line
--- @field action "allow"|"ask"|"deny"
--- @field mode? string Only in this mode

--- @class mia.ModePolicy What a mode's tools may do without asking, per effect
--- @field read? "allow"|"ask"|"deny"
--- @field write? "allow"|"ask"|"deny"
--- @field execute? "allow"|"ask"|"deny"

--- @class mia.PermissionConfig
--- @field modes? table<string, mia.ModePolicy> Default action per mode and effect
--- @field rules? mia.PermissionRule[] Checked before the mode's defaults; deny rules always win

--- @class mia.ToolsConfig
--- @field max_turns? integer Model turns per prompt before mia stops the loop (default 25)
--- @field bash_timeout_ms? integer Default timeout of shell commands (default 120000)
--- @field max_read_bytes? integer Largest file read whole (default 262144)
--- @field output_cap_bytes? integer Most tool output returned to the model (default 32768)

--- @class mia.CostsConfig
--- @field session_warning_usd? number Warn once when a session's cost passes this
--- @field session_limit_usd? number Stop before the next request once a session has cost this (asks to continue)
--- @field daily_warning_usd? number Warn once when today's cost (all sessions, all Neovims) passes this
--- @field daily_limit_usd? number Stop before the next request once today's cost reaches this
--- @field hard_limit? boolean Refuse instead of asking when a limit is reached (default false)

--- @class mia.ChatConfig
--- @field position? "right"|"left"|"bottom"|"top" Where the chat split opens (default "right").
--- @field size? integer Width (or height) of the split; 0 lets Neovim halve the window (default 0).
--- @field synmaxcol? integer Syntax highlighting stops at this column of a line (default 1000): regex
--- markdown syntax over a very long streamed line costs milliseconds on every redraw.
--- @field syntax? string The chat buffer's regex syntax (default "mia_chat", a lean markdown; "markdown" is
--- Vim's full one, "" none). Treesitter highlighting started for markdown is left alone.

--- @class mia.ReviewKeys Keys of the review (a string, or false for none)
--- @field next_hunk? string|false Next pending hunk (default "]h"; also in the diff float)
--- @field prev_hunk? string|false Previous pending hunk (default "[h")
--- @field accept_hunk? string|false Accept the hunk at the cursor (default "<localleader>a")
--- @field reject_hunk? string|false Reject the hunk at the cursor (default "<localleader>r")
--- @field accept_all? string|false Accept every pending hunk of the buffer (default "<localleader>A")
--- @field reject_all? string|false Reject every pending hunk of the buffer (default "<localleader>R")
--- @field accept? string|false Diff float: accept (default "a")
--- @field accept_file? string|false Diff float: accept edits to this file for the session (default "f")
--- @field accept_always? string|false Diff float: allow always for this project (default "A")
--- @field reject? string|false Diff float: reject, asking a reason for the model (default "r")
--- @field edit? string|false Diff float: edit the proposal first (default "e")
--- @field dismiss? string|false Diff float: dismiss = reject without reason (default "q"; <Esc> too)

--- @class mia.CheckpointsConfig
--- @field max_age_days? integer Checkpoints older than this are pruned (default 30)
--- @field max_mb? integer Snapshots beyond this total are pruned, oldest first (default 512)
--- @field max_file_kb? integer Bigger files are not snapshotted; :Mia undo names them (default 4096)
--- @field max_scan_files? integer Most files the scan around a `bash` command looks at (default 20000)

--- @class mia.McpServerConfig
--- @field command? string[] The program and its arguments (a server over stdio)
--- @field env? table<string, string> Extra environment variables of the process
--- @field cwd? string Where the process starts
--- @field url? string A streamable-HTTP server's address (instead of `command`)
--- @field headers? table<string, string> HTTP headers sent to a `url` server
--- @field timeout_ms? integer How long the start, the tool list and each call may take (default 30000)
--- @field tool_prefix? string What comes before `__tool` in the tools' names (default: the server's name; "" keeps the server's own names)
--- @field tool_names? table<string, string> Names of some tools, by the server's name for them (e.g. { read_text_file = "fs_read" })
--- @field path_rules? boolean Whether mia's path rules hold for the tools' path arguments (default true)
--- @field sandbox? boolean Run the server (started with `command`) in mia's sandbox (`:h mia-sandbox`; default false)

--- @class mia.McpConfig
--- @field servers? table<string, mia.McpServerConfig> The servers, by a name of yours

--- @class mia.HttpConfig Connection reuse; 0 turns one off
--- @field pool_idle_timeout_ms? integer An idle connection closes after this (default 30000)
--- @field pool_max_idle_per_host? integer Idle connections kept per host (default 6)
--- @field max_connections_per_host? integer Connections open at once to one host (default 6)
--- @field tcp_keepalive_ms? integer TCP keep-alive interval (default 60000)

--- @class mia.RulesConfig
--- @field files? string[] Rules files, relative to the project (globs allowed)
--- @field user_file? string|false Your own rules file (default stdpath("config") .. "/mia/rules.md"); false for none
--- @field max_kb? integer Most of each file put in the prompt (default 32)

--- @class mia.ModeConfig A user mode, or changes to a built-in one
--- @field name? string Shown in the mode list (default: its id)
--- @field description? string
--- @field system? string Added to the system prompt in this mode
--- @field tools? string[] The tools the mode offers (default all)
--- @field permissions? mia.ModePolicy What its tools may do without asking
--- @field switch_mode? boolean The mode may propose leaving itself (the `switch_mode` tool; architect's is true)

--- @class mia.SandboxConfig
--- @field mode? "auto"|"on"|"off" "auto" sandboxes where the system supports it, "on" refuses to run a command unsandboxed, "off" runs as before (default "auto")
--- @field network? boolean Commands may use the network (all of it; default false)
--- @field writable? string[] More trees commands may write, besides the project and the session's temporary directory
--- @field readable_deny? string[] More paths no command may read, besides the deny rules' and the default credentials

--- @class mia.OtlpConfig
--- @field endpoint? string The collector's base address, e.g. "http://localhost:4318", or "http://localhost:4317" for gRPC (default: $OTEL_EXPORTER_OTLP_{METRICS,LOGS}_ENDPOINT, else $OTEL_EXPORTER_OTLP_ENDPOINT)
--- @field protocol? "http/protobuf"|"grpc" How exports travel (default: $OTEL_EXPORTER_OTLP_PROTOCOL, else "http/protobuf")
--- @field compression? "gzip"|"none" Compress the exports (default: $OTEL_EXPORTER_OTLP_{METRICS,LOGS}_COMPRESSION, else $OTEL_EXPORTER_OTLP_COMPRESSION, else none)
--- @field headers? table<string,string> Sent with every export (secrets: never logged or shown); added to $OTEL_EXPORTER_OTLP_HEADERS
--- @field interval_ms? integer How often metrics are sent (default 60000, at least 1000)

--- @class mia.TelemetryConfig OpenTelemetry export to a team's collector (`:h mia-telemetry`); off unless an endpoint is set
--- @field otlp? mia.OtlpConfig Where to send
--- @field log_prompts? boolean Include prompt text in the `mia.user_prompt` event (default false)
--- @field project? string A project name put on every metric and event (default none)

--- @class mia.Config
--- @field model? string Default model as "provider/model" (default "anthropic/claude-sonnet-4-5").
--- @field providers? table<string, mia.ProviderConfig> Extra providers, or overrides of the built-in anthropic, openai, gemini and ollama.
--- @field agents? table<string, mia.AgentConfig> External ACP agents the chat can switch to (`:Mia agent NAME`).
--- @field timeouts? mia.Timeouts Network time limits.
--- @field retry? mia.RetryConfig How failed requests are retried.
--- @field http? mia.HttpConfig Connection reuse (defaults 30000, 6, 6, 60000; 0 turns one off).
--- @field limits? mia.Limits Sizes a server's answer may not pass.
--- @field permissions? mia.PermissionConfig What tools may do without asking.
--- @field tools? mia.ToolsConfig Limits of the agent loop and the built-in tools.
--- @field costs? mia.CostsConfig Cost warnings and limits (defaults: warn at $3 a session, $20 a day; ask at $10, $50).
--- @field budgets? boolean false turns every cost warning and limit off (default true).
--- @field pricing? table<string, { input: number, output: number, cache_read?: number, cache_write?: number, context?: integer }> USD per million tokens (and the context window in tokens, for :Mia context and the statusline), by "provider/model"; overrides the built-in price list.
--- @field data_dir? string Where mia keeps its data (default stdpath("data") .. "/mia").
--- @field log_file? string Log file (default stdpath("log") .. "/mia.log").
--- @field log_level? "error"|"warn"|"info"|"debug"|"trace" How much goes to the log (default "info").
--- @field system? string System prompt for :Mia prompt.
--- @field chat? mia.ChatConfig The chat window.
--- @field mode? string Starting mode (default "ask").
--- @field review? "diff"|"hunks" How proposed edits are reviewed: a diff float, or pending hunks in the file's buffer (default "diff").
--- @field review_keys? mia.ReviewKeys Keys of the review.
--- @field checkpoints? mia.CheckpointsConfig What :Mia undo keeps.
--- @field mcp? mia.McpConfig Model Context Protocol servers whose tools the agent may call (`:h mia-mcp`).
--- @field rules? false|mia.RulesConfig Project rules files put in the system prompt (`:h mia-rules`); false turns them off.
--- @field telemetry? mia.TelemetryConfig OpenTelemetry export (`:h mia-telemetry`).
--- @field sandbox? mia.SandboxConfig The kernel-enforced sandbox of the commands a model runs (`:h mia-sandbox`).
--- @field modes? table<string, mia.ModeConfig> Extra modes, or changes to the built-in ask, architect and code (`tools` limits the tools the mode offers).

local M = {}

--- The review's default keys (`review_keys`).
M.review_keys = {
  next_hunk = "]h",
  prev_hunk = "[h",
  accept_hunk = "<localleader>a",
  reject_hunk = "<localleader>r",
  accept_all = "<localleader>A",
  reject_all = "<localleader>R",
  accept = "a",
  accept_file = "f",
  accept_always = "A",
  reject = "r",
  edit = "e",
  dismiss = "q",
}

--- @type mia.Config?
local current = nil

local function default_data_dir()
  return vim.fn.stdpath("data") .. "/mia"
end

--- The data directory in force, without loading the core (the exit summary
--- reads it at startup, before any setup()).
--- @return string
function M.data_dir()
  return current and current.data_dir or default_data_dir()
end

--- The defaults: the core's (`Config::default`, read through
--- `mia_core.shared().config_defaults`), and what only Neovim knows (its
--- directories, the review's keys). When the library cannot be loaded (not
--- built yet, or stale) the core's part is missing: every command then says
--- what to run, and nothing here guesses a copy of it.
--- @return mia.Config
local function defaults()
  local d = {}
  if require("mia.core").load() then
    d = vim.deepcopy(require("mia.settings").shared().config_defaults)
    d.acp = nil -- mia-acp's own section
  end
  d.providers = d.providers or {}
  d.data_dir = default_data_dir()
  d.log_file = vim.fn.stdpath("log") .. "/mia.log"
  d.permissions = d.permissions or { rules = {} }
  d.review_keys = vim.deepcopy(M.review_keys)
  return d
end

--- The names setup() checks against while the native library cannot be
--- loaded (setup() loads it). The core owns them (`mia_core.shared()`,
--- crates/engine/src/shared.rs); once it is loaded they are read from there, and
--- tests/functional/test_shared_data.py keeps this copy equal to it.
M._fallback = {
  provider_kinds = { "anthropic", "openai", "gemini", "openai_compatible", "azure_openai", "ollama" },
  base_url_required = { "openai_compatible", "azure_openai" },
  providers = { "anthropic", "gemini", "ollama", "openai" },
  modes = { "ask", "architect", "code" },
  default_mode = "ask",
}

--- `{ provider_kinds, base_url_required, providers, modes }` as lists of names (and `default_mode`):
--- from the core when it is loaded, else the fallback above.
function M._names()
  local loader = package.loaded["mia.core"]
  if not (loader and loader.is_loaded()) then
    return M._fallback
  end
  local shared = require("mia.settings").shared()
  local function ids(list, key)
    return vim.tbl_map(function(x)
      return key and x[key] or x
    end, list)
  end
  local providers = vim.tbl_keys(shared.providers)
  table.sort(providers)
  return {
    provider_kinds = ids(shared.provider_kinds),
    base_url_required = ids(shared.base_url_required),
    providers = providers,
    modes = ids(shared.modes, "id"),
    default_mode = shared.default_mode,
  }
end

--- Every top-level option of setup(): the fields of `mia.Config` above and
--- the options |mia-config| documents (tests/lua/config_spec.lua keeps the
--- three equal).
M.options = {
  "model", "providers", "agents", "timeouts", "retry", "http", "limits", "permissions", "tools", "costs",
  "budgets", "pricing", "data_dir", "log_file", "log_level", "system", "chat", "mode", "review", "review_keys",
  "checkpoints", "mcp", "rules", "telemetry", "modes", "sandbox",
}

local distance = require("mia.distance")

--- The known names closest to `name` (at most two edits away), for an error's "did you mean".
--- @param name string
--- @param known string[]
--- @return string[]
function M._close(name, known)
  local out = {}
  for _, k in ipairs(known) do
    if distance(name:lower(), k) <= 2 then
      out[#out + 1] = k
    end
  end
  table.sort(out)
  return out
end

local function set_of(list)
  local set = {}
  for _, v in ipairs(list) do
    set[v] = true
  end
  return set
end
local LEVELS = { error = true, warn = true, info = true, debug = true, trace = true }
local POSITIONS = { right = true, left = true, bottom = true, top = true }


local function fail(path, what, got)
  error(string.format("mia.setup: `%s` %s (got %s)", path, what, vim.inspect(got)), 0)
end

local function check_type(path, value, ty, optional)
  if value == nil and optional then
    return
  end
  if type(value) ~= ty then
    fail(path, "must be a " .. ty, value)
  end
end

--- Validates `opts`; raises one clear error naming the option at fault.
--- @param opts table
local function validate(opts)
  check_type("opts", opts, "table")
  local options = set_of(M.options)
  for key in pairs(opts) do
    if not options[key] then
      local close = type(key) == "string" and M._close(key, M.options) or {}
      local hint = #close > 0 and ("; did you mean `" .. table.concat(close, "`, `") .. "`?")
        or "; see :h mia-config for the options"
      fail(tostring(key), "is not a mia option" .. hint, opts[key])
    end
  end
  check_type("model", opts.model, "string", true)
  if opts.model and not opts.model:match("^[^/]+/.+") then
    fail("model", 'must be "provider/model", e.g. "openai/gpt-4.1"', opts.model)
  end
  check_type("providers", opts.providers, "table", true)
  local names = M._names()
  local kinds, builtin = set_of(names.provider_kinds), set_of(names.providers)
  local needs_url = set_of(names.base_url_required)
  for name, p in pairs(opts.providers or {}) do
    local path = "providers." .. tostring(name)
    check_type(path, p, "table")
    if not (p.kind == nil and builtin[name]) and not kinds[p.kind] then
      fail(path .. ".kind", "must be one of " .. table.concat(names.provider_kinds, ", "), p.kind)
    end
    check_type(path .. ".base_url", p.base_url, "string", true)
    if needs_url[p.kind] and not p.base_url then
      fail(path .. ".base_url", "is required for a provider of kind " .. p.kind, p.base_url)
    end
    check_type(path .. ".api_key_env", p.api_key_env, "string", true)
    -- a key pasted here would be printed by every "Set X" hint: refuse it without showing it
    if p.api_key_env and (not p.api_key_env:match("^[%a_][%w_]*$") or p.api_key_env:match("^AIza")) then
      error(
        string.format(
          "mia.setup: `%s.api_key_env` must be the name of an environment variable (letters, digits and _), "
            .. "not the key itself: put the key in that variable, e.g. api_key_env = \"OPENAI_API_KEY\"",
          path
        ),
        0
      )
    end
    check_type(path .. ".api_key", p.api_key, "string", true)
    check_type(path .. ".api_key_cmd", p.api_key_cmd, "table", true)
    if p.api_key_cmd ~= nil then
      local argv = p.api_key_cmd
      local ok = #argv > 0 and vim.iter(pairs(argv)):all(function(k, v)
        return type(k) == "number" and k >= 1 and k <= #argv and type(v) == "string"
      end) and argv[1] ~= ""
      if not ok then
        fail(path .. ".api_key_cmd", 'must be a list of strings, the program first, e.g. { "pass", "show", "openai" }', argv)
      end
    end
    check_type(path .. ".headers", p.headers, "table", true)
    check_type(path .. ".models", p.models, "table", true)
    check_type(path .. ".prompt_caching", p.prompt_caching, "boolean", true)
    check_type(path .. ".api_version", p.api_version, "string", true)
    check_type(path .. ".native_tools", p.native_tools, "boolean", true)
    check_type(path .. ".local", p["local"], "boolean", true)
    -- the kinds whose wire format speaks both of OpenAI's APIs (WireFormat::speaks_responses)
    local kind = p.kind or (builtin[name] and name)
    if p.api ~= nil and p.api ~= "chat" and p.api ~= "responses" then
      fail(path .. ".api", 'must be "chat" or "responses"', p.api)
    elseif p.api and not vim.tbl_contains({ "openai", "azure_openai", "openai_compatible" }, kind) then
      fail(path .. ".api", "is for kinds openai, azure_openai and openai_compatible, not " .. tostring(kind), p.api)
    end
  end
  check_type("retry", opts.retry, "table", true)
  local retryable = { "rate_limit", "server_error", "overloaded", "network_error", "timeout" }
  for key, v in pairs(opts.retry or {}) do
    if key == "pacing" then
      check_type("retry.pacing", v, "boolean")
    elseif key == "jitter" then
      if type(v) ~= "boolean" and (type(v) ~= "number" or v < 0 or v > 1) then
        fail("retry.jitter", "must be true, false or a fraction from 0 to 1 (0.1 is ±10%)", v)
      end
    elseif key == "retry_on" then
      check_type("retry.retry_on", v, "table")
      for i, class in ipairs(v) do
        if not vim.tbl_contains(retryable, class) then
          fail(
            string.format("retry.retry_on[%d]", i),
            "must be one of " .. table.concat(retryable, ", ") .. " (other failures get the same answer when retried)",
            class
          )
        end
      end
    elseif not vim.tbl_contains({ "max_retries", "initial_delay_ms", "max_delay_ms", "multiplier", "max_wait_ms" }, key) then
      fail("retry." .. tostring(key), "is not a retry option (max_retries, initial_delay_ms, max_delay_ms, multiplier, jitter, max_wait_ms, retry_on, pacing)", v)
    elseif key == "multiplier" then
      if type(v) ~= "number" or v < 1 then
        fail("retry.multiplier", "must be a number >= 1", v)
      end
    elseif type(v) ~= "number" or v < 0 or v ~= math.floor(v) then
      fail("retry." .. tostring(key), "must be a whole number >= 0", v)
    end
  end
  check_type("timeouts", opts.timeouts, "table", true)
  for key, v in pairs(opts.timeouts or {}) do
    if type(v) ~= "number" or v <= 0 or v ~= math.floor(v) then
      fail("timeouts." .. tostring(key), "must be a positive whole number of milliseconds", v)
    end
  end
  check_type("limits", opts.limits, "table", true)
  for key, v in pairs(opts.limits or {}) do
    if key ~= "max_event_bytes" then
      fail("limits." .. tostring(key), "is not a limit (max_event_bytes)", v)
    elseif type(v) ~= "number" or v <= 0 or v ~= math.floor(v) or v >= 2 ^ 53 then
      fail("limits.max_event_bytes", "must be a positive whole number of bytes", v)
    end
  end
  check_type("http", opts.http, "table", true)
  for key, v in pairs(opts.http or {}) do
    if not ({ pool_idle_timeout_ms = 1, pool_max_idle_per_host = 1, max_connections_per_host = 1, tcp_keepalive_ms = 1 })[key] then
      fail("http." .. tostring(key), "is not an HTTP option (pool_idle_timeout_ms, pool_max_idle_per_host, max_connections_per_host, tcp_keepalive_ms)", v)
    elseif type(v) ~= "number" or v < 0 or v ~= math.floor(v) or v >= 2 ^ 53 then
      fail("http." .. key, "must be a whole number >= 0 (0 turns it off)", v)
    end
  end
  check_type("data_dir", opts.data_dir, "string", true)
  check_type("log_file", opts.log_file, "string", true)
  if opts.log_level ~= nil and not LEVELS[opts.log_level] then
    fail("log_level", "must be one of error, warn, info, debug, trace", opts.log_level)
  end
  check_type("system", opts.system, "string", true)
  check_type("permissions", opts.permissions, "table", true)
  local actions = { allow = true, ask = true, deny = true }
  local rules = (opts.permissions or {}).rules
  check_type("permissions.rules", rules, "table", true)
  if rules and #rules > 0 then
    local modes = set_of(names.modes)
    for id in pairs(type(opts.modes) == "table" and opts.modes or {}) do
      modes[id] = true
    end
    require("mia.rules").validate(rules, modes, fail)
  end
  for mode, p in pairs((opts.permissions or {}).modes or {}) do
    for _, effect in ipairs({ "read", "write", "execute" }) do
      if not actions[p[effect]] then
        fail(string.format("permissions.modes.%s.%s", mode, effect), "must be allow, ask or deny", p[effect])
      end
    end
  end
  check_type("costs", opts.costs, "table", true)
  check_type("budgets", opts.budgets, "boolean", true)
  for key, v in pairs(opts.costs or {}) do
    if key == "hard_limit" then
      check_type("costs.hard_limit", v, "boolean")
    elseif not ({ session_warning_usd = 1, session_limit_usd = 1, daily_warning_usd = 1, daily_limit_usd = 1 })[key] then
      fail("costs." .. tostring(key), "is not a cost option (session_warning_usd, session_limit_usd, daily_warning_usd, daily_limit_usd, hard_limit)", v)
    elseif type(v) ~= "number" or v < 0 then
      fail("costs." .. key, "must be a number of US dollars >= 0", v)
    end
  end
  check_type("pricing", opts.pricing, "table", true)
  for model, p in pairs(opts.pricing or {}) do
    local path = "pricing[" .. vim.inspect(model) .. "]"
    if type(model) ~= "string" or not model:match("^[^/]+/.+") then
      fail(path, 'must be keyed by "provider/model"', model)
    end
    check_type(path, p, "table")
    for _, k in ipairs({ "input", "output" }) do
      if type(p[k]) ~= "number" then
        fail(path .. "." .. k, "must be a price in USD per million tokens", p[k])
      end
    end
  end
  check_type("tools", opts.tools, "table", true)
  for key, v in pairs(opts.tools or {}) do
    if type(v) ~= "number" or v <= 0 or v ~= math.floor(v) then
      fail("tools." .. tostring(key), "must be a positive whole number", v)
    end
  end
  check_type("chat", opts.chat, "table", true)
  check_type("modes", opts.modes, "table", true)
  for id, m in pairs(opts.modes or {}) do
    local path = "modes." .. tostring(id)
    check_type(path, m, "table")
    check_type(path .. ".name", m.name, "string", true)
    check_type(path .. ".description", m.description, "string", true)
    check_type(path .. ".system", m.system, "string", true)
    check_type(path .. ".tools", m.tools, "table", true)
    check_type(path .. ".permissions", m.permissions, "table", true)
  end
  check_type("mode", opts.mode, "string", true)
  if opts.review ~= nil and opts.review ~= "diff" and opts.review ~= "hunks" then
    fail("review", 'must be "diff" (a diff float) or "hunks" (pending hunks in the buffer)', opts.review)
  end
  check_type("review_keys", opts.review_keys, "table", true)
  for key, v in pairs(opts.review_keys or {}) do
    if M.review_keys[key] == nil then
      local known = vim.tbl_keys(M.review_keys)
      table.sort(known)
      fail("review_keys." .. tostring(key), "is not a review key (" .. table.concat(known, ", ") .. ")", key)
    elseif v ~= false and (type(v) ~= "string" or v == "") then
      fail("review_keys." .. key, "must be a key sequence such as \"]h\", or false for none", v)
    end
  end
  check_type("checkpoints", opts.checkpoints, "table", true)
  for key, v in pairs(opts.checkpoints or {}) do
    if not ({ max_age_days = 1, max_mb = 1, max_file_kb = 1, max_scan_files = 1 })[key] then
      fail(
        "checkpoints." .. tostring(key),
        "is not a checkpoint option (max_age_days, max_mb, max_file_kb, max_scan_files)",
        v
      )
    elseif type(v) ~= "number" or v <= 0 or v ~= math.floor(v) or v >= 2 ^ 31 then
      fail("checkpoints." .. key, "must be a positive whole number", v)
    end
  end
  check_type("sandbox", opts.sandbox, "table", true)
  for key, v in pairs(opts.sandbox or {}) do
    local path = "sandbox." .. tostring(key)
    if key == "mode" then
      if v ~= "auto" and v ~= "on" and v ~= "off" then
        fail(path, 'must be "auto" (sandboxed where the system can), "on" (never unsandboxed) or "off"', v)
      end
    elseif key == "network" then
      check_type(path, v, "boolean")
    elseif key == "writable" or key == "readable_deny" then
      if type(v) ~= "table" or (next(v) ~= nil and not vim.islist(v)) then
        fail(path, "must be a list of paths", v)
      end
      for i, p in ipairs(v) do
        if type(p) ~= "string" or p == "" then
          fail(path .. "[" .. i .. "]", "must be a path (a non-empty string)", p)
        end
      end
    else
      fail(path, "is not a sandbox option (mode, network, writable, readable_deny)", v)
    end
  end
  check_type("agents", opts.agents, "table", true)
  for name, a in pairs(opts.agents or {}) do
    local path = "agents." .. tostring(name)
    if type(name) ~= "string" or not name:match("^[%w][%w_.-]*$") or #name > 64 then
      fail(path, "must be named with letters, digits, _, . or - (at most 64)", name)
    end
    if name == "mia" then
      fail(path, "is mia's own agent (`:Mia agent mia`); give the external agent another name", name)
    end
    check_type(path, a, "table")
    if type(a.command) ~= "table" or #a.command == 0 then
      fail(path .. ".command", 'must be a list: the program and its arguments, e.g. { "claude-agent-acp" }', a.command)
    end
    for i, arg in ipairs(a.command) do
      check_type(string.format("%s.command[%d]", path, i), arg, "string")
    end
    check_type(path .. ".env", a.env, "table", true)
    for k, v in pairs(a.env or {}) do
      if type(k) ~= "string" or type(v) ~= "string" then
        fail(path .. ".env", "must map variable names to strings", { [k] = v })
      end
    end
    check_type(path .. ".cwd", a.cwd, "string", true)
    check_type(path .. ".mcp", a.mcp, "boolean", true)
    for key in pairs(a) do
      if key ~= "command" and key ~= "env" and key ~= "cwd" and key ~= "mcp" then
        fail(path .. "." .. tostring(key), "is not an agent option (command, env, cwd, mcp)", a[key])
      end
    end
  end
  if opts.rules ~= nil and opts.rules ~= false then
    check_type("rules", opts.rules, "table")
    for key, v in pairs(opts.rules) do
      if key == "files" then
        if type(v) ~= "table" or not vim.islist(v) then
          fail("rules.files", 'must be a list of paths relative to the project, e.g. { "AGENTS.md", ".cursor/rules/*.mdc" }', v)
        end
        for i, f in ipairs(v) do
          if type(f) ~= "string" or f == "" or f:sub(1, 1) == "/" or f:find("..", 1, true) then
            fail(string.format("rules.files[%d]", i), "must be a path inside the project (relative, without ..)", f)
          end
        end
      elseif key == "user_file" then
        if v ~= false and type(v) ~= "string" then
          fail("rules.user_file", "must be a path, or false for none", v)
        end
      elseif key == "max_kb" then
        if type(v) ~= "number" or v <= 0 or v ~= math.floor(v) or v > 1024 then
          fail("rules.max_kb", "must be a whole number of KB from 1 to 1024", v)
        end
      else
        fail("rules." .. tostring(key), "is not a rules option (files, user_file, max_kb)", v)
      end
    end
  end
  check_type("mcp", opts.mcp, "table", true)
  for key in pairs(opts.mcp or {}) do
    if key ~= "servers" then
      fail("mcp." .. tostring(key), "is not an mcp option (servers)", opts.mcp[key])
    end
  end
  check_type("mcp.servers", (opts.mcp or {}).servers, "table", true)
  for name, s in pairs((opts.mcp or {}).servers or {}) do
    local path = "mcp.servers." .. tostring(name)
    if type(name) ~= "string" or not name:match("^[%w][%w_-]*$") or name:find("__", 1, true) or #name > 64 then
      fail(path, "must be named with letters, digits, - or single _ (at most 64): tools are named NAME__tool", name)
    end
    check_type(path, s, "table")
    if (s.command == nil) == (s.url == nil) then
      fail(path, 'needs either `command` (a list, e.g. { "npx", "-y", "server" }) or `url` (streamable HTTP)', s)
    end
    if s.command ~= nil then
      if type(s.command) ~= "table" or #s.command == 0 then
        fail(path .. ".command", 'must be a list: the program and its arguments, e.g. { "mcp-server-git" }', s.command)
      end
      for i, arg in ipairs(s.command) do
        check_type(string.format("%s.command[%d]", path, i), arg, "string")
      end
    end
    if s.url ~= nil and (type(s.url) ~= "string" or not s.url:match("^https?://")) then
      fail(path .. ".url", "must be an http:// or https:// address", s.url)
    end
    for _, map in ipairs({ "env", "headers" }) do
      check_type(path .. "." .. map, s[map], "table", true)
      for k, v in pairs(s[map] or {}) do
        if type(k) ~= "string" or type(v) ~= "string" then
          fail(path .. "." .. map, "must map names to strings", { [k] = v })
        end
      end
    end
    check_type(path .. ".cwd", s.cwd, "string", true)
    if s.timeout_ms ~= nil and (type(s.timeout_ms) ~= "number" or s.timeout_ms <= 0 or s.timeout_ms ~= math.floor(s.timeout_ms)) then
      fail(path .. ".timeout_ms", "must be a positive whole number of milliseconds", s.timeout_ms)
    end
    if s.tool_prefix ~= nil and (type(s.tool_prefix) ~= "string" or not s.tool_prefix:match("^[%w_-]*$") or #s.tool_prefix > 40) then
      fail(path .. ".tool_prefix", 'must be letters, digits, _ or - (at most 40), or "" for none', s.tool_prefix)
    end
    check_type(path .. ".tool_names", s.tool_names, "table", true)
    for k, v in pairs(s.tool_names or {}) do
      if type(k) ~= "string" or type(v) ~= "string" or not v:match("^[%w_-]+$") or #v > 64 then
        fail(path .. ".tool_names", "must map the server's tool names to names of letters, digits, _ or - (at most 64)", { [k] = v })
      end
    end
    check_type(path .. ".path_rules", s.path_rules, "boolean", true)
    check_type(path .. ".sandbox", s.sandbox, "boolean", true)
    if s.sandbox and s.url then
      fail(path .. ".sandbox", "applies to servers started with `command`, not to a `url`", s.sandbox)
    end
    local known = {
      sandbox = 1,
      command = 1,
      env = 1,
      cwd = 1,
      url = 1,
      headers = 1,
      timeout_ms = 1,
      tool_prefix = 1,
      tool_names = 1,
      path_rules = 1,
    }
    for key in pairs(s) do
      if not known[key] then
        fail(
          path .. "." .. tostring(key),
          "is not an mcp server option (command, env, cwd, url, headers, timeout_ms, tool_prefix, tool_names, path_rules, sandbox)",
          s[key]
        )
      end
    end
  end
  M._validate_telemetry(opts.telemetry)
  if opts.chat and opts.chat.position ~= nil and not POSITIONS[opts.chat.position] then
    fail("chat.position", "must be one of right, left, bottom, top", opts.chat.position)
  end
  local syntax = opts.chat and opts.chat.syntax
  if syntax ~= nil and (type(syntax) ~= "string" or not syntax:match("^[%w_.]*$")) then
    fail("chat.syntax", 'must be a syntax name such as "mia_chat", "markdown" or ""', syntax)
  end
end

--- Checks the `telemetry` section (`:h mia-telemetry`).
function M._validate_telemetry(t)
  check_type("telemetry", t, "table", true)
  if t == nil then
    return
  end
  for key, v in pairs(t) do
    if key == "otlp" then
      check_type("telemetry.otlp", v, "table")
      for k, x in pairs(v) do
        local path = "telemetry.otlp." .. tostring(k)
        if k == "endpoint" then
          if type(x) ~= "string" or not x:match("^https?://.") then
            fail(path, 'must be an http:// or https:// address, e.g. "http://localhost:4318"', x)
          end
        elseif k == "protocol" then
          if x ~= "http/protobuf" and x ~= "grpc" then
            fail(path, 'must be "http/protobuf" (port 4318) or "grpc" (port 4317)', x)
          end
        elseif k == "compression" then
          if x ~= "gzip" and x ~= "none" then
            fail(path, 'must be "gzip" or "none"', x)
          end
        elseif k == "headers" then
          check_type(path, x, "table")
          for hk, hv in pairs(x) do
            if type(hk) ~= "string" or type(hv) ~= "string" then
              -- The value may be a key: only the name is shown.
              fail(path, "must map header names to strings", hk)
            end
          end
        elseif k == "interval_ms" then
          if type(x) ~= "number" or x < 1000 or x ~= math.floor(x) then
            fail(path, "must be a whole number of milliseconds, at least 1000", x)
          end
        else
          fail(path, "is not a telemetry.otlp option (endpoint, protocol, compression, headers, interval_ms)", k)
        end
      end
    elseif key == "log_prompts" then
      check_type("telemetry.log_prompts", v, "boolean")
    elseif key == "project" then
      check_type("telemetry.project", v, "string")
    else
      fail("telemetry." .. tostring(key), "is not a telemetry option (otlp, log_prompts, project)", key)
    end
  end
end

--- A Lua table as the core reads it (plain data: string keys, lists,
--- numbers, strings, booleans). A function or other Lua-only value is
--- refused with its path: no option takes one.
--- @param v any
--- @param path string
--- @param depth integer
function M._plain(v, path, depth)
  if v == vim.NIL then
    return nil
  end
  local t = type(v)
  if t == "table" then
    if depth > 32 then
      fail(path, "is nested too deeply (a table that contains itself?)", "…")
    end
    local out = {}
    if next(v) ~= nil and vim.islist(v) then
      for i, x in ipairs(v) do
        out[i] = M._plain(x, string.format("%s[%d]", path, i), depth + 1)
      end
    else
      for k, x in pairs(v) do
        local name = tostring(k)
        out[name] = M._plain(x, path == "" and name or (path .. "." .. name), depth + 1)
      end
    end
    return out
  elseif t == "function" or t == "userdata" or t == "thread" then
    fail(path == "" and "opts" or path, "is a Lua " .. t .. ", which this option does not take", v)
  end
  return v
end

--- The core's check of `opts` (every key at every depth, and its type):
--- raises its one-line reason. Skipped when the library cannot be loaded;
--- the first command says why.
--- @param opts table
local function core_check(opts)
  local loader = require("mia.core")
  local core = loader.load()
  if not core then
    return
  end
  local problem = loader.call(core.check_config, M._plain(opts, "", 0))
  if problem then
    error("mia.setup: " .. problem, 0)
  end
end

-- What setup() was given, and whether `current` holds the core's defaults
-- (false while the library could not be loaded: not installed yet, say).
local given = {}
local complete = false

--- Checks `opts` and stores it merged over the defaults.
--- @param opts? mia.Config
function M.set(opts)
  opts = opts or {}
  validate(opts)
  core_check(opts)
  given = opts
  complete = require("mia.core").load() ~= nil
  current = vim.tbl_deep_extend("force", defaults(), opts)
end

--- The configuration in force (defaults when setup() was not called). A
--- library that arrived after setup() (`:Mia install`, a build) brings its
--- defaults now, and its check of setup()'s options, said once if it fails.
--- @return mia.Config
function M.get()
  if not current or (not complete and require("mia.core").load()) then
    complete = require("mia.core").load() ~= nil
    if current and complete then
      local ok, problem = pcall(core_check, given)
      if not ok then
        vim.notify(tostring(problem), vim.log.levels.ERROR)
      end
    end
    current = vim.tbl_deep_extend("force", defaults(), given)
  end
  return current
end

-- What the core and the UI derive from the configuration (core(), agent(),
-- modes(), shared()) lives in mia.settings, loaded when first needed:
-- setup() pays only for storing and validating.
setmetatable(M, {
  __index = function(_, key)
    return require("mia.settings")[key]
  end,
})

return M
