#!/usr/bin/env python3
"""One very long line streamed into the chat (200,000 tokens in one 1.4 MB
line, 20,000 a second), in the same TUI set-up as stream_bench.py: mia,
and the floor (the same text written by a timer into the chat window, one
change per 33 ms frame, no client). Each frame redraws the line it grows,
and Neovim measures a wrapped line from its start every time, so a frame
costs in proportion to the line.

Reported for each, side by side in one run:
  - the main thread's CPU share over each quarter of the stream and over
    the whole of it (from /proc/<pid>/task/<pid>/schedstat);
  - the RPC round trip to Neovim, sent every 10 ms from the start to 1 s
    after the end (what a key waits for): p50, p99, max, and when the
    slowest came;
  - the buffer changes of the long line, and whether all of its text
    arrived.

    .venv/bin/python benches/long_line.py [--lib PATH] [--tokens 200000] [--rate 20000]

Numbers go in closing notes; no test asserts them.
"""

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stream_bench as sb  # noqa: E402  (the TUI, server and CPU readers)


def run(tui, client, n, rate):
    """Streams the line with `client` ("mia" or "floor"); the figures."""
    tui.lua("bench.start_mia('echo warm')")
    while not tui.lua("return bench.mia_done()"):
        time.sleep(0.05)
    time.sleep(0.5)
    t0 = time.monotonic()
    c0 = sb.task_cpu_ns(tui.pid, tui.pid)
    tui.lua(f"bench.start_{client}('slow {n} {rate}')")
    probes, cpu = [], [(t0, c0)]
    done_at = None
    while True:
        r0 = time.monotonic()
        done = tui.lua(f"return bench.{client}_done()")
        r1 = time.monotonic()
        probes.append(((r1 - r0) * 1e3, r0 - t0))
        cpu.append((r1, sb.task_cpu_ns(tui.pid, tui.pid)))
        if done and done_at is None:
            done_at = r1
        if done_at and r1 - done_at > 1.0:
            break
        if r1 - t0 > 120:
            raise RuntimeError(f"{client}: no end after 120 s")
        time.sleep(0.01)
    # CPU share by quarter of the stream (command to the end of the text).
    span = done_at - t0
    quarters = []
    for q in range(4):
        a, b = t0 + span * q / 4, t0 + span * (q + 1) / 4
        inside = [(t, c) for t, c in cpu if a <= t <= b]
        if len(inside) >= 2:
            (ta, ca), (tb, cb) = inside[0], inside[-1]
            quarters.append(100 * (cb - ca) / 1e9 / (tb - ta))
    end_cpu = max(c for t, c in cpu if t <= done_at)
    rtts = sorted(p[0] for p in probes)
    worst = max(probes)
    line = tui.lua("""
      local buf = require('mia.chat').buffer()
      local longest = 0
      for _, l in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, true)) do longest = math.max(longest, #l) end
      return longest
    """)
    changes = tui.lua("return #bench.t")  # the chat's buffer changes (bench_init.lua's record)
    return {
        "stream_s": span,
        "cpu_pct_quarters": quarters,
        "cpu_pct": 100 * (end_cpu - c0) / 1e9 / span,
        "rtt_p50_ms": rtts[len(rtts) // 2],
        "rtt_p99_ms": rtts[min(len(rtts) - 1, int(len(rtts) * 0.99))],
        "rtt_max_ms": worst[0],
        "rtt_max_at_s": worst[1],
        "probes": len(rtts),
        "buffer_changes": changes,
        "longest_line": line,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", type=Path, default=sb.ROOT / "target/release/libmia_core.so")
    ap.add_argument("--tokens", type=int, default=200_000)
    ap.add_argument("--rate", type=int, default=20_000)
    args = ap.parse_args()
    shutil.copy(args.lib, sb.LIB_SNAPSHOT)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            server = sb.Server(Path(tmp) / "sends.log")
            try:
                out = {}
                for client in ("mia", "floor"):
                    tui = sb.Tui(tmp, server.base_url)
                    try:
                        out[client] = run(tui, client, args.tokens, args.rate)
                    finally:
                        tui.close()
            finally:
                server.stop()
    finally:
        sb.LIB_SNAPSHOT.unlink(missing_ok=True)
    want = sum(len("w%05d " % i) for i in range(args.tokens))
    print(f"One {want / 1e6:.2f} MB line, {args.tokens} tokens at {args.rate}/s, TUI 160x45:")
    print("| client | stream | main-thread CPU | by quarter | RPC p50 | p99 | max (at) | buffer changes | all arrived |")
    print("|---|---|---|---|---|---|---|---|---|")
    for client, m in out.items():
        q = " / ".join(f"{v:.0f}" for v in m["cpu_pct_quarters"])
        print(f"| {client} | {m['stream_s']:.1f} s | {m['cpu_pct']:.1f}% | {q} % | {m['rtt_p50_ms']:.1f} ms | "
              f"{m['rtt_p99_ms']:.1f} ms | {m['rtt_max_ms']:.1f} ms ({m['rtt_max_at_s']:.1f} s) | "
              f"{m['buffer_changes']} | {'yes' if m['longest_line'] >= want else 'no: %d bytes' % m['longest_line']} |")


if __name__ == "__main__":
    main()
