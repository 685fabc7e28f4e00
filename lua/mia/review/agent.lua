--- External agents' edits: their permission request carries the diff, and
--- the review's keys answer with the agent's own options, matched by ACP
--- kind; what the core says about the proposal is noted above its diff.

local M = {}

--- The review key that answers with each ACP option kind.
local KEY_OF_KIND = { allow_once = "accept", allow_always = "accept_always", reject_once = "reject" }

--- The agent's options by the review key that answers with them: `{
--- accept = <allow_once>, accept_always = <allow_always>, reject =
--- <reject_once, or reject_always when it is the only reject> }`, each
--- absent when the agent does not offer it. nil and the reason when an
--- option would have no key (an unknown kind, two options of one kind,
--- both reject kinds): the plain picker asks then.
--- @return table|nil, string|nil
function M.choices(options)
  if type(options) ~= "table" or #options == 0 then
    return nil, "no options"
  end
  local by_kind = {}
  for _, o in ipairs(options) do
    if type(o) ~= "table" or type(o.optionId) ~= "string" or type(o.kind) ~= "string" then
      return nil, "an option without an id or a kind"
    end
    if by_kind[o.kind] then
      return nil, "two options of kind " .. o.kind
    end
    by_kind[o.kind] = o
  end
  local choices = {}
  for kind, o in pairs(by_kind) do
    local key = KEY_OF_KIND[kind]
    if kind == "reject_always" and not by_kind.reject_once then
      key = "reject"
    end
    if not key then
      return nil, "no key for the kind " .. kind
    end
    choices[key] = o
  end
  return choices
end

--- What an agent's proposal needs said above its diff (from `_meta.mia`,
--- filled by the core): outside the project, cut, a fragment, old text
--- taken from the disk.
function M.notes(agent, meta)
  local notes = {}
  if meta.outside then
    notes[#notes + 1] = string.format(
      "⚠ outside the project (%s): %s writes it with its own tools if you accept",
      tostring(meta.root or "?"),
      agent
    )
  end
  local cut = type(meta.cut) == "table" and meta.cut or nil
  if cut then
    local function size(n)
      n = tonumber(n) or 0
      return n >= 1024 * 1024 and string.format("%.1f MB", n / 1024 / 1024) or string.format("%d KB", math.ceil(n / 1024))
    end
    for _, side in ipairs({ { "new", "new text" }, { "old", "old text" } }) do
      local p = side[1]
      if cut[p .. "_bytes"] then
        notes[#notes + 1] = string.format(
          "⚠ too large to show in full: the %s has %d lines (%s); the diff covers its first %d. Accepting accepts all of it.",
          side[2],
          tonumber(cut[p .. "_lines"]) or 0,
          size(cut[p .. "_bytes"]),
          tonumber(cut[p .. "_shown_lines"]) or 0
        )
      end
    end
  end
  if meta.fragment then
    notes[#notes + 1] = "the agent sent the changed part of the file: line numbers count from that part"
  end
  if meta.old_from_disk then
    notes[#notes + 1] = "the agent sent the whole new text: the diff is against the file on disk"
  end
  return notes
end

--- An option's name for the footer: one line, at most 24 characters.
function M.label(option)
  local name = tostring(option.name or option.optionId):gsub("%c", " ")
  return vim.fn.strcharpart(name, 0, 24)
end

--- The option dismissing an agent's review answers with: its reject
--- option (`choices` as `M.choices` gives them), or nil (ACP's
--- `cancelled`) when it offers none.
function M.dismiss_option(choices)
  return choices.reject and choices.reject.optionId or nil
end

--- The float's actions for external agent `r.agent`'s edit (`{ key,
--- hint, fn, desc }` each, `k` the review keys): each key answers with the
--- agent's option of its kind through `finish(r, option_id)`; a key whose
--- kind the agent does not offer has no hint and says so.
function M.actions(r, k, finish)
  local who, c = r.agent.name, r.agent.choices
  local function say(text)
    return function()
      vim.notify("mia: " .. text, vim.log.levels.INFO)
    end
  end
  local function choose(option, what)
    if option then
      return function()
        finish(r, option.optionId)
      end
    end
    return say(string.format("%s offers no %s option for this edit", who, what))
  end
  local dismiss = function()
    finish(r, M.dismiss_option(c))
  end
  local no_file_scope = "an agent's permission has no per-file scope"
  if c.accept_always then
    no_file_scope = string.format("%s: %s answers “%s”", no_file_scope, k.accept_always or "A", M.label(c.accept_always))
  end
  local no_edit = string.format(
    "%s writes this file with its own tools, so its proposal cannot be edited here: reject it and tell %s what you want instead",
    who,
    who
  )
  return {
    {
      key = k.accept,
      hint = c.accept and M.label(c.accept),
      desc = "accept (the agent's allow_once)",
      fn = choose(c.accept, "“allow once”"),
    },
    {
      key = k.accept_always,
      hint = c.accept_always and M.label(c.accept_always),
      desc = "allow always (the agent's allow_always)",
      fn = choose(c.accept_always, "“allow always”"),
    },
    { key = k.accept_file, desc = "not for agents", fn = say(no_file_scope) },
    {
      key = k.reject,
      hint = c.reject and M.label(c.reject),
      desc = "reject (the agent's reject option)",
      fn = c.reject and dismiss or choose(nil, "reject"),
    },
    { key = k.edit, desc = "not for agents", fn = say(no_edit) },
    { key = k.dismiss, hint = c.reject and "dismiss" or "cancel", desc = "dismiss", fn = dismiss },
  }
end

return M
