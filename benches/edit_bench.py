#!/usr/bin/env python3
"""`:Mia edit` benchmark (issue 50), in a headless Neovim against the
scenario server over loopback:

  - first token -> first pending text: from the start of the drain that
    brought the edit's first text to the end of the preview it drew (the
    extmarks placed; Neovim's redraw of them follows), on the main thread;
  - main-thread work per frame while an edit streams (--edit-lines lines, 100
    by default: 200 tokens at 50 Hz)
    beside the chat's answer (200 tokens at 50 Hz, `:Mia prompt slow 200
    50`) in the same run: every drain that delivered something, timed from
    the core's drain to the end of the writer's flush (as stream_bench's
    frames), for the chat alone, then for the chat and an edit together;
    and the edit's own part (its preview's redraw) per frame;
  - what a 20-line edit in the middle of a 2,000-line file sends: the
    request's bytes and its tokens as the server counts them
    (`--prompt-tokens pieces`, a tokenizer-like rule over the system text
    and the messages).

    .venv/bin/python benches/edit_bench.py [--runs 3] [--edit-lines 100] [--json out.json]

Numbers go in closing notes; no test asserts them.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pynvim

ROOT = Path(__file__).resolve().parents[1]

INSTRUMENT = r"""
local uv = vim.uv
local bench = {}
_G.edit_bench = bench
bench.frames = {}
local core = require("mia.core").get()
local writer = require("mia.writer")
local drain, flush = core.drain, writer.flush
local open = nil
core.drain = function(...)
  local t0 = uv.hrtime()
  bench.drain_t0 = t0
  local a, b, c, d = drain(...)
  open = { t0 = t0 }
  return a, b, c, d
end
writer.flush = function(...)
  local f = open
  open = nil
  local r = flush(...)
  if f then
    local edit = package.loaded["mia.edit"]
    local t = edit and edit.last_timing
    bench.frames[#bench.frames + 1] = { total = uv.hrtime() - f.t0, edit_frames = t and t.frames or 0 }
  end
  return r
end
-- The drain that brought the edit's first text: wrap the edit's first render.
local edit = require("mia.edit")
function bench.first_token_to_visible()
  local t = edit.last_timing
  if not (t and t.first_shown_ns and bench.first_drain_t0) then
    return nil
  end
  return (t.first_shown_ns - bench.first_drain_t0) / 1e6
end
local watch = require("mia.bridge").watch
require("mia.bridge").watch = function(id, cbs)
  if cbs.on_delta then
    local inner = cbs.on_delta
    cbs.on_delta = function(d)
      local t = edit.last_timing
      if t and not t.first_delta_ns and d.type == "text" then
        bench.first_drain_t0 = bench.drain_t0
      end
      return inner(d)
    end
  end
  return watch(id, cbs)
end
"""


def nvim_binary():
    for c in (os.environ.get("MIA_NVIM"), str(ROOT / ".venv/bin/nvim"), shutil.which("nvim")):
        if c and Path(c).exists():
            return c
    sys.exit("no Neovim: run scripts/bootstrap")


def start_server():
    proc = subprocess.Popen([sys.executable, str(ROOT / "scripts/scenario_server.py"), "--prompt-tokens", "pieces"],
                            stdout=subprocess.PIPE, text=True)
    port = int(proc.stdout.readline().split()[1])
    return proc, port


def requests(port):
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/_requests", timeout=10) as r:
        return json.loads(r.read())


def editor(home, port):
    env = {"XDG_CONFIG_HOME": str(home / "config"), "XDG_DATA_HOME": str(home / "data"),
           "XDG_STATE_HOME": str(home / "state"), "XDG_CACHE_HOME": str(home / "cache")}
    argv = ["env", *[f"{k}={v}" for k, v in env.items()], nvim_binary(), "--embed", "--headless", "--clean",
            "--cmd", f"set rtp^={ROOT}"]
    nvim = pynvim.attach("child", argv=argv)
    nvim.exec_lua("require('mia').setup(...)", {
        "model": "scn/echo",
        "providers": {"scn": {"kind": "openai_compatible", "base_url": f"http://127.0.0.1:{port}/v1"}},
    })
    return nvim


def wait(nvim, cond, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if nvim.exec_lua(f"return vim.wait(50, function() return {cond} end, 5)"):
            return
    raise RuntimeError(f"timed out: {cond}")


def median_us(xs):
    return round(statistics.median(xs) / 1000, 1) if xs else None


def one_run(home, port, project, edit_lines):
    nvim = editor(home, port)
    try:
        nvim.exec_lua("vim.cmd.cd(...)", str(project))
        nvim.command(f"edit {project / 'big.py'}")
        # warm the core up (its first request opens the HTTP client)
        nvim.command("Mia prompt echo warm")
        wait(nvim, "require('mia.chat').state() == 'done'")
        nvim.exec_lua(INSTRUMENT)
        nvim.command("wincmd p")

        # 1. the chat alone
        nvim.exec_lua("edit_bench.frames = {}")
        nvim.command("Mia prompt slow 200 50")
        wait(nvim, "require('mia.chat').state() == 'done'")
        chat_alone = [f["total"] for f in nvim.exec_lua("return edit_bench.frames")]

        # 2. the chat and an edit of `edit_lines` lines (2 tokens a line, at 50 Hz) together
        answer = "".join(f"    renamed_{i} = compute({i})  # rewritten\n" for i in range(edit_lines))
        nvim.exec_lua("edit_bench.frames = {}")
        nvim.command("Mia prompt slow 200 50")
        nvim.command(f"1000,{999 + edit_lines}Mia edit reply 50 {json.dumps(answer)}")
        wait(nvim, "require('mia.chat').state() == 'done' and not require('mia.edit').streaming()")
        both = [f["total"] for f in nvim.exec_lua("return edit_bench.frames")]
        timing = nvim.exec_lua("return require('mia.edit').last_timing")
        first = nvim.exec_lua("return edit_bench.first_token_to_visible()")
        nvim.command("Mia review reject_all")

        # 3. a 20-line edit: what it sends
        before = len(requests(port))
        nvim.command("990,1009Mia edit reply 0 \"x = 1\\n\"")
        wait(nvim, "not require('mia.edit').streaming()")
        req = requests(port)[before:]
        post = [r for r in req if r["method"] == "POST"][-1]
        body = json.dumps(post["body"])
        nvim.command("Mia review reject_all")
        usage_tokens = nvim.exec_lua("return require('mia.edit').last_cost")
        return {
            "chat_alone_frame_us": median_us(chat_alone),
            "chat_and_edit_frame_us": median_us(both),
            "edit_render_us": median_us(timing["frame_ns"]),
            "edit_frames": timing["frames"],
            "first_token_to_visible_ms": first,
            "edit_request_bytes": len(body.encode()),
            "edit_cost_line": usage_tokens,
        }
    finally:
        try:
            nvim.close()
        except Exception:
            pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--edit-lines", type=int, default=100, help="lines the streaming edit rewrites (default 100)")
    args = ap.parse_args()
    proc, port = start_server()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            project = tmp / "project"
            project.mkdir()
            (project / "big.py").write_text(
                "".join(f"    value_{i} = compute({i})  # line {i + 1} of a long file\n" for i in range(2000)))
            runs = [one_run(tmp / f"run{i}", port, project, args.edit_lines) for i in range(args.runs)]
        out = {}
        for k in runs[0]:
            vals = [r[k] for r in runs if isinstance(r[k], (int, float))]
            out[k] = statistics.median(vals) if vals else runs[-1][k]
        out["runs"] = runs
        print(json.dumps(out, indent=2))
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=2))
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
