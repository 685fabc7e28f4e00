--- Permission questions from the agent loop, asked through vim.ui.select so
--- the user's picker (telescope, snacks, fzf-lua, dressing) shows them. The
--- answers are the Agent Client Protocol's permission option kinds.

local M = {}

local VERBS = { read = "read with", write = "change files with", execute = "run" }

--- The question for one call; `data` is ACP's `session/request_permission`
--- params, mia's details (tool, subject, effect) in `_meta.mia`.
function M.prompt_for(data)
  local mia = type(data._meta) == "table" and data._meta.mia or {}
  if mia.agent then
    local tc = type(data.toolCall) == "table" and data.toolCall or {}
    local title = type(tc.title) == "string" and tc.title or "use a tool"
    return string.format("%s wants to: %s", mia.agent, title)
  end
  local tool = mia.tool or (data.toolCall or {}).title or "a tool"
  local subject = mia.subject ~= vim.NIL and mia.subject or nil
  local verb = VERBS[mia.effect] or "use"
  if mia.effect == "execute" and subject then
    return string.format("mia wants to run `%s`: %s", tool, subject)
  end
  if subject then
    return string.format("mia wants to %s `%s` on %s", verb, tool, subject)
  end
  return string.format("mia wants to %s `%s`", verb, tool)
end

--- Asks the user about call `call` with the request's options (in their
--- order) and answers the core with ACP's outcome: the chosen option, or
--- the first reject option when the picker is dismissed. A request whose
--- tool call carries a diff is an edit review (mia.review), an external
--- agent's too when its options map to the review's keys.
function M.ask(call, data)
  local review = require("mia.review")
  local agent = type(data._meta) == "table" and type(data._meta.mia) == "table" and data._meta.mia.agent
  if agent then
    -- an edit with options the review's keys can answer is reviewed;
    -- anything else is the agent's own options in the picker
    local diff = review.diff_of(data)
    if not (diff and review.ask_agent(call, data, diff, agent)) then
      M.ask_agent(call, data)
    end
    return
  end
  local diff = review.diff_of(data)
  if diff then
    review.ask(call, data, diff)
    return
  end
  local options = data.options or {}
  local names = vim.tbl_map(function(o)
    return o.name
  end, options)
  vim.ui.select(names, { prompt = M.prompt_for(data), kind = "mia_permission" }, function(_, idx)
    local chosen = idx and options[idx] or nil
    if not chosen then
      for _, o in ipairs(options) do
        if o.kind == "reject_once" then
          chosen = o
          break
        end
      end
    end
    local outcome = chosen and { outcome = "selected", optionId = chosen.optionId } or { outcome = "cancelled" }
    local loader = require("mia.core")
    pcall(loader.get().reply, call, true, { outcome = outcome })
  end)
end

--- An external agent's question: its own options, in its order; the
--- chosen option's exact `optionId` goes back, and a dismissed picker is
--- ACP's `cancelled` outcome (the agent decides what that means).
function M.ask_agent(call, data)
  local options = type(data.options) == "table" and data.options or {}
  local names = vim.tbl_map(function(o)
    return tostring(o.name or o.optionId)
  end, options)
  vim.ui.select(names, { prompt = M.prompt_for(data), kind = "mia_permission" }, function(_, idx)
    local chosen = idx and options[idx] or nil
    local outcome = chosen and { outcome = "selected", optionId = chosen.optionId } or { outcome = "cancelled" }
    pcall(require("mia.core").get().reply, call, true, { outcome = outcome })
  end)
end

--- Asks `question` through vim.ui.select (or vim.ui.input with
--- `opts.allow_freeform` and no choices) and calls `answer` once: with the
--- choice, or `opts.default` when dismissed or after `opts.timeout` ms.
--- Shared by Lua tools' ctx.ask and Rust tools' ToolContext::ask.
function M.ask_user(question, opts, answer)
  opts = opts or {}
  local answered = false
  local function once(value)
    if not answered then
      answered = true
      answer(value)
    end
  end
  if opts.timeout then
    vim.defer_fn(function()
      once(opts.default)
    end, opts.timeout)
  end
  if opts.allow_freeform and not opts.choices then
    vim.ui.input({ prompt = question .. " ", default = opts.default }, function(text)
      once(text or opts.default)
    end)
  else
    vim.ui.select(opts.choices or { "Yes", "No" }, { prompt = question }, function(choice)
      once(choice or opts.default)
    end)
  end
end

--- A question from a Rust tool (`ToolContext::ask`): `data = { question,
--- opts = { choices, default, timeout, allow_freeform } }`; answers the
--- chosen text, or nothing (the tool then uses its default).
function M.question(call, data)
  M.ask_user(data.question, data.opts, function(value)
    local loader = require("mia.core")
    pcall(loader.get().reply, call, true, value == nil and vim.NIL or value)
  end)
end

--- Asks a yes/no question whose default is no (a budget limit: `data =
--- { kind = "budget", reason }`); only an answer starting with y says yes.
function M.confirm(call, data)
  vim.ui.input({ prompt = data.reason .. " Continue? [y/N] " }, function(answer)
    local yes = answer ~= nil and answer:match("^%s*[yY]") ~= nil
    local loader = require("mia.core")
    pcall(loader.get().reply, call, true, yes)
  end)
end

return M
