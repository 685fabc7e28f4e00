#!/usr/bin/env python3
"""Resuming a long session and the 5,000-token burst, a baseline revision vs this tree side by side in one run.

Builds a baseline revision (default 0d6288a) in a temporary git worktree and
this tree, then measures both, interleaved (baseline then current, then
current then baseline, ...), each with its own library AND its own Lua files:

  1. resuming a 2,000-message session (`require("mia").sessions.load(id)`,
     then a redraw; the session ends with a compaction covering all but its
     last 100 messages, like `cargo bench --bench sessions`), in a headless
     Neovim as `benches/resume.lua` does it: the median of 5 loads in one
     process, and the first load of a fresh process;
  2. what that resume costs in memory: Neovim's RSS (/proc/self/status VmRSS,
     and RssAnon) and the Lua heap (collectgarbage("count")), each read after
     a full collection, before and after the first load (the core is loaded
     and the store open before the first reading);
  3. the 5,000-token burst of scripts/scenario_server.py (`:Mia prompt long
     5000`) in a Neovim TUI inside tmux: events Lua receives from
     `mia_core.drain()` per second of the stream (command to final token in
     the chat buffer), total events and drains, main-thread CPU (schedstat of
     the main thread, as benches/stream_bench.py reads it); each run's number
     is the median of 3 bursts per build, interleaved.

Events are counted by wrapping the `drain` function of the `mia_core` module
table as the library is opened (package.loadlib), before the bridge sees it;
no file under lua/ is changed. Everything is driven through user-facing
commands: `:Mia new`, `:Mia prompt ...`, the `mia://chat` buffer, the `User
MiaAnswerEnd` autocommand, `mia.sessions.load`.

    .venv/bin/python benches/resume_and_burst_vs_baseline.py [--baseline REV] [--runs 5] [--json out.json]

Prints medians; asserts nothing about time. Needs tmux (apt-get install tmux).
"""

import argparse
import json
import os
import shlex
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pynvim

ROOT = Path(__file__).resolve().parents[1]
BASELINE_TARGET = Path("/tmp/mia-bench-baseline-target")
SESSION_ID = "s09999"
BURST_PROMPT = "long 5000"
BURST_TOKENS = 5000
TOKEN_BYTES = 7  # "w00000 "
LOADS_PER_PROCESS = 5
BURSTS_PER_RUN = 3  # interleaved within a run; the run's number is their median

# ---------------------------------------------------------------- Lua snippets

# Counts what crosses the Rust -> Lua boundary: `drain` of the mia_core module
# table is wrapped when the library is opened, so a bridge that keeps its own
# reference to the function still calls the wrapper.
DRAIN_COUNTER = r"""
_G.i10 = { drains = 0, events = 0, opaque = false, hooked = false }
local function wrap(mod)
  if i10.hooked or type(mod) ~= "table" or type(mod.drain) ~= "function" then
    return mod
  end
  local drain = mod.drain
  mod.drain = function(...)
    -- next_ms: when to drain again (the frame's pacing); text_stream: set
    -- when `events` is the text of one plain answer chunk of that stream;
    -- figures: that stream's live figures beside it (a second event)
    local events, next_ms, text_stream, figures = drain(...)
    i10.drains = i10.drains + 1
    if type(events) == "table" then
      i10.events = i10.events + #events
    elseif text_stream then
      i10.events = i10.events + (figures and 2 or 1)
    else
      i10.opaque = true -- not a list of events: they cannot be counted here
    end
    return events, next_ms, text_stream, figures
  end
  i10.hooked = true
  return mod
end
i10.wrap = wrap
local loadlib = package.loadlib
package.loadlib = function(path, sym)
  local opener, err = loadlib(path, sym)
  if type(opener) ~= "function" or sym ~= "luaopen_mia_core" then
    return opener, err
  end
  return function(...)
    return wrap(opener(...))
  end
end
"""

STREAM_INIT = DRAIN_COUNTER + r"""
local tree = assert(vim.env.MIA_BENCH_TREE)
local base_url = assert(vim.env.MIA_BENCH_BASE_URL)
local api, uv = vim.api, vim.uv or vim.loop
vim.o.laststatus = 2
vim.o.shortmess = vim.o.shortmess .. "I"
vim.opt.rtp:prepend(tree)
vim.cmd("runtime plugin/mia.lua")
require("mia").setup({
  model = "bench/echo",
  providers = { bench = { kind = "openai_compatible", base_url = base_url } },
})

local attached = {}
local function chat_buffer()
  for _, b in ipairs(api.nvim_list_bufs()) do
    if api.nvim_buf_get_name(b) == "mia://chat" then
      return b
    end
  end
  return api.nvim_get_current_buf() -- the command focuses the chat window
end

local function watch(b)
  if attached[b] then
    return
  end
  attached[b] = true
  api.nvim_buf_attach(b, false, {
    on_bytes = function(_, buf, _, _, _, _, _, _, _, _, _, new_end_byte)
      if not i10.active then
        return
      end
      i10.bytes = i10.bytes + new_end_byte
      i10.changes = i10.changes + 1
      if not i10.t_text and i10.bytes >= i10.expect then
        local n = api.nvim_buf_line_count(buf)
        for _, l in ipairs(api.nvim_buf_get_lines(buf, math.max(0, n - 5), n, false)) do
          if l:find(i10.last, 1, true) then
            i10.t_text = uv.hrtime()
            break
          end
        end
      end
    end,
    on_detach = function()
      attached[b] = nil
    end,
  })
end

api.nvim_create_autocmd("User", {
  pattern = "MiaAnswerEnd",
  callback = function(ev)
    if i10.active and not i10.t_end then
      i10.t_end = uv.hrtime()
      i10.state = ev.data and ev.data.state
    end
  end,
})

--- `:Mia new`, then `:Mia prompt {prompt}`; the run ends when the answer
--- has ended and `last` is in the chat buffer.
function i10.start(prompt, expect, last)
  vim.cmd("Mia new")
  if not i10.hooked and package.loaded["mia_core"] then
    i10.wrap(package.loaded["mia_core"]) -- loaded some other way than package.loadlib
  end
  i10.drains, i10.events, i10.bytes, i10.changes, i10.opaque = 0, 0, 0, 0, false
  i10.t_text, i10.t_end, i10.state = nil, nil, nil
  i10.expect, i10.last = expect, last
  i10.active = true
  i10.t0 = uv.hrtime()
  vim.cmd("Mia prompt " .. prompt)
  watch(chat_buffer())
end

function i10.done()
  if not i10.t_end then
    return false
  end
  -- an answer that ended without its last token is reported, not waited for
  return i10.t_text ~= nil or uv.hrtime() - i10.t_end > 2e9
end

function i10.result()
  i10.active = false
  return {
    wall_ms = i10.t_text and (i10.t_text - i10.t0) / 1e6 or vim.NIL,
    end_ms = (i10.t_end - i10.t0) / 1e6,
    state = i10.state or vim.NIL,
    drains = i10.drains,
    events = i10.events,
    opaque = i10.opaque,
    hooked = i10.hooked,
    changes = i10.changes,
  }
end
"""

RESUME = r"""
local tree = assert(vim.env.MIA_BENCH_TREE)
local id = assert(vim.env.MIA_BENCH_SESSION)
local loads = tonumber(vim.env.MIA_BENCH_LOADS)
local uv = vim.uv or vim.loop
vim.opt.rtp:prepend(tree)
local mia = require("mia")
mia.setup({})
-- loads the core and opens the store: not part of the resume
pcall(mia.sessions.list, { limit = 1 })

local function status()
  local out = {}
  for line in io.lines("/proc/self/status") do
    local k, v = line:match("^(%w+):%s+(%d+) kB")
    if k == "VmRSS" or k == "RssAnon" then
      out[k] = tonumber(v)
    end
  end
  return out
end
local function settle()
  collectgarbage("collect")
  collectgarbage("collect")
end
local load_ms, redraw_ms = {}, {}
local function resume()
  local t = uv.hrtime()
  mia.sessions.load(id)
  local t1 = uv.hrtime()
  vim.cmd.redraw()
  local t2 = uv.hrtime()
  load_ms[#load_ms + 1] = (t1 - t) / 1e6
  redraw_ms[#redraw_ms + 1] = (t2 - t1) / 1e6
  return (t2 - t) / 1e6
end

settle()
local before, heap_before = status(), collectgarbage("count")
local times = { resume() }
settle()
local after, heap_after = status(), collectgarbage("count")
for i = 2, loads do
  times[i] = resume()
end
local lines = 0
for _, b in ipairs(vim.api.nvim_list_bufs()) do
  if vim.api.nvim_buf_get_name(b) == "mia://chat" then
    lines = vim.api.nvim_buf_line_count(b)
  end
end
io.write(vim.json.encode({
  times_ms = times,
  load_ms = load_ms,
  redraw_ms = redraw_ms,
  rss_kb = { before.VmRSS, after.VmRSS },
  anon_kb = { before.RssAnon, after.RssAnon },
  heap_kb = { heap_before, heap_after },
  lines = lines,
}) .. "\n")
vim.cmd("qa!")
"""

SEED = r"""
vim.opt.rtp:prepend(assert(vim.env.MIA_BENCH_TREE))
local mia = require("mia")
mia.setup({})
mia.sessions.list({ limit = 1 }) -- creates the store at this build's schema
vim.cmd("qa!")
"""


# ---------------------------------------------------------------- helpers


def nvim_binary():
    for c in (os.environ.get("MIA_NVIM"), str(ROOT / ".venv/bin/nvim"), shutil.which("nvim")):
        if c and Path(c).exists():
            return c
    sys.exit("no Neovim: set MIA_NVIM or run scripts/bootstrap")


def task_cpu_ns(pid):
    """CPU time of Neovim's main thread (its tid is the pid)."""
    with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
        return int(f.read().split()[0])


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is not alive for our purposes
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def end_pid(pid, grace=5.0):
    """Ends one process that this script started, by pid: TERM, then KILL."""
    if not pid or not alive(pid):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if alive(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_logged(cmd, cwd, env, log, what):
    with open(log, "ab") as out:
        rc = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        tail = "\n".join(Path(log).read_text(errors="replace").splitlines()[-30:])
        raise RuntimeError(f"{what} failed (exit {rc}); last lines of {log}:\n{tail}")


def git(*args, cwd=ROOT):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


# ---------------------------------------------------------------- builds


class Build:
    def __init__(self, label, tree, lib, rev):
        self.label, self.tree, self.rev = label, Path(tree), rev
        self.lib = lib  # the snapshot, copied at start
        self.data = None  # XDG_DATA_HOME holding the benchmark store
        self.state = None  # XDG_STATE_HOME (logs)


def build_current(tmp):
    env = {k: v for k, v in os.environ.items() if k != "CARGO_TARGET_DIR"}
    print("building this tree (cargo build --release) ...", file=sys.stderr)
    run_logged(["cargo", "build", "--release"], ROOT, env, tmp / "build-current.log", "cargo build --release (this tree)")
    snap = tmp / "current-libmia_core.so"
    shutil.copy(ROOT / "target/release/libmia_core.so", snap)
    rev = git("rev-parse", "--short", "HEAD")
    if git("status", "--porcelain", "--untracked-files=no"):
        rev += " + uncommitted changes"
    return Build("current", ROOT, snap, rev)


def build_baseline(tmp, rev, worktree):
    full = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    git("worktree", "add", "--detach", str(worktree), full)
    env = dict(os.environ, CARGO_TARGET_DIR=str(BASELINE_TARGET))
    if not (BASELINE_TARGET / "release").exists() and (ROOT / "target/release").exists():
        # the dependencies are the same crates: start from this tree's build
        print(f"seeding {BASELINE_TARGET} from this tree's target/release ...", file=sys.stderr)
        BASELINE_TARGET.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-a", "--reflink=auto", str(ROOT / "target/release"), str(BASELINE_TARGET)], check=True)
    print(f"building baseline {rev} in {worktree} (CARGO_TARGET_DIR={BASELINE_TARGET}) ...", file=sys.stderr)
    run_logged(["cargo", "build", "--release"], worktree, env, tmp / "build-baseline.log", f"cargo build --release ({rev})")
    snap = tmp / "baseline-libmia_core.so"
    shutil.copy(BASELINE_TARGET / "release/libmia_core.so", snap)
    return Build("baseline", worktree, snap, git("rev-parse", "--short", full))


def nvim_env(build, **extra):
    env = dict(os.environ)
    env.update({
        "MIA_CORE_PATH": str(build.lib),
        "MIA_BENCH_TREE": str(build.tree),
        "XDG_DATA_HOME": str(build.data),
        "XDG_STATE_HOME": str(build.state),
    })
    env.update(extra)
    return env


def headless(build, script, timeout=120, **extra):
    proc = subprocess.run([nvim_binary(), "--headless", "--clean", "-l", str(script)],
                          env=nvim_env(build, **extra), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{build.label}: {script.name} exited {proc.returncode}:\n{proc.stderr.strip()}")
    return proc.stdout


# ---------------------------------------------------------------- the store


def seed_store(build, tmp):
    """The benchmark store of `cargo bench --bench sessions`: 10,000 sessions,
    one of them with 2,000 messages and a compaction of all but the last 100.
    `build` (the baseline: the older schema, which the other build migrates)
    creates the file; the rows go in with SQL over whatever columns it has."""
    seed = tmp / "seed.lua"
    seed.write_text(SEED)
    headless(build, seed)
    path = Path(build.data) / "nvim/mia/mia.sqlite3"
    if not path.exists():
        raise RuntimeError(f"the baseline did not create its store at {path}")
    con = sqlite3.connect(path)
    try:
        cols = {r[1] for r in con.execute("PRAGMA table_info(messages)")}
        base = 1_790_000_000_000
        con.executemany(
            "INSERT INTO sessions (id, cwd, title, mode, model, created_at_ms, updated_at_ms, meta) "
            "VALUES (?, ?, ?, 'ask', 'anthropic/claude-sonnet-4-5', ?, ?, '{}')",
            [(f"s{i:05}", "/elsewhere" if i % 10 == 0 else "/bench/project", f"session {i}",
              base + i * 1000, base + i * 1000) for i in range(10_000)])
        rows = []
        for seq in range(2000):
            role = "user" if seq % 2 == 0 else "assistant"
            text = ("question " if seq % 2 == 0 else "answer ") + "lorem ipsum dolor sit amet " * 20
            rows.append((f"{SESSION_ID}-{seq}", SESSION_ID, seq, role,
                         json.dumps([{"type": "text", "text": text}]), base, base))
        con.executemany(
            "INSERT INTO messages (id, session_id, seq, role, parts, state, meta, created_at_ms, updated_at_ms) "
            "VALUES (?, ?, ?, ?, ?, 'complete', '{}', ?, ?)", rows)
        compaction = {"kind", "covers_from", "covers_to"} <= cols
        if compaction:
            summary = "(Summary of the earlier conversation)\n" + "summary " * 200
            con.execute(
                "INSERT INTO messages (id, session_id, seq, role, parts, state, meta, created_at_ms, updated_at_ms, "
                "kind, covers_from, covers_to) VALUES (?, ?, 2000, 'user', ?, 'complete', '{}', ?, ?, 'compaction', 0, 1899)",
                (f"{SESSION_ID}-compaction", SESSION_ID, json.dumps([{"type": "text", "text": summary}]), base, base))
        con.commit()
        version = con.execute("PRAGMA user_version").fetchone()[0]
    finally:
        con.close()
    return {"schema": version, "compaction": compaction}


# ---------------------------------------------------------------- resume


def measure_resume(build, tmp):
    script = tmp / "resume.lua"
    out = headless(build, script, MIA_BENCH_SESSION=SESSION_ID, MIA_BENCH_LOADS=str(LOADS_PER_PROCESS))
    r = json.loads(out.strip().splitlines()[-1])
    return {
        "resume_ms": statistics.median(r["times_ms"]),
        "resume_load_ms": statistics.median(r["load_ms"]),
        "resume_redraw_ms": statistics.median(r["redraw_ms"]),
        "first_resume_ms": r["times_ms"][0],
        "rss_growth_mib": (r["rss_kb"][1] - r["rss_kb"][0]) / 1024,
        "anon_growth_mib": (r["anon_kb"][1] - r["anon_kb"][0]) / 1024,
        "lua_heap_growth_mib": (r["heap_kb"][1] - r["heap_kb"][0]) / 1024,
        "rss_before_mib": r["rss_kb"][0] / 1024,
        "chat_lines": r["lines"],
    }


# ---------------------------------------------------------------- burst


class Server:
    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "scripts/scenario_server.py")],
                                     stdout=subprocess.PIPE, text=True)
        self.port = int(self.proc.stdout.readline().split()[1])
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def stop(self):
        end_pid(self.proc.pid)
        self.proc.wait(timeout=10)


class Tui:
    """One build's Neovim TUI in a detached tmux pane (its own tmux server),
    driven over its --listen socket."""

    def __init__(self, build, tmp, base_url):
        self.label = build.label
        self.sock = str(tmp / f"nvim-{build.label}.sock")
        self.tmux = ["tmux", "-L", f"mia-issue10-{os.getpid()}-{build.label}"]
        self.pid = self.server_pid = None
        self.nvim = None
        env = nvim_env(build, MIA_BENCH_BASE_URL=base_url)
        keep = ["MIA_CORE_PATH", "MIA_BENCH_TREE", "XDG_DATA_HOME", "XDG_STATE_HOME", "MIA_BENCH_BASE_URL"]
        envs = " ".join(f"{k}={shlex.quote(env[k])}" for k in keep)
        cmd = f"env {envs} {shlex.quote(nvim_binary())} --clean -u {shlex.quote(str(tmp / 'stream_init.lua'))} --listen {shlex.quote(self.sock)}"
        subprocess.run(self.tmux + ["new-session", "-d", "-x", "160", "-y", "45", cmd], check=True)
        self.server_pid = int(subprocess.run(self.tmux + ["display-message", "-p", "#{pid}"],
                                             capture_output=True, text=True, check=True).stdout.strip())
        for _ in range(500):
            if Path(self.sock).exists():
                break
            time.sleep(0.01)
        self.nvim = pynvim.attach("socket", path=self.sock)
        self.pid = self.nvim.call("getpid")

    def lua(self, code, *args):
        return self.nvim.exec_lua(code, *args)

    def run(self, prompt, expect, last, timeout=120):
        self.lua("i10.start(...)", prompt, expect, last)
        deadline = time.monotonic() + timeout
        while not self.lua("return i10.done()"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.label}: `:Mia prompt {prompt}` did not end within {timeout} s")
            time.sleep(0.05)

    def warm(self):
        self.run("echo warm up", 0, "up")
        self.lua("return i10.result()")

    def burst(self):
        cpu0 = task_cpu_ns(self.pid)
        self.run(BURST_PROMPT, BURST_TOKENS * TOKEN_BYTES, f"w{BURST_TOKENS - 1:05d}")
        time.sleep(0.3)  # the final redraw and the events after the answer
        cpu = task_cpu_ns(self.pid) - cpu0
        r = self.lua("return i10.result()")
        if r["state"] != "done" or r["wall_ms"] is None:
            raise RuntimeError(f"{self.label}: the burst ended as {r['state']!r}"
                               f"{'' if r['wall_ms'] is not None else ' without its last token in the chat buffer'}")
        events = r["events"] if r["hooked"] and not r["opaque"] else None
        return {
            "burst_wall_ms": r["wall_ms"],
            "events_per_s": events / (r["wall_ms"] / 1e3) if events is not None else None,
            "events": events,
            "drains": r["drains"] if r["hooked"] else None,
            "main_cpu_ms": cpu / 1e6,
            "buffer_changes": r["changes"],
        }

    def close(self):
        if self.nvim is not None:
            try:
                self.nvim.command("qa!")
            except Exception:
                pass  # the connection closes as Neovim exits
            try:
                self.nvim.close()
            except Exception:
                pass
        deadline = time.monotonic() + 5
        while self.pid and alive(self.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        end_pid(self.pid)
        subprocess.run(self.tmux + ["kill-server"], stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        end_pid(self.server_pid)


# ---------------------------------------------------------------- report

ROWS = [
    ("resume_ms", "resume of the 2,000-message session, median of 5 loads in one process (ms)", "{:.1f}"),
    ("resume_load_ms", "  of which `sessions.load()` (ms)", "{:.1f}"),
    ("resume_redraw_ms", "  of which the redraw (ms)", "{:.1f}"),
    ("first_resume_ms", "resume, first load in a fresh Neovim (ms)", "{:.1f}"),
    ("chat_lines", "chat buffer lines after the resume", "{:.0f}"),
    ("rss_growth_mib", "RSS growth from the first resume, VmRSS (MiB)", "{:.2f}"),
    ("anon_growth_mib", "anonymous RSS growth from the first resume, RssAnon (MiB)", "{:.2f}"),
    ("lua_heap_growth_mib", "Lua heap growth from the first resume, collectgarbage(\"count\") (MiB)", "{:.2f}"),
    ("rss_before_mib", "RSS before the resume, core loaded and store open (MiB)", "{:.1f}"),
    ("burst_wall_ms", "5,000-token burst: `:Mia prompt` to the last token in the chat buffer (ms)", "{:.1f}"),
    ("events_per_s", "burst: events from mia_core.drain() per second", "{:.0f}"),
    ("events", "burst: events from mia_core.drain(), total", "{:.0f}"),
    ("drains", "burst: mia_core.drain() calls", "{:.0f}"),
    ("main_cpu_ms", "burst: Neovim main-thread CPU (ms)", "{:.1f}"),
    ("buffer_changes", "burst: chat buffer changes", "{:.0f}"),
]


def report(builds, med, runs, store):
    b, c = builds
    print(f"## Resume and burst: baseline {b.rev} vs current {c.rev} (medians of {runs} interleaved runs)\n")
    print(f"Store: 10,000 sessions; the resumed one has 2,000 messages"
          f"{' + a compaction of all but the last 100' if store['compaction'] else ''}"
          f" (created at schema {store['schema']} by the baseline; each build uses its own copy).\n")
    print(f"| metric | baseline ({b.rev}) | current ({c.rev}) |")
    print("|---|---|---|")
    for key, label, fmt in ROWS:
        cells = []
        for build in builds:
            v = med[build.label].get(key)
            cells.append("n/a" if v is None else fmt.format(v))
        print(f"| {label} | {cells[0]} | {cells[1]} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default="0d6288a", help="git revision to compare against (default 0d6288a)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", help="also write every run's numbers here")
    args = ap.parse_args()
    if args.runs < 1:
        sys.exit("--runs must be at least 1")
    if not shutil.which("tmux"):
        sys.exit("the burst runs in a Neovim TUI inside tmux: apt-get install tmux")
    # SIGTERM unwinds like Ctrl-C, so the cleanup below runs.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    tmp = Path(tempfile.mkdtemp(prefix="mia-issue10-"))
    worktree = tmp / "baseline-tree"
    server = None
    tuis = []
    try:
        current = build_current(tmp)  # first: its snapshot is the tree as the run started
        baseline = build_baseline(tmp, args.baseline, worktree)
        builds = (baseline, current)
        for build in builds:
            build.data = tmp / f"data-{build.label}"
            build.state = tmp / f"state-{build.label}"
            build.state.mkdir()
        baseline.data.mkdir()
        store = seed_store(baseline, tmp)
        shutil.copytree(baseline.data, current.data)
        (tmp / "resume.lua").write_text(RESUME)
        (tmp / "stream_init.lua").write_text(STREAM_INIT)

        print("warming up (store migration, page cache, the library loaded in each TUI) ...", file=sys.stderr)
        for build in builds:
            measure_resume(build, tmp)
        server = Server()
        for build in builds:
            tui = Tui(build, tmp, server.base_url)
            tuis.append(tui)
            tui.warm()

        per = {build.label: [] for build in builds}
        tui_of = {tui.label: tui for tui in tuis}
        raw_bursts = {build.label: [] for build in builds}
        for i in range(args.runs):
            # A, B in even runs and B, A in odd ones; and a short prompt in each
            # TUI before the bursts: without it the first burst after the resume
            # processes was measured 20-30 ms slower, whichever build it was.
            order = builds if i % 2 == 0 else builds[::-1]
            rows = {build.label: measure_resume(build, tmp) for build in order}
            for build in order:
                tui_of[build.label].warm()
            bursts = {build.label: [] for build in builds}
            for _ in range(BURSTS_PER_RUN):
                for build in order:
                    bursts[build.label].append(tui_of[build.label].burst())
            for label, samples in bursts.items():
                rows[label].update({k: median([b[k] for b in samples]) for k in samples[0]})
                raw_bursts[label].append(samples)
            for build in builds:
                per[build.label].append(rows[build.label])
            print(f"run {i + 1}/{args.runs}: " + "; ".join(
                f"{label} resume {row['resume_ms']:.1f} ms, burst {row['burst_wall_ms']:.0f} ms"
                for label, row in rows.items()), file=sys.stderr)
        med = {label: {k: median([r[k] for r in rows]) for k in rows[0]} for label, rows in per.items()}
        for label, rows in per.items():
            if all(r["events"] is None for r in rows):
                print(f"note: {label}: mia_core.drain() was not seen or did not return a list; "
                      "events not counted", file=sys.stderr)
        report(builds, med, args.runs, store)
        if args.json:
            Path(args.json).write_text(json.dumps({
                "baseline": baseline.rev, "current": current.rev, "runs": args.runs, "store": store,
                "medians": med, "per_run": per, "bursts": raw_bursts,
            }, indent=2))
    finally:
        for tui in tuis:
            tui.close()
        if server is not None:
            server.stop()
        if worktree.exists():
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
