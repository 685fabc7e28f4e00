--- @-mentions in the chat prompt. `@path` attaches a project file (an
--- image by its bytes), `@dir/` a folder listing, `@buffer` / `@buffer:name`
--- a buffer's text as it is now (saved or not), `@selection` the last visual
--- selection, `@diagnostics` / `@diagnostics:all` the diagnostics,
--- `@clipboard-N.png` an image from `:Mia paste`, and `@server:uri` an MCP
--- server's resource. Typing `@` completes them.
---
--- Each kind of mention is one entry of `kinds`: `parse` recognizes a
--- token, `complete` offers items for a typed prefix, and either `attach`
--- turns one mention into an attachment the core reads and checks (files,
--- folders) or sends as is (text, images), or `resolve` turns the kind's
--- mentions into context text (MCP resources, read asynchronously).

local M = {}

local api = vim.api

--- @class mia.MentionKind
--- @field name string
--- @field parse fun(token: string): table? the mention, or nil when the token is not of this kind
--- @field complete fun(prefix: string): table[] completion items (the text after `@`)
--- @field complete_later? fun(prefix: string, cb: fun(items: table[])): boolean matches a large list in slices, then `cb`; false when `complete` answers now
--- @field attach? fun(mention: table): table?, string? the attachment for the core, or nil and why not
--- @field resolve? fun(mentions: table[], cb: fun(err: string?, context: string?))
--- @field pending? fun(): boolean true while what completion offers is still being gathered
--- @field prepare? fun(done: fun()) gathers what completion offers (starts servers), then `done()`

--- Most items one completion offers: the menu shows a screenful anyway,
--- and fewer items keep each keystroke's refresh cheap.
M.MAX_ITEMS = 50

--- Images from `:Mia paste` waiting for the next message, by name (`clipboard-1.png`).
--- @type table<string, { media_type: string, data: string }>
M.pasted = {}
local pasted_count = 0

--- Keeps a pasted image for the next message; its mention name.
--- @param media_type string
--- @param data string base64
--- @return string
function M.add_pasted(media_type, data)
  pasted_count = pasted_count + 1
  local ext = media_type:match("^image/(%w+)$") or "png"
  local name = string.format("clipboard-%d.%s", pasted_count, ext == "jpeg" and "jpg" or ext)
  M.pasted[name] = { media_type = media_type, data = data }
  return name
end

--- The buffer being edited: the most recently used listed buffer that is not mia's.
--- @return integer?
local function editing_buf()
  local best, used = nil, -1
  for _, info in ipairs(vim.fn.getbufinfo({ buflisted = 1 })) do
    if vim.bo[info.bufnr].buftype == "" and info.lastused > used then
      best, used = info.bufnr, info.lastused
    end
  end
  return best
end

local function buf_label(b)
  local name = api.nvim_buf_get_name(b)
  return name ~= "" and vim.fn.fnamemodify(name, ":~:.") or ("[No Name " .. b .. "]")
end

local function buf_uri(b)
  local name = api.nvim_buf_get_name(b)
  return name ~= "" and vim.uri_from_fname(name) or ("mia://buffer/" .. b)
end

--- Items of `words` that start with `@` .. `prefix`.
local function starting(words, prefix, menu)
  local items = {}
  for _, w in ipairs(words) do
    if vim.startswith(w, prefix) then
      items[#items + 1] = { word = "@" .. w, abbr = "@" .. w, menu = menu, kind = "M" }
    end
  end
  return items
end

local function listed_names()
  local names = {}
  for _, info in ipairs(vim.fn.getbufinfo({ buflisted = 1 })) do
    if vim.bo[info.bufnr].buftype == "" and info.name ~= "" then
      names[#names + 1] = "buffer:" .. vim.fn.fnamemodify(info.name, ":~:.")
    end
  end
  return names
end

local function diagnostics_text(all)
  local b = editing_buf()
  local list = vim.diagnostic.get(not all and b or nil)
  local lines = {}
  for _, d in ipairs(list) do
    local sev = vim.diagnostic.severity[d.severity] or "?"
    local where = all and (buf_label(d.bufnr) .. ":") or ""
    lines[#lines + 1] = string.format("%s%d:%d: %s: %s%s", where, d.lnum + 1, d.col + 1, sev, d.message, d.source and (" [" .. d.source .. "]") or "")
  end
  return lines, b
end

local function cwd()
  return vim.fn.getcwd()
end

--- The path of a token when it names an existing file or directory of the project, and which.
local function project_path(token)
  local stat = vim.uv.fs_stat(vim.fs.joinpath(cwd(), token))
  if not stat and token:sub(1, 1) == "/" then
    stat = vim.uv.fs_stat(token)
  end
  if stat then
    return stat.type == "directory" and "folder" or "file"
  end
  return nil
end

local function configured(server)
  return vim.tbl_contains(require("mia.mcp").names(), server)
end

--- Lists longer than this are matched in slices across event-loop turns
--- (fuzzy matching 100,000 paths takes ~65 ms: typing must not wait for it).
M.SYNC_MAX = 20000
local SLICE = 5000

--- The latest sliced match: `{ words, prefix, items }` once done.
local sliced = { job = 0 }

--- Fuzzy matches of `prefix` in `words`, best first, at most `limit`, in
--- slices of 5,000 with the loop free in between; `cb(matches)` runs at the
--- end. A newer call abandons an older one.
local function fuzzy_sliced(words, prefix, limit, cb)
  sliced.job = sliced.job + 1
  local me, best, i = sliced.job, {}, 1
  local function step()
    if me ~= sliced.job then
      return
    end
    local r = vim.fn.matchfuzzypos(vim.list_slice(words, i, i + SLICE - 1), prefix, { limit = limit })
    for k, w in ipairs(r[1]) do
      best[#best + 1] = { w, r[3][k] }
    end
    table.sort(best, function(a, b)
      return a[2] > b[2]
    end)
    for k = #best, limit + 1, -1 do
      best[k] = nil
    end
    i = i + SLICE
    if i <= #words then
      vim.schedule(step)
      return
    end
    local out = {}
    for k, b in ipairs(best) do
      out[k] = b[1]
    end
    sliced.done = { words = words, prefix = prefix, matches = out }
    cb(out)
  end
  step()
end

--- Fuzzy matches of `prefix` in `words` now when the list is small or they
--- were just computed; else nil (see [fuzzy_sliced]).
local function fuzzy_now(words, prefix, limit)
  if prefix == "" then
    return vim.list_slice(words, 1, limit)
  end
  if #words <= M.SYNC_MAX then
    return vim.fn.matchfuzzy(words, prefix, { limit = limit })
  end
  local d = sliced.done
  if d and d.words == words and d.prefix == prefix then
    return d.matches
  end
  return nil
end

local function path_items(files, dirs, prefix)
  local items = {}
  local function add(matched, kind)
    for _, w in ipairs(matched or {}) do
      if #items >= M.MAX_ITEMS then
        return
      end
      items[#items + 1] = { word = "@" .. w, abbr = "@" .. w, kind = kind, menu = kind == "D" and "folder" or "file" }
    end
  end
  add(files, "F")
  add(dirs, "D")
  return items
end

--- @type mia.MentionKind[]
M.kinds = {
  {
    name = "pasted",
    parse = function(token)
      return M.pasted[token] and { name = token } or nil
    end,
    complete = function(prefix)
      return starting(vim.tbl_keys(M.pasted), prefix, "pasted image")
    end,
    attach = function(m)
      local img = M.pasted[m.name]
      return { kind = "image", media_type = img.media_type, data = img.data, name = m.name }
    end,
  },
  {
    name = "buffer",
    parse = function(token)
      if token == "buffer" then
        return { name = nil }
      end
      local name = token:match("^buffer:(.+)$")
      return name and { name = name } or nil
    end,
    complete = function(prefix)
      return vim.list_extend(starting({ "buffer" }, prefix, "the buffer you edit"), starting(listed_names(), prefix, "buffer"))
    end,
    attach = function(m)
      local b
      if m.name then
        b = vim.fn.bufnr(m.name)
        if b <= 0 then
          return nil, "no buffer named " .. m.name .. " (see :ls)"
        end
      else
        b = editing_buf()
        if not b then
          return nil, "no buffer is being edited"
        end
      end
      local lines = api.nvim_buf_get_lines(b, 0, -1, false)
      return { kind = "text", uri = buf_uri(b), name = buf_label(b), text = table.concat(lines, "\n") .. "\n" }
    end,
  },
  {
    name = "selection",
    parse = function(token)
      return token == "selection" and {} or nil
    end,
    complete = function(prefix)
      return starting({ "selection" }, prefix, "the last visual selection")
    end,
    attach = function()
      local b = editing_buf()
      if not b then
        return nil, "no buffer is being edited"
      end
      local s, e = api.nvim_buf_get_mark(b, "<"), api.nvim_buf_get_mark(b, ">")
      if s[1] == 0 or e[1] == 0 then
        return nil, "there is no visual selection in " .. buf_label(b) .. " (select lines with v or V first)"
      end
      local lines = api.nvim_buf_get_lines(b, s[1] - 1, e[1], false)
      local range = string.format("%d-%d", s[1], e[1])
      return {
        kind = "text",
        uri = buf_uri(b) .. "#L" .. range,
        name = buf_label(b) .. ":" .. range,
        text = table.concat(lines, "\n") .. "\n",
      }
    end,
  },
  {
    name = "diagnostics",
    parse = function(token)
      if token == "diagnostics" or token == "diagnostics:all" then
        return { all = token == "diagnostics:all" }
      end
      return nil
    end,
    complete = function(prefix)
      return starting({ "diagnostics", "diagnostics:all" }, prefix, "diagnostics")
    end,
    attach = function(m)
      local lines, b = diagnostics_text(m.all)
      local name = m.all and "diagnostics" or ("diagnostics of " .. (b and buf_label(b) or "the buffer"))
      if #lines == 0 then
        lines = { "(no diagnostics)" }
      end
      return { kind = "text", uri = "mia://diagnostics" .. (m.all and "" or ("/" .. (b or 0))), name = name, text = table.concat(lines, "\n") .. "\n" }
    end,
  },
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
  {
    name = "path",
    parse = function(token)
      local kind = project_path(token)
      if kind then
        return { kind = kind, path = token }
      end
      return nil
    end,
    complete = function(prefix)
      local files = require("mia.mention_files")
      local list = files.files(cwd())
      local f = fuzzy_now(list, prefix, M.MAX_ITEMS)
      local d = (not f or #f < M.MAX_ITEMS or prefix:find("/$")) and fuzzy_now(files.dirs(cwd()), prefix, M.MAX_ITEMS) or nil
      return path_items(f, d, prefix)
    end,
    --- Matches in slices (a large list); `cb(items)` when they are in.
    complete_later = function(prefix, cb)
      local files = require("mia.mention_files")
      local list = files.files(cwd())
      if prefix == "" or #list <= M.SYNC_MAX then
        return false
      end
      fuzzy_sliced(list, prefix, M.MAX_ITEMS, function(matched)
        local dirs = files.dirs(cwd())
        local d = (#matched < M.MAX_ITEMS or prefix:find("/$")) and fuzzy_now(dirs, prefix, M.MAX_ITEMS) or nil
        cb(path_items(matched, d, prefix))
      end)
      return true
    end,
    attach = function(m)
      return { kind = m.kind, path = m.path }
    end,
    pending = function()
      local _, pending = require("mia.mention_files").files(cwd())
      return pending
    end,
    prepare = function(done)
      require("mia.mention_files").refresh(cwd(), done)
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

--- Resolves every mention of `text`; `cb(err, context, attachments)` runs
--- once, with the joined context text of the kinds read here (nil when
--- there is none), the attachments for the core (files, folders, editor
--- text, images) or the first error. Runs `cb` at once when nothing needs
--- reading.
--- @param text string
--- @param cb fun(err: string?, context: string?, attachments: table[]?)
function M.expand(text, cb)
  local found, n = M.find(text)
  if n == 0 then
    cb(nil, nil, nil)
    return
  end
  local attachments = {}
  for _, kind in ipairs(M.kinds) do
    if found[kind] and kind.attach then
      for _, m in ipairs(found[kind]) do
        local a, why = kind.attach(m)
        if not a then
          cb(string.format("cannot attach @%s: %s", kind.name, why or "unknown reason"), nil, nil)
          return
        end
        attachments[#attachments + 1] = a
      end
    end
  end
  local left, parts, failed = 0, {}, false
  for kind in pairs(found) do
    if kind.resolve then
      left = left + 1
      parts[kind] = false
    end
  end
  if left == 0 then
    cb(nil, nil, attachments)
    return
  end
  for _, kind in ipairs(M.kinds) do
    if found[kind] and kind.resolve then
      kind.resolve(found[kind], function(err, context)
        if failed then
          return
        end
        if err then
          failed = true
          cb(err, nil, nil)
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
          cb(nil, #out > 0 and table.concat(out, "\n\n") or nil, attachments)
        end
      end)
    end
  end
end

--- Forgets the pasted images a sent message carried.
--- @param attachments table[]?
function M.sent(attachments)
  for _, a in ipairs(attachments or {}) do
    if a.kind == "image" and a.name then
      M.pasted[a.name] = nil
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

--- Like [M.complete] for the mention being typed, when a kind matches a
--- large list in slices: `cb(start_col, items)` runs once those are in
--- (with every kind's items). False when nothing is computed later.
--- @param before string
--- @param cb fun(start: integer, items: table[])
--- @return boolean
function M.complete_later(before, cb)
  local at, prefix = before:match("()@(%S*)$")
  if not at or (at > 1 and not before:sub(at - 1, at - 1):match("%s")) then
    return false
  end
  for _, kind in ipairs(M.kinds) do
    if kind.complete_later and kind.complete_later(prefix, function()
      local start, items = M.complete(before)
      cb(start, items)
    end) then
      return true
    end
  end
  return false
end

return M
