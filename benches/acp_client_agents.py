#!/usr/bin/env python3
"""External ACP agents in mia's chat (mia as client).

In a real headless Neovim (pynvim, like the functional tests):
  1. agent start to first token: the agent's process is stopped, then a
     prompt is sent in the chat (`require("mia.chat").prompt`, what <CR> in
     the prompt does); the time runs until the agent's first text is in the
     chat buffer. It includes spawning the process, `initialize`,
     `session/new` and the prompt. Median of --runs runs, for the SDK's
     example agent (its first chunk comes before its first simulated pause)
     and for claude-agent-acp offline against scripts/scenario_server.py
     (`echo ...`).
  2. main-thread CPU while an answer streams: `slow N RATE` from the scenario
     server (N tokens at RATE per second), through mia's own agent (OpenAI
     format) and through claude-agent-acp (Anthropic format); CPU of
     Neovim's main thread from /proc/<pid>/task/<pid>/schedstat, from the
     prompt to the end of the turn. Median of --runs runs each.

    .venv/bin/python benches/acp_client_agents.py [--runs 5] [--tokens 2000] [--rate 200]
"""

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "functional"))

from conftest import Editor, ScenarioServer  # noqa: E402

NODE = shutil.which("node")
ACP = ROOT / "tests" / "acp" / "node_modules"
EXAMPLE = ACP / "acp-sdk-0.17" / "dist" / "examples" / "agent.js"
CLAUDE = ACP / "@zed-industries" / "claude-agent-acp" / "dist" / "index.js"

FIRST_TOKEN = """
local header = ...
local chat = require("mia.chat")
vim.ui.select = function(items, _, cb) cb(items[1], 1) end
local t0 = vim.uv.hrtime()
chat.prompt("echo first token")
local buf = chat.buffer()
local ok = vim.wait(120000, function()
  local text = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\\n")
  local at = text:find(header, 1, true)
  return at ~= nil and text:sub(at + #header):find("%S") ~= nil
end, 1)
local dt = (vim.uv.hrtime() - t0) / 1e6
chat.stop()
vim.wait(120000, function() return chat.state() ~= "streaming" end, 5)
return { ok = ok, ms = dt }
"""

STREAM_CPU = """
local prompt = ...
local chat = require("mia.chat")
local path = "/proc/self/task/" .. vim.fn.getpid() .. "/schedstat"
local function cpu() -- a /proc file is read afresh each time
  local f = assert(io.open(path))
  local ns = tonumber(f:read("*l"):match("^(%d+)"))
  f:close()
  return ns
end
local c0, t0 = cpu(), vim.uv.hrtime()
chat.prompt(prompt)
vim.wait(300000, function() return chat.state() ~= "streaming" end, 5)
local c1, t1 = cpu(), vim.uv.hrtime()
local text = table.concat(vim.api.nvim_buf_get_lines(chat.buffer(), 0, -1, false), "\\n")
return { state = chat.state(), cpu_ms = (c1 - c0) / 1e6, wall_ms = (t1 - t0) / 1e6, bytes = #text }
"""


def claude_spec(server, home):
    return {
        "command": [NODE, str(CLAUDE)],
        "env": {
            "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{server.port}",
            "ANTHROPIC_API_KEY": "sk-bench",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "HOME": str(home),
            "IS_SANDBOX": "1",
        },
        "cwd": str(home),
    }


def editor(tmp, server, agents):
    return Editor(tmp, setup={
        "model": "scn/echo",
        "providers": {"scn": {"kind": "openai_compatible", "base_url": server.base_url}},
        "agents": agents,
    })


def first_token(tmp, server, name, spec, runs):
    ed = editor(tmp / f"ft-{name}", server, {name: spec})
    try:
        ed.nvim.command(f"Mia agent {name}")
        ed.lua("require('mia.agents').stop()")
        times = []
        for _ in range(runs):
            ed.lua("require('mia.agents').stop()")
            time.sleep(0.5)  # the process is gone before the next start
            ed.lua("require('mia.chat').clear()")
            r = ed.lua(FIRST_TOKEN, f"## {name}\n\n")
            if not r["ok"]:
                raise RuntimeError(f"{name}: no first token\n{ed.chat_text()}\n{ed.messages()}")
            times.append(r["ms"])
        return times
    finally:
        ed.close()


def stream_cpu(tmp, server, name, spec, prompt, runs):
    agents = {name: spec} if spec else {}
    ed = editor(tmp / f"cpu-{name}", server, agents)
    try:
        if spec:
            ed.nvim.command(f"Mia agent {name}")
        out = []
        for _ in range(runs):
            ed.lua("require('mia.chat').clear()")
            r = ed.lua(STREAM_CPU, prompt)
            if r["state"] != "done":
                raise RuntimeError(f"{name}: the stream ended {r['state']}\n{ed.chat_text()[-2000:]}")
            out.append(r)
        return out
    finally:
        ed.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--rate", type=int, default=200)
    ap.add_argument("--json")
    args = ap.parse_args()
    if NODE is None or not EXAMPLE.exists():
        sys.exit("node and tests/acp/node_modules are needed (scripts/bootstrap installs the agents)")
    server = ScenarioServer()
    results = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        home = tmp / "claude-home"
        home.mkdir()
        try:
            ex = first_token(tmp, server, "example", {"command": [NODE, str(EXAMPLE)]}, args.runs)
            cl = first_token(tmp, server, "claude", claude_spec(server, home), args.runs)
            results["first_token_ms"] = {"example": ex, "claude": cl}
            prompt = f"slow {args.tokens} {args.rate}"
            own = stream_cpu(tmp, server, "mia", None, prompt, args.runs)
            ext = stream_cpu(tmp, server, "claude", claude_spec(server, home), prompt, args.runs)
            results["stream"] = {"prompt": prompt, "mia": own, "claude": ext}
        finally:
            server.stop()

    def med(xs):
        return statistics.median(xs)

    print(f"agent start to first token in the chat (median of {args.runs}):")
    for name, xs in results["first_token_ms"].items():
        print(f"  {name:8s} {med(xs):8.1f} ms   runs: {', '.join(f'{x:.0f}' for x in xs)}")
    print(f"main-thread CPU while `{results['stream']['prompt']}` streams (median of {args.runs}):")
    for name in ("mia", "claude"):
        rs = results["stream"][name]
        cpu, wall = med([r["cpu_ms"] for r in rs]), med([r["wall_ms"] for r in rs])
        print(f"  {name:8s} {cpu:8.1f} ms CPU over {wall:8.0f} ms wall ({100 * cpu / wall:.2f}% of a core), "
              f"{1000 * cpu / args.tokens:.1f} µs per token")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
