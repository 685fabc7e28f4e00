#!/usr/bin/env python3
"""The baseline for ACP agents: agent start to first token with the SDK's own client.

For each agent (the SDK 0.17.1 example agent, and claude-agent-acp 0.23.1
against scripts/scenario_server.py), a driver spawns the agent, runs
initialize -> session/new -> session/prompt and reports, in milliseconds from
spawn: initialize answered, session/new answered, first agent_message_chunk,
prompt done.  Each run is a fresh agent process (claude-agent-acp also gets a
fresh HOME); the median of --runs runs is printed.

The SDK driver is tests/acp/sdk_client.mjs (@agentclientprotocol/sdk
ClientSideConnection); the mia driver is mia's chat in a real headless
Neovim (from the prompt, which spawns the agent). Both run in the same run,
one after the other, against the same scenario server. To add a driver:
a function (agent, prompt, workdir) -> {"initialize": ms, "session_new": ms,
"first_chunk": ms, "prompt_done": ms} measured from the agent's spawn, and
register it in DRIVERS; agents come from AGENTS (command + env per run).

    .venv/bin/python benches/acp_sdk_baseline.py [--runs 5] [--drivers sdk]
        [--agents example,claude] [--json out.json]   (--drivers sdk,mia is the default)

The example agent's first chunk is sent at once; its prompt takes ~5 s of
simulated model time, so only first_chunk is comparable.  claude-agent-acp's
prompt is the echo scenario (a few tokens, no tool).  Asserts nothing about
time; needs node (and scripts/bootstrap's tests/acp).
"""

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "functional"))

from acp_agents import (claude_agent_command, claude_env, example_agent_command,  # noqa: E402
                        missing, run_sdk_client)
from conftest import ScenarioServer  # noqa: E402

POINTS = ["initialize", "session_new", "first_chunk", "prompt_done"]


class Agent:
    """An agent to measure: its command and, per run, its environment."""

    def __init__(self, name, command, env=lambda workdir: {}, prompt="echo hi there"):
        self.name, self.command, self.env, self.prompt = name, command, env, prompt


def sdk_driver(agent, prompt, workdir):
    run = run_sdk_client(agent.command(), [prompt], workdir / "project", env=agent.env(workdir),
                         stderr_file=workdir / "agent.stderr", quiet=True)
    if run.returncode != 0 or not run.turns or run.turns[0].get("stopReason") != "end_turn":
        raise RuntimeError(f"{agent.name}: run failed\n{run.explain()}")
    return {p: run.timings.get(p) for p in POINTS}


MIA_TURN = """
local header, prompt, name = ...
local chat = require("mia.chat")
vim.ui.select = function(items, _, cb) cb(items[1], 1) end
local t0 = vim.uv.hrtime()
vim.cmd("Mia agent " .. name) -- starts the agent in the background
chat.prompt(prompt) -- waits for it in the core
local first
local ok = vim.wait(120000, function()
  if not first then
    local text = table.concat(vim.api.nvim_buf_get_lines(chat.buffer(), 0, -1, false), "\\n")
    local at = text:find(header, 1, true)
    if at and text:sub(at + #header):find("%S") then
      first = (vim.uv.hrtime() - t0) / 1e6
    end
  end
  return first ~= nil and chat.state() ~= "streaming"
end, 1)
return { ok = ok, first = first, done = (vim.uv.hrtime() - t0) / 1e6, state = chat.state() }
"""


def mia_driver(agent, prompt, workdir):
    """mia's client in a real headless Neovim: from `:Mia agent NAME` (which
    spawns the agent) and a prompt sent at once, as <CR> sends it, to the
    agent's first text in the chat buffer, and to the end of the turn. mia's client does not expose when
    initialize and session/new were answered: those stay empty."""
    from conftest import Editor

    name = agent.name
    spec = {"command": agent.command(), "env": agent.env(workdir), "cwd": str(workdir / "project")}
    ed = Editor(workdir / "nvim", setup={"model": "scn/echo", "agents": {name: spec}})
    try:
        ed.lua("require('mia.chat').open()")
        r = ed.lua(MIA_TURN, f"## {name}\n\n", prompt, name)
        if not r["ok"] or r["state"] != "done":
            raise RuntimeError(f"{name}: the turn did not end well ({r})\n{ed.chat_text()}\n{ed.messages()}")
        return {"initialize": None, "session_new": None, "first_chunk": r["first"], "prompt_done": r["done"]}
    finally:
        ed.close()


DRIVERS = {"sdk": sdk_driver, "mia": mia_driver}


def agents(server):
    return {
        "example": Agent("example", example_agent_command),
        "claude": Agent("claude", claude_agent_command,
                        env=lambda workdir: claude_env(server.port, workdir / "home")),
    }


def measure(driver, agent, runs):
    samples = []
    for i in range(runs):
        with tempfile.TemporaryDirectory(prefix="mia-acp-bench-") as tmp:
            work = Path(tmp)
            (work / "project").mkdir()
            samples.append(driver(agent, agent.prompt, work))
    def median(p):
        values = [s[p] for s in samples if s[p] is not None]
        return statistics.median(values) if values else None

    return {p: median(p) for p in POINTS} | {"samples": samples}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--drivers", default=",".join(DRIVERS))
    parser.add_argument("--agents", default="example,claude")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    if (why := missing()):
        sys.exit(why)
    server = ScenarioServer()
    results = {}
    try:
        table = agents(server)
        for dname in args.drivers.split(","):
            for aname in args.agents.split(","):
                res = measure(DRIVERS[dname], table[aname], args.runs)
                results[f"{dname}/{aname}"] = res
                spread = {p: [s[p] for s in res["samples"] if s[p] is not None] for p in POINTS}
                print(f"{dname:>6} {aname:<8} median of {args.runs} [min-max] (ms from spawn): " +
                      "  ".join(f"{p} {res[p]:.0f} [{min(spread[p]):.0f}-{max(spread[p]):.0f}]"
                                for p in POINTS if res[p] is not None), flush=True)
    finally:
        server.stop()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
