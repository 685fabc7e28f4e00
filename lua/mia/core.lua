--- Finds, checks and loads the native library `mia_core`. Loading happens on
--- the first command that needs it, never at startup. Every failure becomes
--- one sentence that says what is wrong and what to run.

local M = {}

local uv = vim.uv or vim.loop

--- @type table? the loaded module
local core = nil
--- @type string? why loading failed (kept so every later call says the same)
local failure = nil

--- The plugin's root directory (the one holding Cargo.toml).
function M.root()
  local here = debug.getinfo(1, "S").source:sub(2)
  return vim.fn.fnamemodify(here, ":p:h:h:h")
end

local function lib_name()
  if vim.fn.has("mac") == 1 then
    return "libmia_core.dylib"
  elseif vim.fn.has("win32") == 1 then
    return "mia_core.dll"
  end
  return "libmia_core.so"
end

--- Where the library is looked for: $MIA_CORE_PATH, then the cargo build in the plugin.
--- @return string path, boolean in_tree
function M.lib_path()
  local override = vim.env.MIA_CORE_PATH
  if override and override ~= "" then
    return override, false
  end
  return M.root() .. "/target/release/" .. lib_name(), true
end

local function build_hint(root)
  return string.format(
    "Run `cargo build --release` in %s (lazy.nvim: `:Lazy build %s`), then restart Neovim.",
    root,
    vim.fn.fnamemodify(root, ":t")
  )
end

--- The files cargo's dep-info `d_path` (written next to the library by every
--- build of it) lists as its inputs, or nil when there is none.
--- @return string[]?
local function dep_info(d_path)
  local fd = uv.fs_open(d_path, "r", 438)
  if not fd then
    return nil
  end
  local st = uv.fs_fstat(fd)
  local text = st and st.size < 4 * 1024 * 1024 and uv.fs_read(fd, st.size, 0) or nil
  uv.fs_close(fd)
  if not text then
    return nil
  end
  -- `target: input input ...` per line; a space inside a path is `\ `.
  local files = {}
  for line in text:gmatch("[^\n]+") do
    local deps = line:match("^.-[^\\]:%s(.*)$")
    if deps then
      deps = deps:gsub("\\ ", "\0")
      for f in deps:gmatch("%S+") do
        files[#files + 1] = (f:gsub("%z", " "))
      end
    end
  end
  return #files > 0 and files or nil
end

--- The newest modification time among the sources the library is built
--- from: the inputs cargo recorded for the library's last build (so a
--- change that does not touch the library, such as a test dependency or
--- the mia-acp binary, needs no rebuild), else every source in the tree.
local function newest_source(root, lib)
  local newest, newest_path = 0, nil
  local function consider(path)
    local st = uv.fs_stat(path)
    if st and st.mtime.sec > newest then
      newest, newest_path = st.mtime.sec, path
    end
  end
  consider(root .. "/lua/mia/version.lua")
  local inputs = dep_info(lib:gsub("%.[^./]+$", ".d"))
  if inputs then
    for _, f in ipairs(inputs) do
      consider(f)
    end
    return newest, newest_path
  end
  for _, f in ipairs({ "Cargo.toml", "Cargo.lock", "build.rs" }) do
    consider(root .. "/" .. f)
  end
  local function walk(dir)
    local handle = uv.fs_scandir(dir)
    while handle do
      local name, kind = uv.fs_scandir_next(handle)
      if not name then
        break
      end
      if kind == "directory" then
        walk(dir .. "/" .. name)
      elseif name:sub(-3) == ".rs" then
        consider(dir .. "/" .. name)
      end
    end
  end
  walk(root .. "/src")
  return newest, newest_path
end

--- Why the library at `path` cannot be used, or nil when it can.
local function check(path, in_tree)
  local root = M.root()
  local st = uv.fs_stat(path)
  if not st then
    return string.format("mia: the native library is not built (no %s). %s", path, build_hint(root))
  end
  if in_tree then
    local newest, newest_path = newest_source(root, path)
    if newest > st.mtime.sec then
      return string.format(
        "mia: the native library %s was built from an older version of the code (%s changed since). %s",
        path,
        vim.fn.fnamemodify(newest_path, ":."),
        build_hint(root)
      )
    end
  end
  return nil
end

--- Loads the library once; returns it, or nil and the reason.
--- @return table? core, string? err
function M.load()
  if core then
    return core
  end
  if failure then
    return nil, failure
  end
  local path, in_tree = M.lib_path()
  local err = check(path, in_tree)
  if not err then
    local opener, load_err = package.loadlib(path, "luaopen_mia_core")
    if not opener then
      err = string.format("mia: cannot load the native library %s (%s). %s", path, tostring(load_err), build_hint(M.root()))
    else
      local ok, mod = pcall(opener)
      local want = require("mia.version")
      if not ok then
        err = string.format("mia: the native library %s failed to start (%s). %s", path, tostring(mod), build_hint(M.root()))
      elseif type(mod) ~= "table" or mod.version ~= want.version or mod.protocol ~= want.protocol then
        local got = type(mod) == "table" and tostring(mod.version) or "?"
        err = string.format(
          "mia: the native library is version %s but the Lua code is version %s: it was built from another version of mia. %s",
          got,
          want.version,
          build_hint(M.root())
        )
      else
        core = mod
        package.loaded["mia_core"] = mod
      end
    end
  end
  failure = err
  return core, err
end

--- The library, or a Lua error carrying the one-sentence reason (no traceback
--- reaches the user: callers report it with vim.notify).
function M.get()
  local c, err = M.load()
  if not c then
    error(err, 0)
  end
  return c
end

--- Calls a native function; its error (an mlua userdata with a traceback)
--- becomes a plain one-line Lua string error.
--- @param fn function
function M.call(fn, ...)
  local result = { pcall(fn, ...) }
  if not result[1] then
    local msg = tostring(result[2]):gsub("^runtime error: ", ""):gsub("\nstack traceback:.*$", "")
    error(msg, 0)
  end
  return unpack(result, 2)
end

--- True once the library has been loaded into this Neovim.
function M.is_loaded()
  return core ~= nil
end

--- Forgets a failed attempt so the next call tries again (after a rebuild).
function M.reset_failure()
  failure = nil
end

return M
