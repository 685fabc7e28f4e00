--- Installs the native library without a Rust toolchain (|mia-install|):
--- downloads the prebuilt archive of the plugin's own version for this
--- system, verifies it (the archive's SHA-256 against the release's
--- SHA256SUMS, and SHA256SUMS against its SSH signature by the release key
--- committed in data/release-key.pub) before anything of it runs, and moves
--- it into `lib/` by rename, so a failed or interrupted install leaves the
--- previous library in place. Falls back to `cargo build --release` when no
--- archive fits or the download fails and cargo exists.
---
--- Every step is a child process with a callback (vim.system): nothing here
--- blocks the editor. Used by build.lua (lazy.nvim, `nvim -l build.lua`) and
--- `:Mia install`; loaded with dofile by build.lua, so it needs nothing else
--- of mia on the runtimepath.

local M = {}

local uv = vim.uv or vim.loop

--- The release host's download folder; `BASE/v{version}/{file}`.
M.DEFAULT_URL = "https://github.com/OWNER/mia/releases/download"
--- The namespace and identity the release signs SHA256SUMS under.
M.NAMESPACE = "mia-release"
--- The oldest glibc the Linux archives load on (scripts/dist's baseline).
M.GLIBC_BASELINE = { 2, 28 }

--- The plugin's root (the folder holding build.lua).
function M.root()
  local here = debug.getinfo(1, "S").source:sub(2)
  return vim.fn.fnamemodify(here, ":p:h:h:h")
end

--- Where installed libraries live, and their stamp.
function M.lib_dir()
  return M.root() .. "/lib"
end

function M.stamp_path()
  return M.lib_dir() .. "/mia-install.json"
end

local function version()
  return dofile(M.root() .. "/lua/mia/version.lua").version
end

-- The library's file name: core.lua's, read as a file since build.lua runs
-- this module with dofile, before mia is on 'runtimepath'.
local function lib_file()
  return dofile(M.root() .. "/lua/mia/core.lua").lib_name()
end

local function acp_file()
  return vim.fn.has("win32") == 1 and "mia-acp.exe" or "mia-acp"
end

--- The stamp written at install time, or nil.
function M.stamp()
  local f = io.open(M.stamp_path(), "r")
  if not f then
    return nil
  end
  local text = f:read("*a")
  f:close()
  local ok, t = pcall(vim.json.decode, text)
  return ok and type(t) == "table" and t or nil
end

--- The base URL the archives are fetched from.
function M.base_url()
  local u = vim.env.MIA_RELEASE_URL
  if not u or u == "" then
    u = vim.g.mia_release_url
  end
  if type(u) ~= "string" or u == "" then
    u = M.DEFAULT_URL
  end
  return (u:gsub("/+$", ""))
end

--- The public key trusted for the release's signature: $MIA_RELEASE_PUBKEY
--- (a file) or the committed one.
function M.pubkey_path()
  local p = vim.env.MIA_RELEASE_PUBKEY
  if p and p ~= "" then
    return p
  end
  return M.root() .. "/data/release-key.pub"
end

--- How long a download may go without receiving anything before it is
--- given up ($MIA_INSTALL_STALL_SECONDS, default 30).
local function stall_seconds()
  local n = tonumber(vim.env.MIA_INSTALL_STALL_SECONDS or "")
  return (n and n > 0) and math.floor(n) or 30
end

--- Ends the install in progress with an error (set by M.run): a Lua error
--- in a step's callback ends the install with a message, never a hang.
local abort = function() end

--- Calls cb(...) on the main loop; an error in it aborts the install.
local function call(cb, ...)
  local ok, err = pcall(cb, ...)
  if not ok then
    abort("mia: the install failed: " .. tostring(err))
  end
end

--- Runs argv; calls back with (ok, stdout, stderr, code) on the main loop.
local function run(argv, opts, cb)
  local ok, err = pcall(vim.system, argv, vim.tbl_extend("force", { text = true }, opts or {}), function(r)
    vim.schedule(function()
      call(cb, r.code == 0, r.stdout or "", r.stderr or "", r.code)
    end)
  end)
  if not ok then
    vim.schedule(function()
      call(cb, false, "", tostring(err), -1)
    end)
  end
end

local function last_line(s)
  local lines = vim.split(vim.trim(s or ""), "\n", { trimempty = true })
  return lines[#lines] or ""
end

--- The archive name for this system, or nil and why none fits. Calls back
--- (name, glibc_version_string_or_nil, why_not).
function M.platform(cb)
  local u = uv.os_uname()
  local arch = ({ x86_64 = "x86_64", amd64 = "x86_64", AMD64 = "x86_64", aarch64 = "aarch64", arm64 = "aarch64" })[u.machine]
  if not arch then
    return cb(nil, nil, "no prebuilt library for the " .. tostring(u.machine) .. " architecture")
  end
  if u.sysname == "Darwin" then
    return cb(arch .. "-macos")
  elseif u.sysname:match("^Windows") then
    if arch ~= "x86_64" then
      return cb(nil, nil, "no prebuilt library for Windows on " .. arch)
    end
    return cb("x86_64-windows")
  elseif u.sysname ~= "Linux" then
    return cb(nil, nil, "no prebuilt library for " .. u.sysname)
  end
  -- glibc answers GNU_LIBC_VERSION ("glibc 2.36"); musl does not.
  run({ "getconf", "GNU_LIBC_VERSION" }, {}, function(ok, out)
    local maj, min = out:match("glibc%s+(%d+)%.(%d+)")
    if not ok or not maj then
      return cb(nil, nil, "no prebuilt library for this C library (not glibc: musl?)")
    end
    maj, min = tonumber(maj), tonumber(min)
    local b = M.GLIBC_BASELINE
    if maj < b[1] or (maj == b[1] and min < b[2]) then
      return cb(nil, nil, string.format("this system's glibc %d.%d is older than %d.%d, the prebuilt library's baseline", maj, min, b[1], b[2]))
    end
    cb(arch .. "-linux-gnu", maj .. "." .. min)
  end)
end

--- Largest file fetched: the checksums and the signature, and an archive.
local MAX_SMALL, MAX_ARCHIVE = 1024 * 1024, 512 * 1024 * 1024

--- Downloads url to file with curl or wget (whichever exists), bounded:
--- given up when nothing arrives for stall_seconds(), after 30 min, or
--- (curl) past `max` bytes. cb(err_or_nil).
local function download(url, file, max, cb)
  local stall = stall_seconds()
  local argv
  if vim.fn.executable("curl") == 1 then
    argv = { "curl", "--fail", "--location", "--silent", "--show-error", "--proto", "=https,http",
      "--connect-timeout", tostring(stall), "--speed-limit", "1", "--speed-time", tostring(stall),
      "--max-time", "1800", "--max-filesize", tostring(max), "--output", file, url }
  elseif vim.fn.executable("wget") == 1 then
    argv = { "wget", "-nv", "--tries=1", "--timeout=" .. stall, "-O", file, url }
  else
    return cb("neither curl nor wget is installed")
  end
  run(argv, {}, function(ok, _, stderr, code)
    if ok then
      return cb(nil)
    end
    local why = last_line(stderr):gsub("^curl: %(%d+%) ", "")
    if code == 28 and argv[1] == "curl" then
      why = string.format("no data for %d s (%s)", stall, why)
    end
    cb(string.format("downloading %s failed: %s", url, why ~= "" and why or ("exit code " .. code)))
  end)
end

local function read(path)
  local f = io.open(path, "rb")
  if not f then
    return nil
  end
  local s = f:read("*a")
  f:close()
  return s
end

local function write(path, text)
  local f, err = io.open(path, "wb")
  if not f then
    return nil, err
  end
  f:write(text)
  f:close()
  return true
end

--- Checks SHA256SUMS against its signature by the trusted key. cb(err).
local function verify_signature(dir, cb)
  if vim.fn.executable("ssh-keygen") ~= 1 then
    return cb("ssh-keygen (OpenSSH) is needed to verify the release's signature and is not installed")
  end
  local pub = read(M.pubkey_path())
  local keytype, key = (pub or ""):match("^%s*(%S+)%s+(%S+)")
  if not keytype then
    return cb("cannot read the release's public key " .. M.pubkey_path())
  end
  local allowed = dir .. "/allowed_signers"
  write(allowed, string.format('%s namespaces="%s" %s %s\n', M.NAMESPACE, M.NAMESPACE, keytype, key))
  local sums = read(dir .. "/SHA256SUMS") or ""
  run({ "ssh-keygen", "-Y", "verify", "-f", allowed, "-I", M.NAMESPACE, "-n", M.NAMESPACE, "-s", dir .. "/SHA256SUMS.sig" },
    { stdin = sums }, function(ok, _, stderr)
      if ok then
        return cb(nil)
      end
      cb("the checksums file's signature does not verify against the release key " .. M.pubkey_path() .. " (" .. last_line(stderr) .. ")")
    end)
end

--- The SHA-256 of file, with whichever tool the system has. cb(hex_or_nil, err).
local function sha256(file, cb)
  local argv
  if vim.fn.executable("sha256sum") == 1 then
    argv = { "sha256sum", file }
  elseif vim.fn.executable("shasum") == 1 then
    argv = { "shasum", "-a", "256", file }
  elseif vim.fn.executable("certutil") == 1 then
    argv = { "certutil", "-hashfile", file, "SHA256" }
  else
    return cb(nil, "no SHA-256 tool (sha256sum, shasum or certutil) is installed")
  end
  run(argv, {}, function(ok, out, stderr)
    local hex = ok and out:match("%f[%x](%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x)%f[^%x]")
    if not hex then
      return cb(nil, "cannot compute the SHA-256 of the download: " .. last_line(stderr))
    end
    cb(hex:lower())
  end)
end

--- Moves src over dst by rename (a loaded library keeps its old file).
local function replace(src, dst)
  local ok, err = uv.fs_rename(src, dst)
  if not ok then
    return nil, string.format("cannot move %s to %s: %s", src, dst, tostring(err))
  end
  return true
end

--- A fresh folder inside lib/ (same file system: renames out of it are atomic).
local function temp_dir()
  local lib = M.lib_dir()
  vim.fn.mkdir(lib, "p")
  local dir = string.format("%s/.install-%d-%d", lib, uv.os_getpid(), uv.hrtime())
  if vim.fn.mkdir(dir, "p") ~= 1 then
    return nil
  end
  return dir
end

--- Removes what killed installs left in lib/ (`.install-PID-*` of a
--- process that is gone).
local function sweep()
  for name, kind in vim.fs.dir(M.lib_dir()) do
    local pid = kind == "directory" and tonumber(name:match("^%.install%-(%d+)%-"))
    if pid and pid ~= uv.os_getpid() and not uv.kill(pid, 0) then
      vim.fn.delete(M.lib_dir() .. "/" .. name, "rf")
    end
  end
end

--- Installs the files `lib` and `acp` (paths) and writes the stamp; the
--- library moves last but one, the stamp last.
local function install_files(lib, acp, stamp)
  local dir = M.lib_dir()
  if acp and uv.fs_stat(acp) then
    local ok, err = replace(acp, dir .. "/" .. acp_file())
    if not ok then
      return nil, err
    end
  end
  local ok, err = replace(lib, dir .. "/" .. lib_file())
  if not ok then
    return nil, err
  end
  local tmp = M.stamp_path() .. ".tmp"
  write(tmp, vim.json.encode(stamp) .. "\n")
  return replace(tmp, M.stamp_path())
end

--- The download path: fetch, verify, unpack, check, install. cb(err, stamp).
local function fetch(name, glibc, progress, cb)
  local ver = version()
  local tag = "v" .. ver
  local asset = string.format("mia-%s-%s.tar.gz", tag, name)
  local base = M.base_url() .. "/" .. tag
  local dir = temp_dir()
  if not dir then
    return cb("cannot create a folder in " .. M.lib_dir())
  end
  local finish = function(err, stamp)
    vim.fn.delete(dir, "rf")
    cb(err, stamp)
  end
  progress(string.format("downloading the checksums of %s from %s", tag, base))
  download(base .. "/SHA256SUMS", dir .. "/SHA256SUMS", MAX_SMALL, function(err)
    if err then
      return finish(err)
    end
    download(base .. "/SHA256SUMS.sig", dir .. "/SHA256SUMS.sig", MAX_SMALL, function(err2)
      if err2 then
        return finish(err2)
      end
      verify_signature(dir, function(err3)
        if err3 then
          return finish(err3)
        end
        local want
        for line in (read(dir .. "/SHA256SUMS") or ""):gmatch("[^\n]+") do
          local hex, file = line:match("^(%x+)%s+%*?(.-)%s*$")
          if hex and #hex == 64 and file == asset then
            want = hex
          end
        end
        if not want then
          return finish(string.format("the release %s has no prebuilt library for %s (%s is not in its SHA256SUMS)", tag, name, asset))
        end
        local archive = dir .. "/" .. asset
        -- The partial file's size, twice a second, as the progress.
        local timer = uv.new_timer()
        timer:start(500, 500, vim.schedule_wrap(function()
          local st = uv.fs_stat(archive)
          if st and not timer:is_closing() then
            progress(string.format("downloading %s: %.1f MB", asset, st.size / 1e6))
          end
        end))
        progress("downloading " .. asset)
        download(base .. "/" .. asset, archive, MAX_ARCHIVE, function(err4)
          timer:stop()
          timer:close()
          if err4 then
            return finish(err4)
          end
          progress("verifying " .. asset)
          sha256(archive, function(got, err5)
            if not got then
              return finish(err5)
            end
            if got ~= want:lower() then
              return finish(string.format("%s does not match the release's checksum (SHA-256 %s, expected %s): the download is damaged or was tampered with", asset, got, want:lower()))
            end
            local x = dir .. "/x"
            vim.fn.mkdir(x, "p")
            -- -m: the files get the time of the install (the loader prefers the newest library).
            run({ "tar", "-xzmf", archive, "-C", x }, {}, function(ok, _, stderr)
              if not ok then
                return finish("cannot unpack " .. asset .. ": " .. last_line(stderr))
              end
              local okj, info = pcall(vim.json.decode, read(x .. "/BUILDINFO.json") or "")
              if not okj or type(info) ~= "table" or info.version ~= ver then
                return finish(string.format("%s is not the build of version %s", asset, ver))
              end
              local lib, acp = x .. "/" .. lib_file(), x .. "/" .. acp_file()
              if not uv.fs_stat(lib) then
                return finish(asset .. " holds no " .. lib_file())
              end
              -- Runs on this system? (mia-acp links what the library links.)
              run({ acp, "--version" }, {}, function(ran, out, serr)
                if not ran or not out:find(ver, 1, true) then
                  return finish(string.format("the downloaded mia-acp does not run here (%s)", last_line(serr ~= "" and serr or out)))
                end
                local stamp = {
                  source = "download",
                  version = ver,
                  target = info.target or name,
                  glibc = (info.glibc ~= "" and info.glibc) or nil,
                  system_glibc = glibc,
                  url = base .. "/" .. asset,
                  sha256 = got,
                  installed_at = os.date("!%Y-%m-%dT%H:%M:%SZ"),
                }
                local okinst, err6 = install_files(lib, acp, stamp)
                finish(not okinst and err6 or nil, stamp)
              end)
            end)
          end)
        end)
      end)
    end)
  end)
end

--- Where cargo puts the release build of this tree.
local function cargo_release_dir()
  local t = vim.env.CARGO_TARGET_DIR
  if not t or t == "" then
    t = M.root() .. "/target"
  elseif not t:match("^/") and not t:match("^%a:[/\\]") then
    t = M.root() .. "/" .. t
  end
  return t .. "/release"
end

--- The fallback (`reason`: why the download path failed, kept in the
--- stamp): `cargo build --release`, then the result is copied into
--- lib/ (by rename of a copy) with a stamp saying so. cb(err, stamp).
local function build_from_source(glibc, reason, progress, cb)
  progress("building from source: cargo build --release (several minutes)")
  run({ "cargo", "build", "--release" }, { cwd = M.root() }, function(ok, _, stderr)
    if not ok then
      return cb("`cargo build --release` failed: " .. last_line(stderr))
    end
    local dir = temp_dir()
    if not dir then
      return cb("cannot create a folder in " .. M.lib_dir())
    end
    local rel = cargo_release_dir()
    local lib, acp = dir .. "/" .. lib_file(), dir .. "/" .. acp_file()
    local okc, err = uv.fs_copyfile(rel .. "/" .. lib_file(), lib)
    if not okc then
      vim.fn.delete(dir, "rf")
      return cb("cannot copy the library cargo built: " .. tostring(err))
    end
    if uv.fs_copyfile(rel .. "/" .. acp_file(), acp) then
      uv.fs_chmod(acp, 493) -- 0755
    end
    local u = uv.os_uname()
    local stamp = {
      source = "source",
      version = version(),
      target = u.machine .. "-" .. u.sysname:lower(),
      glibc = glibc,
      built_in = rel,
      download_failed = reason,
      installed_at = os.date("!%Y-%m-%dT%H:%M:%SZ"),
    }
    local okinst, err2 = install_files(lib, acp, stamp)
    vim.fn.delete(dir, "rf")
    cb(not okinst and err2 or nil, stamp)
  end)
end

--- One sentence for the user when nothing could be installed.
local function give_up(why, built)
  return string.format(
    "mia: could not install the native library v%s: %s.%s Nothing was installed; the library in use (if any) is unchanged. "
      .. "To fix: run `:Mia install` (or `:Lazy build mia`) again once the cause is fixed, set MIA_RELEASE_URL to a mirror, "
      .. "or install a Rust toolchain (https://rustup.rs) so that it builds from source.",
    version(),
    why,
    built and (" Building from source failed too: " .. built .. ".") or ""
  )
end

M.running = false

--- Installs. opts.on_progress(msg) for each step; opts.on_done(err, stamp):
--- err is one sentence naming the cause and the ways forward.
function M.run(opts)
  local progress = opts.on_progress or function() end
  local done = opts.on_done or function() end
  if M.running then
    return done("mia: an install is already running")
  end
  M.running = true
  local function finish(err, stamp)
    if not M.running then
      return
    end
    M.running = false
    abort = function() end
    done(err, stamp)
  end
  abort = finish
  pcall(sweep)
  local has_cargo = vim.fn.executable("cargo") == 1
  M.platform(function(name, glibc, why)
    local function fallback(reason)
      if not has_cargo then
        return finish(give_up(reason))
      end
      progress(reason .. "; falling back to a source build")
      build_from_source(glibc, reason, progress, function(err, stamp)
        finish(err and give_up(reason, err) or nil, stamp)
      end)
    end
    if not name then
      return fallback(why)
    end
    fetch(name, glibc, progress, function(err, stamp)
      if err then
        return fallback(err)
      end
      finish(nil, stamp)
    end)
  end)
end

--- A line describing a stamp, for messages and :checkhealth.
function M.describe(stamp)
  if not stamp then
    return nil
  end
  if stamp.source == "download" then
    return string.format(
      "downloaded v%s, verified (SHA-256 and the release's signature); target %s%s",
      tostring(stamp.version),
      tostring(stamp.target),
      stamp.glibc and (", needs glibc ≥ " .. stamp.glibc) or ""
    )
  end
  return string.format(
    "built from source (v%s) on this machine; target %s%s",
    tostring(stamp.version),
    tostring(stamp.target),
    stamp.glibc and (", needs glibc ≥ " .. stamp.glibc .. " (this system's)") or ""
  )
end

return M
