#!/usr/bin/env python3
"""The CPU of mia's runtime threads (and of Neovim's main thread) over one
stream, two libraries taking turns in the same run (issue 46's "where the
runtime's time goes"), in a headless Neovim against the scenario server.

Each round starts a fresh Neovim per library (MIA_CORE_PATH), warms it with
one answer, then streams PROMPT three times and reads each thread's CPU from
/proc/PID/task/*/schedstat before and after: the `mia-runtime` threads
(workers and blocking pool) and the main thread. Prints the median per
stream of each. Headless, so no TUI's redraws ride on the main thread; the
same library on both sides (an A/A run) shows the noise: 30.8 against 29.7 ms
for the runtime threads at 50 Hz on the 2-core machine this was written on.

    .venv/bin/python benches/runtime_threads_cpu.py LIB_A LIB_B [--rounds 4] [--prompt "slow 200 50"]

Numbers go in closing notes; no test asserts them.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "functional"))
os.environ.setdefault("MIA_NVIM", str(ROOT / ".venv" / "bin" / "nvim"))
from conftest import Editor, ScenarioServer, scenario_setup  # noqa: E402


def cpu_ms(pid):
    """(mia's runtime threads, the main thread) CPU so far, in ms."""
    runtime = main = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            ns = int((task / "schedstat").read_text().split()[0])
        except OSError:
            continue  # a thread that just ended
        if task.name == str(pid):
            main += ns / 1e6
        elif name.startswith("mia-runtime"):
            runtime += ns / 1e6
    return runtime, main


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("libs", nargs=2, type=Path)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--prompt", default="slow 200 50", help="the scenario server's prompt (default: 200 tokens at 50 Hz)")
    args = ap.parse_args()
    server = ScenarioServer()
    results = {lib: ([], []) for lib in args.libs}
    try:
        for _ in range(args.rounds):
            for lib in args.libs:  # taking turns: drift hits both alike
                ed = Editor(Path(tempfile.mkdtemp()), env={"MIA_CORE_PATH": str(lib.resolve())},
                            setup=scenario_setup(server))
                try:
                    ed.nvim.command("Mia prompt echo warm up")
                    ed.wait("require('mia.chat').state() == 'done'")
                    for _ in range(3):
                        before = cpu_ms(ed.pid)
                        ed.nvim.command("Mia prompt " + args.prompt)
                        time.sleep(0.5)
                        ed.wait("require('mia.chat').state() == 'done'", timeout_ms=120_000)
                        after = cpu_ms(ed.pid)
                        results[lib][0].append(after[0] - before[0])
                        results[lib][1].append(after[1] - before[1])
                finally:
                    ed.close()
    finally:
        server.stop()
    print(f"CPU per stream of `{args.prompt}`, medians of {args.rounds * 3} streams (ms):")
    for lib, (runtime, main_thread) in results.items():
        print(f"  {lib}: runtime threads {statistics.median(runtime):.1f} "
              f"(min {min(runtime):.1f}, max {max(runtime):.1f}); main thread {statistics.median(main_thread):.1f}")


if __name__ == "__main__":
    main()
