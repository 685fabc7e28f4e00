--- The project's files as git sees them, for `@path` completion: gathered
--- with `git ls-files` in the background (`vim.system`), cached per working
--- directory, refreshed after a write, a directory change or focus coming
--- back. Completion never waits: it offers what is cached and is told when
--- a fresher list arrives.

local M = {}

--- @class mia.FileList
--- @field files string[] paths relative to the directory
--- @field dirs string[]? directories (with a trailing `/`), derived on first use
--- @field stale boolean a refresh is due
--- @field running boolean a `git ls-files` is in flight
--- @field waiting fun()[] called when the running gather ends

--- @type table<string, mia.FileList>
local lists = {}

local function entry(cwd)
  local l = lists[cwd]
  if not l then
    l = { files = {}, stale = true, running = false, waiting = {} }
    lists[cwd] = l
  end
  return l
end

--- The repository's config is hostile input (a model or a clone may have
--- written it): every key through which git runs a program is overridden
--- at command scope, as for every git mia runs (`crates/engine/src/git.rs`, whose `FIXED`
--- and `ENV` lists these must match; a Rust test checks). `ls-files`
--- applies no filter driver, so those need not be emptied here.
local GIT_CONFIG = {
  "core.fsmonitor=false",
  "core.untrackedCache=false",
  "core.hooksPath=/dev/null",
  "core.pager=cat",
  "core.editor=false",
  "sequence.editor=false",
  "core.askPass=",
  "credential.helper=",
  "core.sshCommand=false",
  "core.gitProxy=",
  "core.alternateRefsCommand=",
  "diff.external=",
  "gpg.program=false",
  "gpg.ssh.program=false",
  "gpg.x509.program=false",
  "protocol.allow=never",
  "gc.auto=0",
  "maintenance.auto=false",
}

--- Set in git's environment (`vim.system` merges it into Neovim's).
local GIT_ENV = {
  GIT_TERMINAL_PROMPT = "0",
  GIT_OPTIONAL_LOCKS = "0",
  GIT_NO_LAZY_FETCH = "1",
  GIT_PAGER = "cat",
  GIT_ASKPASS = "",
  SSH_ASKPASS = "",
}

local git_ls_files = { "git", "--no-pager" }
for _, kv in ipairs(GIT_CONFIG) do
  git_ls_files[#git_ls_files + 1] = "-c"
  git_ls_files[#git_ls_files + 1] = kv
end
vim.list_extend(git_ls_files, { "ls-files", "--cached", "--others", "--exclude-standard" })

--- Not a git repository: a bounded walk of the directory instead (depth 6,
--- 20,000 files), so mentions complete in any project.
local function walk(cwd)
  local out = {}
  for name, t in vim.fs.dir(cwd, { depth = 6, skip = function(d)
    return not d:match("^%.") and d ~= "node_modules" and d ~= "target"
  end }) do
    if t == "file" and not name:match("^%.") then
      out[#out + 1] = name
      if #out >= 20000 then
        break
      end
    end
  end
  return out
end

--- Starts a refresh of `cwd`'s list unless one runs; `on_done()` runs (on
--- the main loop) when the new list is in.
--- @param cwd string
--- @param on_done? fun()
function M.refresh(cwd, on_done)
  local l = entry(cwd)
  if on_done then
    l.waiting[#l.waiting + 1] = on_done
  end
  if l.running then
    return
  end
  l.running = true
  local ok = pcall(vim.system, git_ls_files, { cwd = cwd, text = true, env = GIT_ENV }, function(r)
    vim.schedule(function()
      if r.code == 0 then
        l.files = vim.split(r.stdout or "", "\n", { trimempty = true })
      else
        l.files = walk(cwd)
      end
      l.dirs = nil
      l.stale = false
      l.running = false
      local waiting = l.waiting
      l.waiting = {}
      for _, f in ipairs(waiting) do
        pcall(f)
      end
    end)
  end)
  if not ok then -- no git at all
    l.files = walk(cwd)
    l.stale, l.running = false, false
  end
end

--- The cached files of `cwd` (possibly empty or old) and whether a fresher list is on its way.
--- @param cwd string
--- @return string[] files, boolean pending
function M.files(cwd)
  local l = entry(cwd)
  return l.files, l.stale or l.running
end

--- The directories of the cached files of `cwd`, each with a trailing `/`.
--- @param cwd string
--- @return string[]
function M.dirs(cwd)
  local l = entry(cwd)
  if not l.dirs then
    local seen, dirs = {}, {}
    for _, f in ipairs(l.files) do
      local d = f:match("^(.*)/[^/]*$")
      while d and not seen[d] do
        seen[d] = true
        dirs[#dirs + 1] = d .. "/"
        d = d:match("^(.*)/[^/]*$")
      end
    end
    table.sort(dirs)
    l.dirs = dirs
  end
  return l.dirs
end

--- Marks every cached list stale (the next completion refreshes it).
function M.invalidate()
  for _, l in pairs(lists) do
    l.stale = true
  end
end

local group = vim.api.nvim_create_augroup("mia.mention_files", { clear = true })
vim.api.nvim_create_autocmd({ "BufWritePost", "DirChanged", "FocusGained" }, {
  group = group,
  callback = function()
    M.invalidate()
  end,
})

return M
