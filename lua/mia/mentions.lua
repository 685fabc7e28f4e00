--- @-mentions in the chat prompt: `@server:uri` names an MCP server's
--- resource. Typing `@` completes them; on send, each mention is read (in
--- the core, asynchronously) and its content attached to the message.
---
--- Each kind of mention is one entry of `kinds` (a file kind can join
--- later): `parse` recognizes a token, `complete` offers items for a typed
--- prefix, `resolve` turns the kind's mentions into context text.

local M = {}

--- @class mia.MentionKind
--- @field name string
--- @field parse fun(token: string): table? the mention, or nil when the token is not of this kind
--- @field complete fun(prefix: string): table[] completion items (the text after `@`)
--- @field resolve fun(mentions: table[], cb: fun(err: string?, context: string?))
--- @field pending? fun(): boolean true while what completion offers is still being gathered
--- @field prepare? fun(done: fun()) gathers what completion offers (starts servers), then `done()`

local function configured(server)
  return vim.tbl_contains(require("mia.mcp").names(), server)
end

--- @type mia.MentionKind[]
M.kinds = {
  {
    name = "mcp_resource",
    parse = function(token)
      local server, uri = token:match("^([%w_%-]+):(%S+)$")
      if server and configured(server) then
        return { server = server, uri = uri }
      end
      return nil
    end,
    complete = function(prefix)
      local items = {}
      local lower = prefix:lower()
      for _, r in ipairs(require("mia.mcp").resources()) do
        local word = "@" .. r.server .. ":" .. r.uri
        if
          vim.startswith(word, "@" .. prefix)
          or (lower ~= "" and (r.uri:lower():find(lower, 1, true) or (r.name or ""):lower():find(lower, 1, true)))
        then
          items[#items + 1] = {
            word = word,
            abbr = word,
            menu = r.name ~= "" and r.name or r.server,
            info = r.description or "",
            kind = "R",
          }
        end
      end
      return items
    end,
    resolve = function(mentions, cb)
      local list = vim.tbl_map(function(m)
        return { server = m.server, uri = m.uri }
      end, mentions)
      require("mia.api")._job("mcp_read", function(err, text)
        if err then
          cb(tostring(err.message or err), nil)
        else
          cb(nil, text)
        end
      end, require("mia.settings").mcp_servers(), list)
    end,
    pending = function()
      return require("mia.mcp").any_not_started()
    end,
    prepare = function(done)
      require("mia.mcp").start(done)
    end,
  },
}

--- Characters that end a sentence rather than a mention.
local TRAILING = "[%.,;!%?%)%]]+$"

--- The mentions in `text`, by kind: `{ [kind] = { mention, … } }` and how many.
--- A mention is `@` at the start or after a space, up to the next space.
--- @param text string
--- @return table<mia.MentionKind, table[]>, integer
function M.find(text)
  local found, n, seen = {}, 0, {}
  for token in (" " .. text):gmatch("%s@(%S+)") do
    token = token:gsub(TRAILING, "")
    if not seen[token] then
      seen[token] = true
      for _, kind in ipairs(M.kinds) do
        local m = kind.parse(token)
        if m then
          found[kind] = found[kind] or {}
          table.insert(found[kind], m)
          n = n + 1
          break
        end
      end
    end
  end
  return found, n
end

--- Resolves every mention of `text`; `cb(err, context)` runs once, with
--- the joined context (nil when `text` mentions nothing) or the first
--- error. Runs `cb` at once when there is nothing to read.
--- @param text string
--- @param cb fun(err: string?, context: string?)
function M.expand(text, cb)
  local found, n = M.find(text)
  if n == 0 then
    cb(nil, nil)
    return
  end
  local left, parts, failed = 0, {}, false
  for kind in pairs(found) do
    left = left + 1
    parts[kind] = false
  end
  for _, kind in ipairs(M.kinds) do
    if found[kind] then
      kind.resolve(found[kind], function(err, context)
        if failed then
          return
        end
        if err then
          failed = true
          cb(err, nil)
          return
        end
        parts[kind] = context or ""
        left = left - 1
        if left == 0 then
          local out = {}
          for _, k in ipairs(M.kinds) do
            if parts[k] and parts[k] ~= "" then
              out[#out + 1] = parts[k]
            end
          end
          cb(nil, table.concat(out, "\n\n"))
        end
      end)
    end
  end
end

--- Completion items for the mention being typed before the cursor, or nil
--- when the cursor is not in one. With `on_more`, servers not started yet
--- are started, and `on_more()` runs when they are ready.
--- @param before string the line up to the cursor
--- @param on_more? fun()
--- @return integer? start_col (0-based), table[]? items
function M.complete(before, on_more)
  local at, prefix = before:match("()@(%S*)$")
  if not at or (at > 1 and not before:sub(at - 1, at - 1):match("%s")) then
    return nil, nil
  end
  local items = {}
  for _, kind in ipairs(M.kinds) do
    if on_more and kind.pending and kind.pending() and kind.prepare then
      -- Not from inside the completion function (text is locked there).
      vim.schedule(function()
        local ok, err = pcall(kind.prepare, on_more)
        if not ok then
          vim.notify(tostring(err), vim.log.levels.ERROR)
        end
      end)
    end
    vim.list_extend(items, kind.complete(prefix))
  end
  return at - 1, items
end

return M
