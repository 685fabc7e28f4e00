#!/usr/bin/env python3
"""The CPU of mia's runtime threads (and of Neovim's main thread) over one
stream, two or more libraries taking turns in the same run (issue 46's
"where the runtime's time goes"), in a headless Neovim against the
scenario server.

Each round starts a fresh Neovim per library (MIA_CORE_PATH), warms it with
one answer, then streams PROMPT three times and reads each thread's CPU from
/proc/PID/task/*/schedstat before and after: the `mia-runtime` threads
(the runtime's and its blocking pool's) and the main thread. Prints the
median per stream of each, and how many times the runtime's threads were
switched in (schedstat's third field: one per wake-up, about). Headless, so no TUI's redraws ride on the main thread; the
same library on both sides (an A/A run) shows the noise: 30.8 against 29.7 ms
for the runtime threads at 50 Hz on the 2-core machine this was written on.

    .venv/bin/python benches/runtime_threads_cpu.py LIB_A LIB_B [LIB_C ...] [--rounds 4] [--prompt "slow 200 50"]

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
    """(mia's runtime threads, the main thread) CPU so far in ms, and the
    runtime threads' times switched in."""
    runtime = main = 0.0
    slices = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            stat = (task / "schedstat").read_text().split()
        except OSError:
            continue  # a thread that just ended
        if task.name == str(pid):
            main += int(stat[0]) / 1e6
        elif name.startswith("mia-runtime"):
            runtime += int(stat[0]) / 1e6
            slices += int(stat[2])
    return runtime, main, slices


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("libs", nargs="+", type=Path)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--prompt", default="slow 200 50", help="the scenario server's prompt (default: 200 tokens at 50 Hz)")
    args = ap.parse_args()
    if len(args.libs) < 2:
        ap.error("give two libraries or more (the same one twice for an A/A run)")
    server = ScenarioServer()
    # By position: the same library twice (an A/A run) is two sides.
    results = [([], [], []) for _ in args.libs]
    try:
        for _ in range(args.rounds):
            for side, lib in enumerate(args.libs):  # taking turns: drift hits all alike
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
                        for i in range(3):
                            results[side][i].append(after[i] - before[i])
                finally:
                    ed.close()
    finally:
        server.stop()
    print(f"CPU per stream of `{args.prompt}`, medians of {args.rounds * 3} streams (ms):")
    for lib, (runtime, main_thread, slices) in zip(args.libs, results):
        print(f"  {lib}: runtime threads {statistics.median(runtime):.1f} "
              f"(min {min(runtime):.1f}, max {max(runtime):.1f}; switched in {statistics.median(slices):.0f} times); "
              f"main thread {statistics.median(main_thread):.1f}")


if __name__ == "__main__":
    main()
