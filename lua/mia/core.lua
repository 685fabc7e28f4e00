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

--- The library's file name as cargo writes it on this OS (install.lua uses it too).
function M.lib_name()
  if vim.fn.has("mac") == 1 then
    return "libmia_core.dylib"
  elseif vim.fn.has("win32") == 1 then
    return "mia_core.dll"
  end
  return "libmia_core.so"
end
local lib_name = M.lib_name

--- Where the library is looked for: $MIA_CORE_PATH; else the newer of the
--- installed one (lib/, put there by build.lua or `:Mia install`, |mia-install|)
--- and cargo's build in the plugin (target/release), so whichever was made
--- last is used: a developer's rebuild wins over an older download and a
--- new download over an older build.
--- @return string path, boolean in_tree (a cargo build: checked for staleness)
function M.lib_path()
  local override = vim.env.MIA_CORE_PATH
  if override and override ~= "" then
    return override, false
  end
  local root = M.root()
  local installed = root .. "/lib/" .. lib_name()
  local built = root .. "/target/release/" .. lib_name()
  local ist, bst = uv.fs_stat(installed), uv.fs_stat(built)
  if ist and not (bst and (bst.mtime.sec > ist.mtime.sec or (bst.mtime.sec == ist.mtime.sec and bst.mtime.nsec > ist.mtime.nsec))) then
    return installed, false
  end
  return built, true
end

local function build_hint(root)
  return string.format(
    "Run `:Mia install` (lazy.nvim: `:Lazy build %s`) or `cargo build --release` in %s, then restart Neovim.",
    vim.fn.fnamemodify(root, ":t"),
    root
  )
end

--- Why the in-tree library `mod`, opened from `path` (modified at
--- `mtime` seconds), must not be used, or nil: a source it was built from
--- changed since. The library finds its newest source itself
--- (src/nvim/staleness.rs: cargo's dep-info next to it, else src/); one
--- without that function predates this Lua code.
local function stale(mod, path, mtime)
  local root = M.root()
  if type(mod.newest_source) ~= "function" then
    return string.format("mia: the native library %s was built from an older version of the code. %s", path, build_hint(root))
  end
  local ok, newest, newest_path = pcall(mod.newest_source, root, path)
  if ok and newest and newest > mtime then
    return string.format(
      "mia: the native library %s was built from an older version of the code (%s changed since). %s",
      path,
      vim.fn.fnamemodify(newest_path, ":."),
      build_hint(root)
    )
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
  local err
  local st = uv.fs_stat(path)
  if not st then
    err = string.format("mia: the native library is not built (no %s). %s", path, build_hint(M.root()))
  else
    local opener, load_err = package.loadlib(path, "luaopen_mia_core")
    if not opener then
      err = string.format("mia: cannot load the native library %s (%s). %s", path, tostring(load_err), build_hint(M.root()))
    else
      local ok, mod = pcall(opener)
      local want = require("mia.version")
      if not ok then
        err = string.format("mia: the native library %s failed to start (%s). %s", path, tostring(mod), build_hint(M.root()))
      else
        -- A stale build is opened (its luaopen only builds this table) but not used.
        err = in_tree and type(mod) == "table" and stale(mod, path, st.mtime.sec) or nil
        if not err and (type(mod) ~= "table" or mod.version ~= want.version or mod.protocol ~= want.protocol) then
          local got = type(mod) == "table" and tostring(mod.version) or "?"
          err = string.format(
            "mia: the native library is version %s but the Lua code is version %s: it was built from another version of mia. %s",
            got,
            want.version,
            build_hint(M.root())
          )
        end
        if not err then
          core = mod
          package.loaded["mia_core"] = mod
        end
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
