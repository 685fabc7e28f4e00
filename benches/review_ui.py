#!/usr/bin/env python3
"""The review UI, measured side by side with what a user would do in
plain Neovim, in ONE Neovim TUI (tmux) driven over its --listen socket.

The project file is 10,000 lines of 40 characters. The scenario server
(scripts/scenario_server.py) plays the model: `:Mia prompt tool NAME {json}`
makes it call NAME, and mia (mode "ask") asks with a review.

  1. The diff float (`review = "diff"`), for an `edit_file` changing one line
     in the middle, and for a `write_file` of the same file with every 10th
     line changed (1,000 hunks):
       - `:Mia prompt` issued -> the float's buffer entered in its window
         (BufWinEnter of the `mia-review` buffer), wall time: it includes
         the scenario server's round trip, the core's tool work and, for
         `write_file`, the chat showing the 400 KB prompt and tool call;
       - the `session/request_permission` event reaching Lua -> the float
         entered, and -> the main loop free again (a callback scheduled from
         that autocommand), i.e. main-thread time building the float;
       - then a `:redraw` (in that scheduled callback).
     The event is seen by wrapping `drain` of the native module table as the
     library is opened (package.loadlib), the way benches/resume_and_burst_vs_baseline.py
     counts events; nothing under lua/ is changed or wrapped. The float is
     checked (its `@@` headers are the expected hunks), accepted with `a`, and
     the file on disk must then be the proposal.
     Side by side: `:diffsplit` of the same old/new files (copies) in a new
     tab: the command, then a `:redraw`; the hunks it shows are counted (`]c`).
  2. Pending hunks (`review = "hunks"`): a `write_file` with 20 separated
     one-line changes. For each hunk, `]h` (not timed), then the accept key
     (`<localleader>a`) alone as one `nvim_feedkeys(keys, "x", false)` inside
     an exec_lua reading `vim.uv.hrtime()` before and after (main-thread
     time), then a `:redraw` timed apart. The file on disk and the buffer must
     then be the proposal.
     Side by side, timed the same way: Vim's diff mode (`:diffsplit` of the
     same files, `]c` then `do` for each hunk, then `:w`), and a plain
     `nvim_buf_set_lines` of the same 20 lines.

Each run does every case once (mia first in even runs, Vim first in odd
ones); the table shows medians over the runs (per-hunk numbers: median and
max over every accept of every run).

    .venv/bin/python benches/review_ui.py [--runs 5] [--json out.json]

Needs tmux (apt-get install tmux) and `cargo build --release` done (the
library is loaded from target/release). Asserts nothing about time.
"""

import argparse
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pynvim

ROOT = Path(__file__).resolve().parents[1]
LINES = 10_000
MIDDLE = 5_000  # the line edit_file changes (1-based)
EVERY = 10  # write_file changes every 10th line
HUNK_LINES = [250 + 500 * k for k in range(20)]  # the 20 one-line changes (1-based)
TIMEOUT = 120

# ---------------------------------------------------------------- the files


def line(i):
    return f"{i:05d}: lorem ipsum dolor sit amet, consec"  # 40 characters


def changed(i):
    return f"{i:05d}: LOREM ipsum dolor sit amet, CHANGED"


def text(changed_lines=()):
    changed_lines = set(changed_lines)
    return "".join((changed(i) if i in changed_lines else line(i)) + "\n" for i in range(1, LINES + 1))


ORIGINAL = text()
ONE = text([MIDDLE])
TENTHS = text(range(EVERY, LINES + 1, EVERY))
TWENTY = text(HUNK_LINES)

# ---------------------------------------------------------------- Lua in the TUI

INIT = r"""
local api, uv = vim.api, vim.uv or vim.loop
vim.o.shortmess = vim.o.shortmess .. "I"
vim.o.swapfile = false
vim.o.laststatus = 2
vim.opt.rtp:prepend(assert(vim.env.MIA_BENCH_TREE))
vim.cmd("runtime plugin/mia.lua")
vim.cmd.cd(vim.fn.fnameescape(assert(vim.env.MIA_BENCH_PROJECT)))

_G.b11 = {
  opts = {
    model = "bench/echo",
    providers = { bench = { kind = "openai_compatible", base_url = assert(vim.env.MIA_BENCH_BASE_URL) } },
  },
  hooked = false,
}
require("mia").setup(b11.opts)

-- When a `session/request_permission` event reaches Lua: `drain` of the
-- native module table is wrapped as the library is opened.
local function hook(mod)
  if b11.hooked or type(mod) ~= "table" or type(mod.drain) ~= "function" then
    return mod
  end
  local drain = mod.drain
  mod.drain = function(...)
    -- next_ms: when to drain again (the frame's pacing); text_stream: set
    -- when `events` is the text of one plain answer chunk (never a call),
    -- figures: the live figures beside it (never a call either)
    local events, next_ms, text_stream, figures = drain(...)
    if b11.armed and not b11.t_event and type(events) == "table" then
      for _, ev in ipairs(events) do
        if ev.kind == "call" and ev.call_kind == "session/request_permission" then
          b11.t_event = uv.hrtime()
          break
        end
      end
    end
    return events, next_ms, text_stream, figures
  end
  b11.hooked = true
  return mod
end
local loadlib = package.loadlib
package.loadlib = function(path, sym)
  local opener, err = loadlib(path, sym)
  if type(opener) ~= "function" or sym ~= "luaopen_mia_core" then
    return opener, err
  end
  return function(...)
    return hook(opener(...))
  end
end

-- Screen updates, to tell whether one came between the float and the
-- forced redraw (then that redraw would not be the one showing the float).
b11.redraws = 0
api.nvim_set_decoration_provider(api.nvim_create_namespace("b11"), {
  on_start = function()
    b11.redraws = b11.redraws + 1
    return false
  end,
})

-- The float on screen: its buffer entered in a floating window.
api.nvim_create_autocmd("BufWinEnter", {
  callback = function(ev)
    if not b11.armed or b11.t_float or vim.bo[ev.buf].filetype ~= "mia-review" then
      return
    end
    if api.nvim_win_get_config(0).relative == "" then
      return
    end
    b11.t_float = uv.hrtime()
    b11.redraws_at_float = b11.redraws
    vim.schedule(function()
      b11.t_free = uv.hrtime()
      b11.redraws_at_free = b11.redraws
      vim.cmd.redraw()
      b11.t_redraw = uv.hrtime()
    end)
  end,
})

function b11.review(mode)
  require("mia").setup(vim.tbl_extend("force", b11.opts, { review = mode }))
end

--- A fresh chat, then `:Mia prompt tool {tool} {json}`; times start here.
function b11.prompt(tool, json)
  vim.cmd("Mia new")
  b11.t_event, b11.t_float, b11.t_free, b11.t_redraw = nil, nil, nil, nil
  b11.armed = true
  b11.t0 = uv.hrtime()
  vim.cmd("Mia prompt tool " .. tool .. " " .. json)
end

function b11.float_result()
  b11.armed = false
  local lines = require("mia.review").showing_lines() or {}
  local hunks, plus = 0, 0
  for _, l in ipairs(lines) do
    if l:sub(1, 3) == "@@ " then
      hunks = hunks + 1
    elseif l:sub(1, 1) == "+" then
      plus = plus + 1
    end
  end
  local function ms(a, b)
    return (a and b) and (b - a) / 1e6 or vim.NIL
  end
  return {
    prompt_to_float_ms = ms(b11.t0, b11.t_float),
    prompt_to_drawn_ms = ms(b11.t0, b11.t_redraw),
    event_to_float_ms = ms(b11.t_event, b11.t_float),
    event_to_free_ms = ms(b11.t_event, b11.t_free),
    float_redraw_ms = ms(b11.t_free, b11.t_redraw),
    redrawn_before = b11.redraws_at_free ~= b11.redraws_at_float,
    hooked = b11.hooked,
    hunks = hunks,
    plus = plus,
  }
end

--- `require("mia.review").unified()` alone (the float's lines and
--- highlights, computed from the two texts), called directly.
function b11.unified_ms(old, new)
  local t0 = uv.hrtime()
  local view = require("mia.review").unified("big.txt", old, new)
  return { (uv.hrtime() - t0) / 1e6, #view.hunk_rows }
end

--- Wipes every buffer of `path` (its windows show a scratch buffer), so the
--- next case starts from the file on disk.
function b11.forget(path)
  local want = vim.fn.resolve(vim.fn.fnamemodify(path, ":p"))
  for _, b in ipairs(api.nvim_list_bufs()) do
    local name = api.nvim_buf_get_name(b)
    if name ~= "" and vim.fn.resolve(vim.fn.fnamemodify(name, ":p")) == want then
      for _, w in ipairs(vim.fn.win_findbuf(b)) do
        api.nvim_win_set_buf(w, api.nvim_create_buf(false, true))
      end
      api.nvim_buf_delete(b, { force = true })
    end
  end
end

local function feed(keys)
  api.nvim_feedkeys(keys, "x", false)
end

local function hunks_in_diff()
  local view = vim.fn.winsaveview()
  vim.cmd("normal! gg")
  local n, last = 0, 1
  while true do
    vim.cmd("silent! normal! ]c")
    local l = vim.fn.line(".")
    if l <= last then
      break
    end
    n, last = n + 1, l
  end
  vim.fn.winrestview(view)
  return n
end

--- `:diffsplit new` over `old` in a new tab: the command, then a redraw.
function b11.diffsplit(old, new)
  vim.cmd("tabnew")
  vim.cmd.edit(vim.fn.fnameescape(old))
  local t0 = uv.hrtime()
  vim.cmd("diffsplit " .. vim.fn.fnameescape(new))
  local t1 = uv.hrtime()
  vim.cmd.redraw()
  local t2 = uv.hrtime()
  local n = hunks_in_diff()
  vim.cmd("diffoff!")
  vim.cmd("tabclose!")
  b11.forget(old)
  b11.forget(new)
  return { command_ms = (t1 - t0) / 1e6, redraw_ms = (t2 - t1) / 1e6, hunks = n }
end

--- Per hunk: `move` (not timed), then `accept` as one synchronous feedkeys,
--- then a redraw, each timed.
local function accept_each(count, move, accept)
  local accept_ms, redraw_ms = {}, {}
  for _ = 1, count do
    if move then
      feed(move)
    end
    local t0 = uv.hrtime()
    accept()
    local t1 = uv.hrtime()
    vim.cmd.redraw()
    local t2 = uv.hrtime()
    accept_ms[#accept_ms + 1] = (t1 - t0) / 1e6
    redraw_ms[#redraw_ms + 1] = (t2 - t1) / 1e6
  end
  return { accept_ms = accept_ms, redraw_ms = redraw_ms }
end

--- mia's pending hunks in the current window: `]h` then the accept key.
function b11.accept_hunks(count)
  local k = require("mia.config").get().review_keys
  local leader = vim.g.maplocalleader or "\\"
  local function keys(lhs)
    return api.nvim_replace_termcodes(lhs:gsub("<[Ll]ocal[Ll]eader>", leader), true, false, true)
  end
  local next_hunk, accept_hunk = keys(k.next_hunk), keys(k.accept_hunk)
  feed("gg")
  return accept_each(count, next_hunk, function()
    feed(accept_hunk)
  end)
end

--- Vim's diff mode: `]c` then `do` in the old file's window, then `:w`.
function b11.diffget_hunks(old, new, count)
  vim.cmd("tabnew")
  vim.cmd.edit(vim.fn.fnameescape(old))
  vim.cmd("vertical diffsplit " .. vim.fn.fnameescape(new))
  vim.cmd("wincmd p")
  feed("gg")
  local r = accept_each(count, "]c", function()
    feed("do")
  end)
  vim.cmd("write")
  r.left = hunks_in_diff()
  vim.cmd("diffoff!")
  vim.cmd("tabclose!")
  b11.forget(old)
  b11.forget(new)
  return r
end

--- A plain nvim_buf_set_lines of each changed line, then `:w`.
function b11.set_lines(old, rows, lines)
  vim.cmd("tabnew")
  vim.cmd.edit(vim.fn.fnameescape(old))
  local i = 0
  local r = accept_each(#rows, nil, function()
    i = i + 1
    api.nvim_buf_set_lines(0, rows[i] - 1, rows[i], false, { lines[i] })
  end)
  vim.cmd("write")
  vim.cmd("tabclose!")
  b11.forget(old)
  return r
end
"""

# ---------------------------------------------------------------- processes


def nvim_binary():
    for c in (os.environ.get("MIA_NVIM"), str(ROOT / ".venv/bin/nvim"), shutil.which("nvim")):
        if c and Path(c).exists():
            return c
    sys.exit("no Neovim: set MIA_NVIM or run scripts/bootstrap")


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
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


class Server:
    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "scripts/scenario_server.py")],
                                     stdout=subprocess.PIPE, text=True)
        first = self.proc.stdout.readline()
        if not first.startswith("LISTENING "):
            end_pid(self.proc.pid)
            raise RuntimeError(f"the scenario server did not start: {first!r}")
        self.base_url = f"http://127.0.0.1:{int(first.split()[1])}/v1"

    def stop(self):
        end_pid(self.proc.pid)
        self.proc.wait(timeout=10)


class Tui:
    """A Neovim TUI in a detached tmux pane (its own tmux server), driven
    over its --listen socket."""

    def __init__(self, tmp, env):
        self.sock = str(tmp / "nvim.sock")
        self.tmux = ["tmux", "-L", f"mia-issue11-{os.getpid()}"]
        self.pid = self.server_pid = None
        self.nvim = None
        init = tmp / "init.lua"
        init.write_text(INIT)
        envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        argv = [nvim_binary(), "--clean", "-u", str(init), "--listen", self.sock]
        cmd = f"env {envs} " + " ".join(shlex.quote(a) for a in argv)
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

    def wait(self, condition, what, timeout=TIMEOUT):
        """Polls a Lua expression from outside (Neovim's loop runs freely meanwhile)."""
        deadline = time.monotonic() + timeout
        while not self.lua(f"return {condition}"):
            if time.monotonic() > deadline:
                msgs = self.lua("return vim.api.nvim_exec2('messages', { output = true }).output")
                raise RuntimeError(f"timed out ({timeout} s) waiting for {what}; messages:\n{msgs}")
            time.sleep(0.02)

    def answered(self):
        self.wait("require('mia.chat').state() == 'done'", "the turn to end")

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


# ---------------------------------------------------------------- the cases


class Bench:
    def __init__(self, tui, project, side):
        self.tui, self.project, self.side = tui, project, side
        self.target = project / "big.txt"

    def fresh(self):
        """The project file back to the original, no buffer of it loaded."""
        self.tui.lua("b11.forget(...)", str(self.target))
        self.target.write_text(ORIGINAL)

    def check_disk(self, want, what):
        got = self.target.read_text()
        if got != want:
            raise RuntimeError(f"{what}: the file on disk is not what was accepted "
                               f"({len(got)} bytes, want {len(want)})")

    def float_case(self, tool, args, want, hunks):
        self.fresh()
        self.tui.lua("b11.review('diff')")
        self.tui.lua("b11.prompt(...)", tool, json.dumps(args))
        self.tui.wait("b11.t_redraw ~= nil", f"the review float of {tool}")
        r = self.tui.lua("return b11.float_result()")
        if r["hunks"] != hunks or r["plus"] != hunks:
            raise RuntimeError(f"{tool}: the float shows {r['hunks']} hunks and {r['plus']} added lines, want {hunks}")
        self.tui.nvim.input("a")
        self.tui.answered()
        self.check_disk(want, f"{tool} accepted in the float")
        self.fresh()
        r["unified_ms"], n = self.tui.lua("return b11.unified_ms(...)", ORIGINAL, want)
        if n != hunks:
            raise RuntimeError(f"review.unified() made {n} hunks, want {hunks}")
        return r

    def diffsplit_case(self, new_text, hunks, tag):
        old, new = self.side / f"old-{tag}.txt", self.side / f"new-{tag}.txt"
        old.write_text(ORIGINAL)
        new.write_text(new_text)
        r = self.tui.lua("return b11.diffsplit(...)", str(old), str(new))
        if r["hunks"] != hunks:
            raise RuntimeError(f":diffsplit shows {r['hunks']} hunks, want {hunks}")
        return r

    def mia_hunks(self):
        self.fresh()
        self.tui.lua("b11.review('hunks')")
        self.tui.lua("b11.prompt(...)", "write_file", json.dumps({"path": "big.txt", "content": TWENTY}))
        self.tui.wait(f"#require('mia.review').pending() == {len(HUNK_LINES)}", "the pending hunks")
        self.tui.lua("b11.armed = false")
        lnums = self.tui.lua("return vim.tbl_map(function(p) return p.lnum end, require('mia.review').pending())")
        if sorted(lnums) != HUNK_LINES:
            raise RuntimeError(f"pending hunks at lines {sorted(lnums)[:5]}..., want {HUNK_LINES[:5]}...")
        r = self.tui.lua("return b11.accept_hunks(...)", len(HUNK_LINES))
        self.tui.answered()
        left = self.tui.lua("return #require('mia.review').pending()")
        if left:
            raise RuntimeError(f"{left} hunks still pending after {len(HUNK_LINES)} accepts")
        self.check_disk(TWENTY, "20 hunks accepted one by one")
        buf = self.tui.lua("local b = vim.fn.bufnr(...) return { lines = vim.api.nvim_buf_get_lines(b, 0, -1, false),"
                           " modified = vim.bo[b].modified }", str(self.target))
        if buf["lines"] != TWENTY.splitlines() or buf["modified"]:
            raise RuntimeError("after the accepts the buffer is not the accepted text, saved")
        self.fresh()
        return r

    def vim_diffget(self):
        old, new = self.side / "old-20.txt", self.side / "new-20.txt"
        old.write_text(ORIGINAL)
        new.write_text(TWENTY)
        r = self.tui.lua("return b11.diffget_hunks(...)", str(old), str(new), len(HUNK_LINES))
        if r["left"] != 0 or old.read_text() != TWENTY:
            raise RuntimeError(f"`do` left {r['left']} hunks; the file written is "
                               f"{'right' if old.read_text() == TWENTY else 'wrong'}")
        return r

    def set_lines(self):
        old = self.side / "old-set.txt"
        old.write_text(ORIGINAL)
        r = self.tui.lua("return b11.set_lines(...)", str(old), HUNK_LINES, [changed(i) for i in HUNK_LINES])
        if old.read_text() != TWENTY:
            raise RuntimeError("nvim_buf_set_lines: the file written is not the 20 changed lines")
        return r

    def run(self, mia_first):
        edit = {"path": "big.txt", "old_string": line(MIDDLE) + "\n", "new_string": changed(MIDDLE) + "\n"}
        write = {"path": "big.txt", "content": TENTHS}
        n_tenths = LINES // EVERY
        steps = {
            "mia": [
                ("float_one", lambda: self.float_case("edit_file", edit, ONE, 1)),
                ("float_tenths", lambda: self.float_case("write_file", write, TENTHS, n_tenths)),
                ("hunks_mia", self.mia_hunks),
            ],
            "vim": [
                ("diffsplit_one", lambda: self.diffsplit_case(ONE, 1, "one")),
                ("diffsplit_tenths", lambda: self.diffsplit_case(TENTHS, n_tenths, "tenths")),
                ("hunks_diffget", self.vim_diffget),
                ("hunks_set_lines", self.set_lines),
            ],
        }
        out = {}
        for side in (("mia", "vim") if mia_first else ("vim", "mia")):
            for name, step in steps[side]:
                out[name] = step()
        return out


# ---------------------------------------------------------------- report


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(v, spec="{:.2f}"):
    return "n/a" if v is None else spec.format(v)


def report(runs, per):
    def med(case, key):
        return median([r[case][key] for r in per])

    def flat(case, key):
        return [x for r in per for x in r[case][key]]

    def hunk_cells(case):
        accepts, redraws = flat(case, "accept_ms"), flat(case, "redraw_ms")
        return (fmt(median(accepts), "{:.3f}"), fmt(max(accepts), "{:.3f}"),
                fmt(median([max(r[case]["accept_ms"]) for r in per]), "{:.3f}"), fmt(median(redraws), "{:.3f}"))

    print(f"## Review UI vs plain Neovim (one Neovim TUI in tmux, 160x45; medians of {runs} runs)\n")
    print(f"File: {LINES:,} lines of 40 characters.\n")
    print("### 1. Showing the diff (ms)\n")
    print("| | edit_file, 1 line changed | write_file, every 10th line (1,000 hunks) |")
    print("|---|---|---|")
    rows = [
        ("mia: `:Mia prompt` -> float entered (wall, includes the model round trip)", "prompt_to_float_ms"),
        ("mia: `:Mia prompt` -> float drawn (after the forced `:redraw`)", "prompt_to_drawn_ms"),
        ("mia: permission event in Lua -> float entered (main thread)", "event_to_float_ms"),
        ("mia: permission event in Lua -> main loop free again", "event_to_free_ms"),
        ("mia: `:redraw` with the float", "float_redraw_ms"),
        ("mia: `review.unified()` alone on the same texts (diff lines and highlights)", "unified_ms"),
    ]
    for label, key in rows:
        print(f"| {label} | {fmt(med('float_one', key))} | {fmt(med('float_tenths', key))} |")
    for label, key in (("Vim: `:diffsplit` (reads the new file, computes the diff)", "command_ms"),
                       ("Vim: `:redraw` after it", "redraw_ms")):
        print(f"| {label} | {fmt(med('diffsplit_one', key))} | {fmt(med('diffsplit_tenths', key))} |")
    total = [median([r[c]["command_ms"] + r[c]["redraw_ms"] for r in per])
             for c in ("diffsplit_one", "diffsplit_tenths")]
    print(f"| Vim: `:diffsplit` + `:redraw` | {fmt(total[0])} | {fmt(total[1])} |")
    print(f"\n### 2. Accepting one hunk of {len(HUNK_LINES)} one-line changes, main thread (ms; "
          f"{len(HUNK_LINES)} accepts x {runs} runs)\n")
    print("| | accept, median | accept, max | accept, median of each run's max | `:redraw` after, median |")
    print("|---|---|---|---|---|")
    for label, case in (("mia `review = \"hunks\"`: `<localleader>a` after `]h`", "hunks_mia"),
                        ("Vim diff mode: `do` after `]c` (`:diffsplit` of the same files)", "hunks_diffget"),
                        ("plain `nvim_buf_set_lines` of the line", "hunks_set_lines")):
        print(f"| {label} | " + " | ".join(hunk_cells(case)) + " |")
    print("\nEvery review was answered and the file on disk checked against the accepted text.")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", help="also write every run's numbers here")
    args = ap.parse_args()
    if args.runs < 1:
        sys.exit("--runs must be at least 1")
    if not shutil.which("tmux"):
        sys.exit("the bench runs a Neovim TUI inside tmux: apt-get install tmux")
    lib = ROOT / "target/release/libmia_core.so"
    if not lib.exists():
        sys.exit(f"{lib} is missing: run `cargo build --release` first")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    tmp = Path(tempfile.mkdtemp(prefix="mia-issue11-"))
    server = tui = None
    try:
        project, side = tmp / "project", tmp / "side"
        project.mkdir()
        side.mkdir()
        (project / "big.txt").write_text(ORIGINAL)
        env = {"XDG_CONFIG_HOME": tmp / "config", "XDG_DATA_HOME": tmp / "data",
               "XDG_STATE_HOME": tmp / "state", "XDG_CACHE_HOME": tmp / "cache"}
        for d in env.values():
            d.mkdir()
        server = Server()
        env = {k: str(v) for k, v in env.items()}
        env.update({"MIA_BENCH_TREE": str(ROOT), "MIA_BENCH_PROJECT": str(project),
                    "MIA_BENCH_BASE_URL": server.base_url})
        tui = Tui(tmp, env)
        bench = Bench(tui, project, side)
        print("warming up (the library, the store, the page cache) ...", file=sys.stderr)
        bench.run(mia_first=True)
        per = []
        for i in range(args.runs):
            r = bench.run(mia_first=i % 2 == 0)
            per.append(r)
            print(f"run {i + 1}/{args.runs}: float {r['float_one']['prompt_to_float_ms']:.1f} / "
                  f"{r['float_tenths']['prompt_to_float_ms']:.1f} ms, diffsplit "
                  f"{r['diffsplit_one']['command_ms']:.1f} / {r['diffsplit_tenths']['command_ms']:.1f} ms",
                  file=sys.stderr)
        if any(r[c]["redrawn_before"] for r in per for c in ("float_one", "float_tenths")):
            print("note: the screen was updated between the float opening and the forced redraw "
                  "in some runs: that redraw time is not the float's first", file=sys.stderr)
        if not all(r["float_one"]["hooked"] for r in per):
            print("note: mia_core.drain() was not seen: the event -> float times are n/a", file=sys.stderr)
        report(args.runs, per)
        if args.json:
            Path(args.json).write_text(json.dumps({"runs": args.runs, "per_run": per}, indent=2))
    finally:
        if tui is not None:
            tui.close()
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
