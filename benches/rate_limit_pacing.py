#!/usr/bin/env python3
"""Requests that got a 429 in a 50-request burst against a
scenario-server window of 20 requests per 10 s, with pacing on and off, in
one run. Seven workers in one headless Neovim send 50 requests through
mia.stream, each taking the next when its answer is in; every answer takes 300 ms (the scenario's
network delay), so the client learns about the window late, as over a real
network. 429s = requests the server saw - the 50 that were answered.

    .venv/bin/python benches/rate_limit_pacing.py [--format openai|anthropic|gemini]
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "functional"))

from conftest import KEYS, Editor, ScenarioServer, provider_config  # noqa: E402

BURST = """
local model, workers, total = ...
_G.burst = { done = 0, failed = {}, left = total }
local function next_request()
  if burst.left == 0 then return end
  burst.left = burst.left - 1
  require('mia').stream({ model = model, messages = { { role = 'user', content = 'window 20 10 300' } } }, {
    on_done = function() burst.done = burst.done + 1; next_request() end,
    on_error = function(e) table.insert(burst.failed, e.message); next_request() end,
  })
end
for _ = 1, workers do next_request() end
"""


def run(fmt, pacing):
    server = ScenarioServer()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            opts = {"model": "p/echo", "providers": {"p": provider_config(fmt, server)},
                    "retry": {"pacing": pacing, "max_retries": 10, "max_wait_ms": 60000}}
            ed = Editor(Path(tmp), env=KEYS, setup=opts)
            try:
                started = time.monotonic()
                ed.lua(BURST, "p/echo", 7, 50)
                ed.wait("burst.done + #burst.failed == 50", 180000)
                took = time.monotonic() - started
                failed = ed.lua("return #burst.failed")
            finally:
                ed.close()
        seen = len([r for r in server.requests() if r["method"] == "POST"])
        return seen - 50, failed, took
    finally:
        server.stop()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--format", default="openai", choices=["openai", "anthropic", "gemini"])
    args = parser.parse_args()
    print(f"50 requests, 7 workers, window 20 per 10 s, answers after 300 ms ({args.format} format)")
    for pacing in (True, False):
        got_429, failed, took = run(args.format, pacing)
        print(f"  pacing {'on ' if pacing else 'off'}: {got_429:3d} requests got a 429, "
              f"{failed} failed, all answered in {took:.1f} s")


if __name__ == "__main__":
    main()
