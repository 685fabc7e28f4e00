#!/usr/bin/env python3
"""mia-acp's memory under huge prompts: the peak (VmHWM) of one process
while a client sends prompts far larger than any model reads.

Spawns target/release/mia-acp (built with `cargo build --release`) as an ACP
client would, with the scenario server (scripts/scenario_server.py) as its
model provider, and runs two attacks, each on a fresh process:

  1. one prompt of --one-mb MB (default 40), answered or refused;
  2. --sessions sessions (default 8), each sent a prompt of --each-mb MB
     (default 50) at once, before any answer is read.

Prints the peak resident memory of each, how many prompts were answered and
refused (with the first refusal's message), and the bound mia-acp reports in
its log.

    python3 benches/acp_memory.py [--one-mb 40] [--sessions 8] [--each-mb 50] [--json out.json]
"""

import argparse
import json
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mia_acp_startup import BIN, INIT, SERVER, Agent  # noqa: E402


def peak_kb(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def attack(config, cwd, sessions, mb):
    """Sends `sessions` prompts of `mb` MB at once; the peak and the answers."""
    a = Agent(config)
    try:
        a.call("initialize", INIT)
        ids = [a.call("session/new", {"cwd": str(cwd), "mcpServers": []})["sessionId"] for _ in range(sessions)]
        base = peak_kb(a.proc.pid)
        # "echo" answers with the whole prompt: the worst a model could do.
        text = "echo " + "x" * (mb * 1024 * 1024)
        answers = {}
        done = threading.Event()

        def read():
            while len(answers) < sessions:
                line = a.proc.stdout.readline()
                if not line:
                    break
                msg = json.loads(line)
                if "method" in msg and "id" in msg:
                    # a request from the agent (none expected): refuse it
                    a.proc.stdin.write((json.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "no"}}) + "\n").encode())
                    a.proc.stdin.flush()
                elif "id" in msg and "method" not in msg:
                    answers[msg["id"]] = msg
            done.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        for sid in ids:
            a.send("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]})
        done.wait(timeout=600)
        peak = peak_kb(a.proc.pid)
        errors = [m["error"]["message"] for m in answers.values() if "error" in m]
        return {
            "prompts": sessions,
            "prompt_mb": mb,
            "answered": sum(1 for m in answers.values() if "result" in m),
            "refused": len(errors),
            "first_refusal": errors[0] if errors else None,
            "peak_mb": round(peak / 1024, 1),
            "before_prompts_mb": round(base / 1024, 1),
        }
    finally:
        a.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--one-mb", type=int, default=40)
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--each-mb", type=int, default=50)
    ap.add_argument("--json")
    args = ap.parse_args()
    if not BIN.exists():
        sys.exit(f"{BIN} is missing: run cargo build --release")
    server = subprocess.Popen([sys.executable, str(SERVER)], stdout=subprocess.PIPE, text=True)
    port = int(server.stdout.readline().split()[1])
    tmp = Path(tempfile.mkdtemp(prefix="mia-acp-memory-"))
    config = tmp / "mia-acp.json"
    config.write_text(json.dumps({
        "model": "scn/echo",
        "providers": {"scn": {"kind": "openai_compatible", "base_url": f"http://127.0.0.1:{port}/v1"}},
        "data_dir": str(tmp / "data"),
        "log_file": str(tmp / "mia-acp.log"),
    }))
    try:
        result = {
            "one_prompt": attack(config, tmp, 1, args.one_mb),
            "many_prompts": attack(config, tmp, args.sessions, args.each_mb),
        }
    finally:
        server.terminate()
        server.wait(timeout=10)
    bound = [line for line in (tmp / "mia-acp.log").read_text().splitlines() if "memory bound" in line]
    result["bound_in_log"] = bound[-1] if bound else None
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
