#!/usr/bin/env python3
"""MCP tool calls and server starts, side by side in one run (asserts nothing about time).

1. Tool round trip: `echo` of @modelcontextprotocol/server-everything over
   stdio, called
   - by the MCP SDK's own client (benches/mcp_sdk_client.cjs), N calls in a
     row after 100 to warm up: microseconds per call;
   - by mia, through the core's tool path (`run_tool`, as the agent loop calls
     a tool: arguments checked, `tools/call`, result converted), N calls after
     the server was started by a chat turn: microseconds per call;
   - by mia's whole agent loop: a chat turn whose model (the scenario server)
     calls `everything__echo`, against the same turn calling the built-in
     `read_file` of a small file: milliseconds per turn (median of --turns).
2. Startup: `nvim --headless` running `setup()` and quitting, with three MCP
   servers configured against none (median of --starts, alternating), and
   how many processes Neovim has started a second after setup() (must be 0).
3. Memory: Neovim's RSS after a chat turn with no MCP server configured, and
   after a turn that connected three servers (each one server-everything
   over stdio); the difference per server, and the servers' own RSS.

    .venv/bin/python benches/mcp_roundtrip.py [--calls 2000] [--turns 15] [--starts 15] [--json out.json]

Needs node and scripts/bootstrap's tests/mcp.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "functional"))

from conftest import Editor, ScenarioServer, nvim_binary, scenario_setup  # noqa: E402

EVERYTHING = ROOT / "tests" / "mcp" / "node_modules" / ".bin" / "mcp-server-everything"
ECHO_ARGS = {"message": "hi"}


def servers(n):
    return {f"ev{i}": {"command": [str(EVERYTHING), "stdio"], "timeout_ms": 30000} for i in range(n)}


def sdk_round_trip(calls):
    out = subprocess.run(["node", str(ROOT / "benches" / "mcp_sdk_client.cjs"), "echo", json.dumps(ECHO_ARGS),
                          str(calls), "--", str(EVERYTHING), "stdio"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def turn(ed, text):
    t0 = time.perf_counter()
    ed.nvim.command("Mia prompt " + text)
    ed.wait("require('mia.chat').state() == 'done'", 60000)
    return (time.perf_counter() - t0) * 1000


RUN_TOOL = """
local name, args, root, n = ...
local loader, core = require("mia.core"), require("mia")._core()
local result
local h = loader.call(core.run_tool, name, args, root, n)
require("mia.bridge").watch(h.id, {
  on_done = function(r) result = r end,
  on_error = function(e) result = { error = e } end,
})
vim.wait(600000, function() return result ~= nil end, 1)
assert(result and not result.error and not result.is_error, vim.inspect(result))
return result.elapsed_us / n
"""


def rss_kb(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def descendants(pid):
    kids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                kids.append(int(p.name))
    return kids + [d for k in kids for d in descendants(k)]


def mia_numbers(args, work):
    server = ScenarioServer()
    try:
        project = work / "project"
        project.mkdir()
        (project / "small.txt").write_text("hello\n")
        ed = Editor(work / "nvim", setup=scenario_setup(
            server, mcp={"servers": servers(1)}, permissions={"rules": [{"tool": "*", "action": "allow"}]}))
        ed.lua("vim.cmd.cd(...)", str(project))
        first = turn(ed, "tool ev0__echo " + json.dumps(ECHO_ARGS))
        per_call = ed.lua(RUN_TOOL, "ev0__echo", ECHO_ARGS, str(project), args.calls)
        builtin_call = ed.lua(RUN_TOOL, "read_file", {"path": "small.txt"}, str(project), args.calls)
        mcp_turns, builtin_turns = [], []
        for _ in range(args.turns):
            mcp_turns.append(turn(ed, "tool ev0__echo " + json.dumps(ECHO_ARGS)))
            builtin_turns.append(turn(ed, 'tool read_file {"path": "small.txt"}'))
        ed.close()

        # Memory: the same chat turn, without and with three servers.
        bare = Editor(work / "bare", setup=scenario_setup(server))
        bare.lua("vim.cmd.cd(...)", str(project))
        turn(bare, "hello")
        time.sleep(1)
        bare_rss = rss_kb(bare.pid)
        bare.close()
        three = Editor(work / "three", setup=scenario_setup(
            server, mcp={"servers": servers(3)}, permissions={"rules": [{"tool": "*", "action": "allow"}]}))
        three.lua("vim.cmd.cd(...)", str(project))
        turn(three, "tool ev2__echo " + json.dumps(ECHO_ARGS))
        time.sleep(1)
        three_rss = rss_kb(three.pid)
        server_rss = [rss_kb(p) for p in descendants(three.pid)]
        three.close()
    finally:
        server.stop()
    return {
        "first_turn_with_server_start_ms": round(first, 1),
        "mia_run_tool_mcp_us_per_call": round(per_call, 1),
        "mia_run_tool_builtin_read_file_us_per_call": round(builtin_call, 1),
        "turn_mcp_echo_ms_median": round(statistics.median(mcp_turns), 2),
        "turn_builtin_read_file_ms_median": round(statistics.median(builtin_turns), 2),
        "nvim_rss_kb_no_servers": bare_rss,
        "nvim_rss_kb_three_servers": three_rss,
        "nvim_rss_kb_per_server": round((three_rss - bare_rss) / 3),
        "server_processes_rss_kb": server_rss,
    }


def startup(args, work):
    cfg_none = {}
    cfg_three = {"mcp": {"servers": servers(3)}}
    times = {"none": [], "three": []}
    for i in range(args.starts * 2):
        name, cfg = ("none", cfg_none) if i % 2 == 0 else ("three", cfg_three)
        code = f"require('mia').setup(vim.json.decode([[{json.dumps(cfg)}]]))"
        env = {**os.environ, "XDG_DATA_HOME": str(work / "xdg"), "XDG_STATE_HOME": str(work / "xdg")}
        t0 = time.perf_counter()
        subprocess.run([nvim_binary(), "--headless", "--clean", "--cmd", f"set rtp^={ROOT}", "-c", f"lua {code}",
                        "-c", "qa!"], check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times[name].append((time.perf_counter() - t0) * 1000)
    ed = Editor(work / "startup", setup=cfg_three)
    time.sleep(1)
    children = descendants(ed.pid)
    ed.close()
    return {
        "nvim_setup_quit_ms_median_no_servers": round(statistics.median(times["none"]), 1),
        "nvim_setup_quit_ms_median_three_servers": round(statistics.median(times["three"]), 1),
        "processes_started_by_setup_with_three_servers": len(children),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--turns", type=int, default=15)
    ap.add_argument("--starts", type=int, default=15)
    ap.add_argument("--json")
    args = ap.parse_args()
    if shutil.which("node") is None or not EVERYTHING.exists():
        sys.exit("node or tests/mcp's servers are missing: run scripts/bootstrap")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        sdk = sdk_round_trip(args.calls)
        result = {"sdk_client_us_per_call": round(sdk["per_call_us"], 1),
                  "sdk_client_connect_ms": round(sdk["connect_ms"], 1),
                  **mia_numbers(args, work), **startup(args, work)}
    for k, v in result.items():
        print(f"{k:48} {v}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
