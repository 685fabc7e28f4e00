#!/usr/bin/env python3
"""Memory benchmark: one enormous SSE line streamed into a real headless
Neovim with mia, for several `limits.max_event_bytes` values.

For each limit, a fresh Neovim runs `:Mia prompt echo` (to load the native
library), then `:Mia prompt hugeline MB` against the scenario server, which
streams ONE token event of MB MiB in 64 KiB writes. Reported: the peak RSS
growth of the nvim process during that answer (VmHWM after, reset to VmRSS
before via /proc/<pid>/clear_refs), the wall time, and how the answer ended.
A limit above the line lets the whole line through: that row shows what the
line costs when nothing stops it.

    .venv/bin/python benches/oversized_line.py [--mb 300] [--caps 1,8,32,128,512]

Not run by the test suite; no test asserts these numbers.
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pynvim

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20
DEFAULT_CAP_MIB = 8


def nvim_binary():
    for c in (os.environ.get("MIA_NVIM"), str(ROOT / ".venv/bin/nvim"), shutil.which("nvim")):
        if c and Path(c).exists():
            return c
    sys.exit("no Neovim: run scripts/bootstrap")


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def start_server():
    proc = subprocess.Popen([sys.executable, str(ROOT / "scripts/scenario_server.py"), "--port", "0"],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().split()
    if line[:1] != ["LISTENING"]:
        proc.kill()
        sys.exit("the scenario server did not start")
    return proc, int(line[1])


def run_once(port, mb, cap_mib, home):
    env = {"XDG_CONFIG_HOME": f"{home}/config", "XDG_DATA_HOME": f"{home}/data",
           "XDG_STATE_HOME": f"{home}/state", "XDG_CACHE_HOME": f"{home}/cache"}
    argv = ["env", *[f"{k}={v}" for k, v in env.items()], nvim_binary(), "--embed", "--headless", "--clean",
            "--cmd", f"set rtp^={ROOT}"]
    nvim = pynvim.attach("child", argv=argv)
    pid = nvim.call("getpid")
    try:
        nvim.exec_lua("require('mia').setup(...)", {
            "model": "scn/echo",
            "providers": {"scn": {"kind": "openai_compatible", "base_url": f"http://127.0.0.1:{port}/v1"}},
            "limits": {"max_event_bytes": cap_mib * MIB},
            "retry": {"max_retries": 0},
        })
        nvim.command("Mia prompt echo warm up")
        nvim.exec_lua("return vim.wait(30000, function() return require('mia.chat').state() == 'done' end, 10)")
        nvim.exec_lua("collectgarbage('collect')")
        before = status_kib(pid, "VmRSS")
        try:
            with open(f"/proc/{pid}/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            before = status_kib(pid, "VmHWM")
        start = time.monotonic()
        nvim.command(f"Mia prompt hugeline {mb}")
        nvim.exec_lua("return vim.wait(600000, function() return require('mia.chat').state() ~= 'streaming' end, 10)")
        wall = time.monotonic() - start
        peak = status_kib(pid, "VmHWM")
        state = nvim.exec_lua("return require('mia.chat').state()")
        if state == "error":
            text = nvim.exec_lua("return table.concat(vim.api.nvim_buf_get_lines("
                                 "require('mia.chat').buffer(), 0, -1, false), '\\n')")
            error = text.rsplit("> **Error** ", 1)[-1]
            state = "error: " + error[:70] + ("..." if len(error) > 70 else "")
        return (peak - before) * 1024, wall, state
    finally:
        try:
            nvim.close()
        except Exception:
            pass
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=300, help="size of the one line, MiB (default 300)")
    parser.add_argument("--caps", default="1,8,32,128,512", help="limits to try, MiB (default 1,8,32,128,512)")
    args = parser.parse_args()
    caps = [int(c) for c in args.caps.split(",")]
    server, port = start_server()
    rows = []
    try:
        with tempfile.TemporaryDirectory() as home:
            for cap in caps:
                growth, wall, state = run_once(port, args.mb, cap, f"{home}/{cap}")
                rows.append((cap, growth, wall, state))
                print(f"  cap {cap} MiB: {growth / MIB:.1f} MiB, {wall:.2f} s, {state}", file=sys.stderr)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)
    print(f"One {args.mb} MiB SSE line into :Mia prompt (peak RSS growth of nvim):")
    print()
    print("| limits.max_event_bytes | peak RSS growth | growth / limit | wall | answer ended |")
    print("|---|---|---|---|---|")
    for cap, growth, wall, state in rows:
        name = f"{cap} MiB" + (" (default)" if cap == DEFAULT_CAP_MIB else "")
        print(f"| {name} | {growth / MIB:.1f} MiB | {growth / (cap * MIB):.2f} | {wall:.2f} s | {state} |")


if __name__ == "__main__":
    main()
