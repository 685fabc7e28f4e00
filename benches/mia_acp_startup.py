#!/usr/bin/env python3
"""What mia-acp costs to start and to keep.

Spawns target/release/mia-acp (built with `cargo build --release`) as an ACP
client would, speaking newline-delimited JSON-RPC on its stdin/stdout, with
the scenario server (scripts/scenario_server.py) as its model provider:

  1. startup: spawn -> `initialize` answered, and spawn -> `session/new`
     answered (initialize, then session/new at once), median (and min/max)
     of N fresh processes;
  2. memory from /proc/PID/status: VmRSS and VmHWM idle after `initialize`,
     then after a streamed answer (`long 5000`: 5,000 tokens, each an
     `agent_message_chunk` notification the client reads).

    python3 benches/mia_acp_startup.py [--runs 10] [--tokens 5000] [--json out.json]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / "target" / "release" / "mia-acp"
SERVER = ROOT / "scripts" / "scenario_server.py"


class Agent:
    def __init__(self, config):
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            [str(BIN), "--config", str(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.next = 0
        self.notifications = 0

    def send(self, method, params):
        self.next += 1
        msg = {"jsonrpc": "2.0", "id": self.next, "method": method, "params": params}
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())
        self.proc.stdin.flush()
        return self.next

    def wait(self, id_):
        """Reads until the answer to `id_`; counts notifications, answers no request."""
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("mia-acp closed its stdout")
            msg = json.loads(line)
            if msg.get("id") == id_ and "method" not in msg:
                if "error" in msg:
                    raise RuntimeError(f"error: {msg['error']}")
                return msg["result"]
            if "method" in msg and "id" not in msg:
                self.notifications += 1

    def call(self, method, params):
        return self.wait(self.send(method, params))

    def status(self):
        out = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])  # kB
        return out

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


INIT = {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=5000)
    ap.add_argument("--json")
    args = ap.parse_args()
    if not BIN.exists():
        sys.exit(f"{BIN} is missing: run cargo build --release")
    server = subprocess.Popen([sys.executable, str(SERVER)], stdout=subprocess.PIPE, text=True)
    port = int(server.stdout.readline().split()[1])
    tmp = Path(tempfile.mkdtemp(prefix="mia-acp-bench-"))
    config = tmp / "mia-acp.json"
    config.write_text(json.dumps({
        "model": "scn/echo",
        "providers": {"scn": {"kind": "openai_compatible", "base_url": f"http://127.0.0.1:{port}/v1"}},
        "data_dir": str(tmp / "data"),
        "log_file": str(tmp / "mia-acp.log"),
    }))
    try:
        init_ms, new_ms = [], []
        for _ in range(args.runs):
            a = Agent(config)
            a.call("initialize", INIT)
            t1 = time.perf_counter()
            a.call("session/new", {"cwd": str(tmp), "mcpServers": []})
            t2 = time.perf_counter()
            init_ms.append((t1 - a.t0) * 1000)
            new_ms.append((t2 - a.t0) * 1000)
            a.close()

        a = Agent(config)
        a.call("initialize", INIT)
        time.sleep(0.5)
        idle = a.status()
        sid = a.call("session/new", {"cwd": str(tmp), "mcpServers": []})["sessionId"]
        before = a.notifications
        t = time.perf_counter()
        end = a.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": f"long {args.tokens}"}]})
        stream_s = time.perf_counter() - t
        time.sleep(0.5)
        streamed = a.status()
        chunks = a.notifications - before
        a.close()
    finally:
        server.terminate()
        server.wait(timeout=10)

    def stats(xs):
        return {"median": round(statistics.median(xs), 1), "min": round(min(xs), 1), "max": round(max(xs), 1)}

    result = {
        "runs": args.runs,
        "spawn_to_initialize_ms": stats(init_ms),
        "spawn_to_session_new_ms": stats(new_ms),
        "idle_after_initialize_kb": idle,
        "after_streamed_answer_kb": streamed,
        "streamed_tokens": args.tokens,
        "stream_notifications": chunks,
        "stream_seconds": round(stream_s, 3),
        "stop_reason": end.get("stopReason"),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
