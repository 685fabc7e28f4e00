#!/usr/bin/env python3
"""TCP connections opened for 100 sequential requests (want 1),
counted at the scenario server, with the default pool and with the pool off
(`http = { pool_max_idle_per_host = 0 }`), side by side in one run.

    .venv/bin/python benches/http_connections.py
"""

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "functional"))

from conftest import KEYS, Editor, ScenarioServer, provider_config  # noqa: E402
from test_providers import SEQUENTIAL  # noqa: E402  (the test's own sequence of requests)


def connections(fmt, http):
    server = ScenarioServer()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            opts = {"model": "p/echo", "providers": {"p": provider_config(fmt, server)}, "http": http}
            ed = Editor(Path(tmp), env=KEYS, setup=opts)
            try:
                ed.lua(SEQUENTIAL, "p/echo", 100)
                ed.wait("seq_done == 100", 120000)
            finally:
                ed.close()
        return len({r["conn"] for r in server.requests() if r["method"] == "POST"})
    finally:
        server.stop()


def main():
    print("TCP connections opened for 100 sequential streamed requests")
    for fmt in ("openai", "anthropic", "gemini"):
        pooled = connections(fmt, {})
        unpooled = connections(fmt, {"pool_max_idle_per_host": 0})
        print(f"  {fmt:9s} pool on: {pooled:3d}   pool off: {unpooled:3d}")


if __name__ == "__main__":
    main()
