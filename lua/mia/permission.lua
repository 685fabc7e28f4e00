--- Permission questions from the agent loop, asked through vim.ui.select so
--- the user's picker (telescope, snacks, fzf-lua, dressing) shows them. The
--- answers are the Agent Client Protocol's permission option kinds.

local M = {}

--- Options in the order shown; `kind` is what the core receives.
M.options = {
  { name = "Allow once", kind = "allow_once" },
  { name = "Allow always for this project", kind = "allow_always" },
  { name = "Reject", kind = "reject_once" },
}

local VERBS = { read = "read with", write = "change files with", execute = "run" }

--- The question for one call.
function M.prompt_for(data)
  local verb = VERBS[data.effect] or "use"
  if data.effect == "execute" and data.subject then
    return string.format("mia wants to run `%s`: %s", data.tool, data.subject)
  end
  if data.subject then
    return string.format("mia wants to %s `%s` on %s", verb, data.tool, data.subject)
  end
  return string.format("mia wants to %s `%s`", verb, data.tool)
end

--- Asks the user about call `call`; answers the core with the chosen kind
--- (a dismissed picker rejects).
function M.ask(call, data)
  local names = vim.tbl_map(function(o)
    return o.name
  end, M.options)
  vim.ui.select(names, { prompt = M.prompt_for(data), kind = "mia_permission" }, function(_, idx)
    local kind = idx and M.options[idx].kind or "reject_once"
    local loader = require("mia.core")
    pcall(loader.get().reply, call, true, kind)
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

--- Asks a yes/no question whose default is no (e.g. a budget limit):
--- `data.message` ends with "[y/N]"; only an answer starting with y says yes.
function M.confirm(call, data)
  vim.ui.input({ prompt = data.message .. " " }, function(answer)
    local yes = answer ~= nil and answer:match("^%s*[yY]") ~= nil
    local loader = require("mia.core")
    pcall(loader.get().reply, call, true, yes)
  end)
end

return M
