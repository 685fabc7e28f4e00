--- Project tools: `.mia/tools/*.lua` in a project. Each file returns a tool
--- spec (or a list of them). Since that runs code, a file is loaded only
--- after the user trusts its CONTENT: the answer is remembered per file as
--- the sha256 of the bytes the user said yes (or no) to, in
--- `data_dir/trusted.json`:
---
---     { "version": 2,
---       "files": { "/abs/.mia/tools/x.lua": { "sha256": "…", "answer": "trust" } },
---       "dirs": { "/abs/.mia/tools": "never" } }
---
--- A new file, or one whose bytes changed since the answer, is asked about
--- again before it runs. `dirs` holds only "never" answers carried over from
--- the old per-directory format (old "trust" entries are dropped, so such a
--- directory is asked about once more, per file).
---
--- Why not Neovim's own trust database (vim.secure): on 0.11 (checked on
--- 0.11.4) `vim.secure.trust({ action = "allow", path = … })` is refused (allow
--- works only through a buffer, which would mean loading the tool file into
--- a buffer — autocmds, LSP — and hashing its lines rather than its bytes),
--- `vim.secure.read()` asks with a blocking confirm(), its "deny" is per path
--- rather than per content, and its writer silently drops lines it cannot
--- parse. mia asks asynchronously through vim.ui.select and must never
--- silently lose a corrupt file, so it keeps its own.

local M = {}

local uv = vim.uv or vim.loop

--- bounds on what a project (or a damaged state file) can make mia read
local MAX_TOOL_BYTES = 1024 * 1024
local MAX_TOOL_FILES = 100
local MAX_TRUST_BYTES = 8 * 1024 * 1024
local MAX_BACKUPS = 100
--- files named in the question; the rest are counted
local MAX_LISTED = 10

--- file path -> sha256 already dealt with in this Neovim (loaded, refused)
local handled = {}
--- file path -> names of the tools it registered in this Neovim
local loaded_by = {}
--- tools directories with a question open
local asking = {}
--- file path -> why it was skipped, so each skip is reported once
local skipped = {}
--- set (and reported) when a corrupt trust file could not be moved aside:
--- answers then live here for this Neovim only, and the file is not
--- written until it reads cleanly again
local broken = nil

--- At most `max` + 1 bytes of `path` when it is a regular file; nil and why
--- when it is not, or cannot be read. Opened without blocking and checked on
--- the open file: a FIFO in its place would otherwise hold Neovim's main
--- thread until a writer came, which may be never.
local function read_regular(path, max)
  local c = uv.constants or {}
  local flags = c.O_NONBLOCK and bit.bor(c.O_RDONLY or 0, c.O_NONBLOCK) or "r"
  local fd, err = uv.fs_open(path, flags, 0)
  if not fd then
    return nil, err
  end
  local st = uv.fs_fstat(fd)
  if not st or st.type ~= "file" then
    uv.fs_close(fd)
    return nil, "not a regular file"
  end
  local data, read_err = uv.fs_read(fd, max + 1, 0)
  uv.fs_close(fd)
  if not data then
    return nil, read_err
  end
  return data
end

local function trust_file()
  return require("mia.config").get().data_dir .. "/trusted.json"
end

--- Messages are shown after the current command, so a problem with a
--- project file never interrupts the user's :Mia prompt (an error message
--- inside a command would abort it under :try or over RPC).
local function notify(msg, level)
  vim.schedule(function()
    vim.notify("mia: " .. msg, level or vim.log.levels.WARN)
  end)
end

local function empty_store()
  return { version = 2, files = {}, dirs = {} }
end

local function is_sha256(s)
  return type(s) == "string" and #s == 64 and s:match("^%x+$") ~= nil
end

--- The store decoded from `text`, or nil and why it is not one.
local function parse(text)
  local ok, t = pcall(vim.json.decode, text)
  if not ok then
    return nil, "it is not valid JSON (" .. tostring(t) .. ")"
  end
  if type(t) ~= "table" or vim.islist(t) and #t > 0 then
    return nil, "it does not hold a JSON object"
  end
  local store = empty_store()
  if t.version == nil then
    -- the old format: { [dir] = "trust" | "never" }
    for dir, answer in pairs(t) do
      if type(dir) ~= "string" or (answer ~= "trust" and answer ~= "never") then
        return nil, string.format("entry %s is neither a version 2 store nor an old directory answer", vim.inspect(dir))
      end
      if answer == "never" then
        store.dirs[dir] = "never"
      end
    end
    return store
  end
  if t.version ~= 2 then
    return nil, "its version " .. vim.inspect(t.version) .. " is not one this mia knows (2)"
  end
  if type(t.files) ~= "table" or (t.dirs ~= nil and type(t.dirs) ~= "table") then
    return nil, '"files" (or "dirs") is not a JSON object'
  end
  for file, entry in pairs(t.files) do
    if
      type(file) ~= "string"
      or type(entry) ~= "table"
      or not is_sha256(entry.sha256)
      or (entry.answer ~= "trust" and entry.answer ~= "never")
    then
      return nil, string.format("the entry for %s is not { sha256, answer }", vim.inspect(file))
    end
    store.files[file] = { sha256 = entry.sha256, answer = entry.answer }
  end
  for dir, answer in pairs(t.dirs or {}) do
    if type(dir) ~= "string" or answer ~= "never" then
      return nil, string.format('the directory entry %s is not "never"', vim.inspect(dir))
    end
    store.dirs[dir] = "never"
  end
  return store
end

--- Moves the unreadable trust file aside (never over an existing backup);
--- returns the backup's path, or nil and why not.
local function move_aside(path)
  for n = 0, MAX_BACKUPS do
    local bak = n == 0 and path .. ".bak" or string.format("%s.bak.%d", path, n)
    if not uv.fs_stat(bak) then
      local ok, err = uv.fs_rename(path, bak)
      if ok then
        return bak
      end
      return nil, err
    end
  end
  return nil, string.format("%s.bak to .bak.%d all exist", path, MAX_BACKUPS)
end

--- Reads the trust store (a small file read on the main thread). A corrupt
--- file is reported once, moved aside with its bytes intact, and treated
--- as empty, so every project tool is asked about again.
local function read_store()
  local path = trust_file()
  local text = read_regular(path, MAX_TRUST_BYTES)
  if not text then
    broken = nil
    return empty_store()
  end
  local store, why
  if #text > MAX_TRUST_BYTES then
    why = string.format("it is larger than %d MiB", MAX_TRUST_BYTES / 1024 / 1024)
  else
    store, why = parse(text)
  end
  if store then
    broken = nil
    return store
  end
  if broken then
    return broken -- still damaged; already reported
  end
  local bak, err = move_aside(path)
  if bak then
    notify(
      string.format(
        "the project tool trust file %s is unreadable: %s. It was moved to %s; project tools will be asked about again.",
        path,
        why,
        bak
      )
    )
    return empty_store()
  end
  broken = empty_store()
  notify(
    string.format(
      "the project tool trust file %s is unreadable: %s, and could not be moved aside (%s). "
        .. "It is left untouched; answers hold for this Neovim only until you fix or remove it.",
      path,
      why,
      tostring(err)
    )
  )
  return broken
end

--- Creates `dir` and its missing parents. Unlike mkdir(dir, "p"), a
--- directory that appears meanwhile (the core makes data_dir on its own
--- thread when it starts) is not an error.
local function mkdir_p(dir)
  if vim.fn.isdirectory(dir) == 1 then
    return true
  end
  local parent = vim.fn.fnamemodify(dir, ":h")
  if parent ~= dir then
    local ok, err = mkdir_p(parent)
    if not ok then
      return nil, err
    end
  end
  local ok, err = uv.fs_mkdir(dir, tonumber("755", 8))
  if ok or vim.fn.isdirectory(dir) == 1 then
    return true
  end
  return nil, err
end

--- Saves one answer per file ({ [file] = { sha256, answer } }), re-reading
--- the store first so answers from other Neovims are kept. Returns false
--- and reports when it could not be saved.
local function save(answers)
  local store = read_store()
  for file, entry in pairs(answers) do
    store.files[file] = entry
  end
  if store == broken then
    return false
  end
  local path = trust_file()
  local dir = vim.fn.fnamemodify(path, ":h")
  local tmp = string.format("%s.tmp.%d", path, uv.os_getpid())
  local out = {
    version = 2,
    files = next(store.files) and store.files or vim.empty_dict(),
    dirs = next(store.dirs) and store.dirs or vim.empty_dict(),
  }
  local made, err = mkdir_p(dir)
  local f
  if made then
    f, err = io.open(tmp, "wb")
  end
  local ok = f ~= nil
  if f then
    ok, err = f:write(vim.json.encode(out))
    ok = f:close() and ok
  end
  if ok then
    ok, err = uv.fs_rename(tmp, path)
  end
  if not ok then
    os.remove(tmp)
    notify(
      string.format("could not save your answer to %s (%s); it holds for this Neovim only.", path, tostring(err)),
      vim.log.levels.ERROR
    )
    return false
  end
  return true
end

--- The Lua files of a tools directory, sorted, with their bytes and sha256.
--- A file too large to be a tool is reported and left out.
local function scan(dir)
  local names = {}
  local handle = uv.fs_scandir(dir)
  while handle do
    local name, kind = uv.fs_scandir_next(handle)
    if not name then
      break
    end
    local path = dir .. "/" .. name
    if kind == "link" then
      local stat = uv.fs_stat(path)
      kind = stat and stat.type
    end
    if name:sub(-4) == ".lua" and kind == "file" then
      names[#names + 1] = name
    end
  end
  table.sort(names)
  if #names > MAX_TOOL_FILES then
    if not skipped[dir] then
      skipped[dir] = "too many"
      notify(string.format("%s holds %d tool files; only the first %d are considered.", dir, #names, MAX_TOOL_FILES))
    end
    names = vim.list_slice(names, 1, MAX_TOOL_FILES)
  end
  local files = {}
  for _, name in ipairs(names) do
    local path = dir .. "/" .. name
    local content = read_regular(path, MAX_TOOL_BYTES)
    if content then
      local why
      if #content > MAX_TOOL_BYTES then
        why = string.format("is larger than %d KiB", MAX_TOOL_BYTES / 1024)
      elseif content:find("\0", 1, true) then
        -- Lua source is text; NUL bytes mean bytecode or a binary file
        why = "is not Lua source text (it holds NUL bytes)"
      end
      if not why then
        skipped[path] = nil
        files[#files + 1] = { path = path, name = name, content = content, sha256 = vim.fn.sha256(content) }
      elseif skipped[path] ~= why then
        skipped[path] = why
        notify(string.format("project tool %s %s and was not loaded.", path, why), vim.log.levels.ERROR)
      end
    end
  end
  return files
end

--- Runs one tool file from the exact bytes that were trusted (text only,
--- no bytecode) and registers what it returns; returns the tool names.
local function load_file(file)
  local loaded = {}
  local chunk, err = load(file.content, "@" .. file.path, "t")
  local ok, spec = false, err
  if chunk then
    ok, spec = pcall(chunk)
  end
  if not ok then
    notify(string.format("project tool %s failed to load: %s", file.path, spec), vim.log.levels.ERROR)
    return loaded
  end
  if type(spec) ~= "table" then
    return loaded
  end
  local specs = spec.name and { spec } or spec
  for _, s in ipairs(specs) do
    local reg_ok, reg_err = pcall(require("mia.tools").register, s, "project")
    if reg_ok then
      loaded[#loaded + 1] = s.name
    else
      notify(string.format("project tool in %s is invalid: %s", file.path, reg_err), vim.log.levels.ERROR)
    end
  end
  loaded_by[file.path] = loaded
  return loaded
end

--- Forgets the tools a file registered (it changed or went away): changed
--- code is not used until the user trusts it.
local function unload_file(path)
  for _, name in ipairs(loaded_by[path] or {}) do
    require("mia.tools").unregister(name, "project")
  end
  loaded_by[path] = nil
  handled[path] = nil
end

local function question(dir, pending, store)
  local listed = {}
  for i, file in ipairs(pending) do
    if i > MAX_LISTED then
      listed[#listed + 1] = string.format("and %d more", #pending - MAX_LISTED)
      break
    end
    local name = file.name:gsub("%c", "?")
    listed[#listed + 1] = string.format("%s (%s)", name, store.files[file.path] and "changed" or "new")
  end
  return string.format(
    "mia: %s holds project tools (Lua code) you have not trusted in this form: %s. Load them?",
    dir,
    table.concat(listed, ", ")
  )
end

--- Unloads the tools of every project but the one whose tools directory
--- is `dir` (nil: all): a project's tools follow the project.
local function leave_others(dir)
  for path in pairs(vim.deepcopy(loaded_by)) do
    if vim.fn.fnamemodify(path, ":h") ~= dir then
      unload_file(path)
    end
  end
end

--- Once a project's tools are loaded, a change of working directory
--- (`:cd`, `:tcd`, `:lcd`, DirChanged) unloads them and loads the new
--- project's trusted ones; questions about untrusted files wait for the
--- next prompt. Nothing is set up before that (startup cost stays zero).
local following = false
local function follow()
  if following then
    return
  end
  following = true
  vim.api.nvim_create_autocmd("DirChanged", {
    group = vim.api.nvim_create_augroup("mia_project_tools", { clear = true }),
    desc = "mia: project tools follow the project",
    callback = function()
      M.load(vim.fn.getcwd(), { ask = false })
    end,
  })
end

--- Loads the project tools of `root` (default: the working directory):
--- files whose content the user trusted load at once; new or changed
--- files are listed in one question and load only after a yes. Tools of
--- another project loaded before are unloaded first.
--- @param root? string
--- @param opts? { ask?: boolean } ask = false: load trusted files only, ask nothing
function M.load(root, opts)
  local ask = not (opts and opts.ask == false)
  root = vim.fn.fnamemodify(root or vim.fn.getcwd(), ":p"):gsub("/$", "")
  local dir = root .. "/.mia/tools"
  if vim.fn.isdirectory(dir) == 0 then
    leave_others(nil)
    return
  end
  dir = uv.fs_realpath(dir) or dir
  leave_others(dir)
  local store = read_store()
  if store.dirs[dir] == "never" then
    return
  end
  local pending = {}
  local present = {}
  for _, file in ipairs(scan(dir)) do
    present[file.path] = true
    if handled[file.path] ~= file.sha256 then
      unload_file(file.path)
      local entry = store.files[file.path]
      local answer = entry and entry.sha256 == file.sha256 and entry.answer or nil
      if answer == "trust" then
        handled[file.path] = file.sha256
        load_file(file)
        follow()
      elseif answer == "never" then
        handled[file.path] = file.sha256
      else
        pending[#pending + 1] = file
      end
    end
  end
  for path in pairs(vim.deepcopy(handled)) do
    if vim.fn.fnamemodify(path, ":h") == dir and not present[path] then
      unload_file(path)
    end
  end
  if #pending == 0 or asking[dir] or not ask then
    return
  end
  asking[dir] = true
  local choices = { "Trust and load them", "Not now", "Never load these versions" }
  vim.ui.select(choices, {
    prompt = question(dir, pending, store),
    kind = "mia_trust",
  }, function(_, idx)
    asking[dir] = nil
    if idx ~= 1 and idx ~= 3 then
      return -- not now: asked again next time
    end
    local answer = idx == 1 and "trust" or "never"
    local answers = {}
    for _, file in ipairs(pending) do
      handled[file.path] = file.sha256
      answers[file.path] = { sha256 = file.sha256, answer = answer }
    end
    save(answers)
    if idx == 1 then
      local names = {}
      for _, file in ipairs(pending) do
        vim.list_extend(names, load_file(file))
      end
      follow()
      if #names > 0 then
        notify(string.format("loaded %d project tool(s): %s", #names, table.concat(names, ", ")), vim.log.levels.INFO)
      end
    end
  end)
end

return M
