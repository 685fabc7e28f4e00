#!/usr/bin/env python3
"""Streaming benchmark: mia against the way today's Lua plugins stream, side
by side in one run, in a real Neovim TUI (inside tmux) talking to the
scenario server over loopback.

For each scenario (a 5000-token burst, 1 kHz for 1 s, 50 Hz for 4 s) and each
client (mia's `:Mia prompt`; the same with Vim's full markdown syntax in the
chat; a curl subprocess with one scheduled Lua decode and buffer write per SSE
line into a markdown buffer; the floor: the same text written into the chat
window by a timer with bare nvim_buf_set_text at mia's frame rate, no client,
no server) it reports medians over --runs runs of:
  - wall time from the command to the final text in the buffer,
  - CPU time of Neovim's main thread (from /proc/<pid>/task/<pid>/schedstat),
    and of the TUI client process,
  - p50/p99 latency from the server's send of a token to its bytes in the
    buffer (server and Neovim both read CLOCK_MONOTONIC), and the time from
    the command to the first text. In the burst the server writes tokens in
    batches and logs after each batch is flushed, so its per-token latency
    can read below zero there; the paced scenarios write one token at a time,
  - the longest gap between two buffer changes while the text streams,
  - mia's own work per frame on the main thread (bench_init.lua's
    time_frames): the core's drain, the dispatch (callbacks, the chat's
    renderer) and the write (the writer's one nvim_buf_set_text), median µs
    for frames of plain answer text and for the others (a live cost update
    beside the text, the header, the end), and their sum over the stream;
    the floor's frame is its bare write. Unlike the whole thread's CPU, which
    moves with the machine's load by several ms between runs, these say
    which part of a frame a change moved.
Then typing: one key every 10 ms into another window (insert mode) while
each client streams at 1 kHz, and with nothing streaming; the latency from
the key's send (over RPC, as the TUI sends it) to the end of the redraw that
shows it (a decoration provider's on_end), p50/p99/max over every key.
With --against OTHER_LIB, every stream also runs through a second TUI that
loaded OTHER_LIB ("mia_against"), taking turns with the others, so two
builds compare side by side in one run; each stream also reports the whole
Neovim process's CPU (the main thread and mia's runtime threads). The
second TUI's main thread reads higher for the same work: with the same
library on both sides (--against the --lib itself), 88.8 ms against 60.7
at 50 Hz, per-frame work and the other threads alike. So compare the two
sides by their frames' work and their other threads, or against such an
A/A run, not by the main thread's total.
Then: the first turn in a fresh Neovim (`:Mia prompt` to the answer's end),
idle CPU for 10 s with and without mia loaded, the time setup() adds
to startup, the .so size, and (with --build-time) a clean release build.

    .venv/bin/python benches/stream_bench.py [--runs 5] [--build-time] [--json out.json] [--lib PATH]
        [--first-turn-only] [--first-turn-runs 15] [--against OTHER_LIB]

Numbers go in closing notes; no test asserts them.
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

import pynvim

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = [
    ("5000-token burst", "long 5000", 5000),
    ("1 kHz for 1 s", "slow 1000 1000", 1000),
    ("50 Hz for 4 s (200 tokens)", "slow 200 50", 200),
]
# mia as configured (lean chat syntax), mia with Vim's full markdown syntax
# in the chat, the curl baseline (a markdown buffer, as plugins use), and the
# floor: no client at all, the same text written into the chat window with
# bare nvim_buf_set_text at mia's frame rate, the part of mia's main-thread
# time that is Neovim's own work per frame.
CLIENTS = ("mia", "mia_md", "curl", "floor")
TYPING_PROMPT = "slow 1000 1000"
TYPING_KEYS = 100
TYPING_EVERY_S = 0.010
TOKEN_BYTES = 7
# The library is copied once at start, so edits and rebuilds during a run
# neither trip the loader's staleness check nor change what is measured.
LIB_SNAPSHOT = Path(tempfile.gettempdir()) / f"mia-bench-{os.getpid()}-libmia_core.so"
# --against's library, copied the same way.
AGAINST_SNAPSHOT = Path(tempfile.gettempdir()) / f"mia-bench-{os.getpid()}-against-libmia_core.so"


def nvim_binary():
    for c in (os.environ.get("MIA_NVIM"), str(ROOT / ".venv/bin/nvim"), shutil.which("nvim")):
        if c and Path(c).exists():
            return c
    sys.exit("no Neovim: run scripts/bootstrap")


def task_cpu_ns(pid, tid):
    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
        return int(f.read().split()[0])


def threads_cpu_ns(pid):
    """Each thread's CPU time by thread id, in ns (schedstat: finer than
    /proc/<pid>/stat's 10 ms ticks, which a 4 s stream's ~100 ms would
    round by a tenth)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out[tid] = task_cpu_ns(pid, tid)
        except (FileNotFoundError, ProcessLookupError):
            pass  # it ended between the listing and the read
    return out


def threads_cpu_delta_ns(before, after):
    """The CPU the process's threads spent between two threads_cpu_ns();
    a thread that ended in between counts with what it had at the start
    (nothing of what it did afterwards, so a lower bound), a new one from 0."""
    return sum(after.get(t, before.get(t, 0)) - before.get(t, 0) for t in set(before) | set(after))


def process_cpu_ns(pid):
    """utime + stime of the whole process, threads that already exited
    included (summing live threads' schedstat would drop those)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    return ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


class Server:
    def __init__(self, log):
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "scripts/scenario_server.py"), "--log-sends", str(log)],
            stdout=subprocess.PIPE, text=True)
        self.port = int(self.proc.stdout.readline().split()[1])
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def sends(self):
        """{seq: {token_index: send_ns}} from the send log (read on from
        where the last call stopped: polling it stays cheap)."""
        if not hasattr(self, "_sends"):
            self._sends, self._pos = {}, 0
        if self.log.exists():
            with open(self.log, "rb") as f:
                f.seek(self._pos)
                data = f.read()
            end = data.rfind(b"\n") + 1
            self._pos += end
            for line in data[:end].decode().splitlines():
                seq, idx, ns = map(int, line.split())
                self._sends.setdefault(seq, {})[idx] = ns
        return self._sends

    def last_seq(self):
        return max(self.sends(), default=None)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


class Tui:
    """Neovim's TUI in a detached tmux pane, driven over its --listen socket."""

    def __init__(self, tmp, base_url, with_mia=True, loader=False, in_tree=False, lib=None):
        self.sock = str(Path(tmp) / f"nvim-{time.monotonic_ns()}.sock")
        # One tmux server per TUI: --against's streams run in a second TUI
        # beside the first.
        self.tmux = ["tmux", "-L", f"miabench-{os.getpid()}-{time.monotonic_ns()}"]
        env = {
            "MIA_BENCH_ROOT": str(ROOT), "MIA_BENCH_BASE_URL": base_url, "MIA_CORE_PATH": str(LIB_SNAPSHOT),
            "XDG_STATE_HOME": str(Path(tmp) / "state"), "XDG_DATA_HOME": str(Path(tmp) / "data"),
            "XDG_CACHE_HOME": str(Path(tmp) / "cache"),
        }
        if not with_mia:
            env["MIA_BENCH_NO_MIA"] = "1"
        if loader:
            env["MIA_BENCH_LOADER"] = "1"
        if in_tree:  # the library where users have it, checked against its sources on load
            env["MIA_CORE_PATH"] = ""
        elif lib:
            env["MIA_CORE_PATH"] = str(lib)
        envs = " ".join(f"{k}={v}" for k, v in env.items())
        cmd = f"env {envs} {nvim_binary()} --clean -u {ROOT / 'benches/bench_init.lua'} --listen {self.sock}"
        subprocess.run(self.tmux + ["kill-server"], stderr=subprocess.DEVNULL)
        subprocess.run(self.tmux + ["new-session", "-d", "-x", "160", "-y", "45", cmd], check=True)
        for _ in range(500):
            if Path(self.sock).exists():
                break
            time.sleep(0.01)
        for attempt in range(50):  # the socket file appears before Neovim accepts on it
            try:
                self.nvim = pynvim.attach("socket", path=self.sock)
                break
            except ConnectionRefusedError:
                if attempt == 49:
                    raise
                time.sleep(0.02)
        self.pid = self.nvim.call("getpid")
        # The TUI client is the pane's process; the server (pid above) is its child.
        pane = subprocess.run(self.tmux + ["list-panes", "-F", "#{pane_pid}"], capture_output=True, text=True, check=True)
        self.tui_pid = int(pane.stdout.split()[0])

    def lua(self, code, *args):
        return self.nvim.exec_lua(code, *args)

    def poll(self, expr, what):
        """The value of the Lua expression `expr`; RuntimeError naming `what`
        once Neovim has reported an error (v:errmsg, e.g. a scheduled
        callback's), whose run cannot be trusted. bench_init.lua turns the
        hit-enter prompt off: while it showed, Neovim answered no request
        and the bench waited for its deadline."""
        got = self.lua(f"return {{ value = {expr}, err = vim.v.errmsg }}")
        if got["err"]:
            raise RuntimeError(f"{what}: Neovim reported an error: {got['err']}")
        return got.get("value")

    def close(self):
        try:
            self.nvim.command("qa!")
        except Exception:
            pass
        subprocess.run(self.tmux + ["kill-server"], stderr=subprocess.DEVNULL)


FRAME_PARTS = ("drain", "dispatch", "write")


def frame_costs(frames, client):
    """mia's own main-thread work per frame (bench_init.lua's time_frames):
    medians in µs of each part, for frames of plain answer text and for
    the others (a live cost update beside the text, the header, the end),
    and the three parts summed over the stream in ms. The floor has only
    its write (its bare nvim_buf_set_text); curl is not timed."""
    out = {}
    # A drain of mia's that lands during another client's run (the last
    # turn's summary) is not that client's.
    frames = [f for f in frames if f["who"] == ("floor" if client == "floor" else "mia")]
    for kind, want in (("text", True), ("other", False)):
        sel = [f for f in frames if f["text"] == want]
        out[f"frames_{kind}"] = len(sel) if client != "curl" else None
        for part in FRAME_PARTS:
            vals = [f[part] / 1e3 for f in sel]
            timed = vals and client != "curl" and (client != "floor" or part == "write")
            out[f"{kind}_{part}_us"] = statistics.median(vals) if timed else None
    out["frames_own_ms"] = sum(f[p] for f in frames for p in FRAME_PARTS) / 1e6 if client != "curl" else None
    return out


def wait_done(tui, server, client, prompt, n_tokens, seq_before):
    """Waits for `client`'s answer to end. Neovim is asked only once the
    server has sent the last token (the floor: once its tokens are due), so
    the wait adds next to nothing to the main thread it measures."""
    deadline = time.monotonic() + 120
    if client == "floor":
        time.sleep(n_tokens / floor_rate(prompt))
    else:
        while True:
            seq = server.last_seq()
            if seq is not None and seq != seq_before and len(server.sends()[seq]) >= n_tokens:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{client} {prompt}: the server sent no full answer in 120 s")
            time.sleep(0.05)
    while not tui.poll("bench.%s_done()" % client, f"{client} {prompt}"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{client} {prompt}: no end after 120 s")
        time.sleep(0.02)


def floor_rate(prompt):
    """Tokens a second of a scenario prompt ("slow N RATE"; a burst: all at once)."""
    words = prompt.split()
    return float(words[2]) if words[0] == "slow" else 1e9


def run_stream(tuis, server, client, prompt, n_tokens):
    # "mia_against": mia in the second TUI, which loaded --against's library.
    tui = tuis["against"] if client == "mia_against" else tuis["lib"]
    client = "mia" if client == "mia_against" else client
    seq_before = server.last_seq()
    tui.lua("bench.start_%s(...)" % client, prompt)
    main0, tui0, proc0 = task_cpu_ns(tui.pid, tui.pid), process_cpu_ns(tui.tui_pid), threads_cpu_ns(tui.pid)
    wait_done(tui, server, client, prompt, n_tokens, seq_before)
    time.sleep(0.3)  # let the final redraw finish before reading CPU
    main_ns = task_cpu_ns(tui.pid, tui.pid) - main0
    tui_ns = process_cpu_ns(tui.tui_pid) - tui0
    proc_ns = threads_cpu_delta_ns(proc0, threads_cpu_ns(tui.pid))
    res = tui.lua("return bench.result()")
    # Bytes of the answer itself: what was written before its first word
    # (the chat's prompt and header) is not a token.
    times, counts = res["t"], [c - res["offset"] for c in res["n"]]
    expected = n_tokens * TOKEN_BYTES
    if not counts or counts[-1] < expected:
        raise RuntimeError(f"{client} {prompt}: got {counts[-1] if counts else 0} of {expected} bytes")
    last = next(t for t, c in zip(times, counts) if c >= expected)
    end = times.index(last)
    gaps = [(times[k + 1] - times[k]) / 1e6 for k in range(end)]
    out = {
        "wall_ms": (last - res["t0"]) / 1e6,
        "main_cpu_ms": main_ns / 1e6,
        # The whole Neovim process: the main thread and mia's runtime threads.
        "process_cpu_ms": proc_ns / 1e6,
        "tui_cpu_ms": tui_ns / 1e6,
        "cmd_to_first_ms": (times[next(k for k, c in enumerate(counts) if c >= TOKEN_BYTES)] - res["t0"]) / 1e6,
        "buffer_changes": len(times),
        "max_gap_ms": max(gaps) if gaps else 0.0,
    }
    out.update(frame_costs(tui.lua("return bench.take_frames()"), client))
    if client == "floor":  # no server: no send-to-buffer latency
        return dict(out, first_token_ms=None, p50_ms=None, p99_ms=None)
    sends = server.sends()
    seq = max(sends)
    sent = sends[seq]
    lat = []
    j = 0
    for i in range(n_tokens):
        need = (i + 1) * TOKEN_BYTES
        while counts[j] < need:
            j += 1
        lat.append((times[j] - sent[i]) / 1e6)
    lat.sort()
    return dict(out, first_token_ms=lat_first(times, counts, sent), p50_ms=lat[len(lat) // 2],
                p99_ms=lat[min(len(lat) - 1, int(len(lat) * 0.99))])


def run_typing(tui, server, client):
    """Types one key every 10 ms into another window while `client` streams
    at 1 kHz (client None: nothing streams). Returns each key's latency
    from its send to the end of the first redraw after it landed."""
    tui.lua("bench.typing_start(...)", client, TYPING_PROMPT if client else None)
    tui.nvim.input("i")
    while tui.nvim.api.get_mode()["mode"] != "i":
        time.sleep(0.005)
    sends = []
    next_at = time.monotonic()
    for _ in range(TYPING_KEYS):
        next_at += TYPING_EVERY_S
        sends.append(time.monotonic_ns())
        tui.nvim.input("x")
        pause = next_at - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    if client:
        deadline = time.monotonic() + 120
        while not tui.poll("bench.%s_done()" % client, f"typing during {client}"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{client}: no end after 120 s")
            time.sleep(0.05)
    time.sleep(0.2)
    res = tui.lua("return bench.typing_result()")
    changes, counts, redraws = res["keys"], res["counts"], res["redraws"]
    if res["text"] != "x" * len(sends) or counts[-1] != len(sends):
        raise RuntimeError(f"typing: {res['text']!r} for {len(sends)} keys")
    out = []
    j = k = 0
    for i, send in enumerate(sends):
        while counts[k] < i + 1:  # the change that carried key i
            k += 1
        landed = changes[k]
        while j < len(redraws) and redraws[j] < landed:
            j += 1
        if j == len(redraws):
            raise RuntimeError("typing: a key landed with no redraw after it")
        out.append((redraws[j] - send) / 1e6)
    return out


def percentile(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(len(v) * p))]


def lat_first(times, counts, sent):
    j = next(k for k, c in enumerate(counts) if c >= TOKEN_BYTES)
    return (times[j] - sent[0]) / 1e6


def median_of(runs):
    """Each key's median over the runs that have a value for it (a burst
    may have no plain-text frame in one run), None when none has."""
    out = {}
    for k in runs[0]:
        vals = [r[k] for r in runs if r[k] is not None]
        out[k] = statistics.median(vals) if vals else None
    return out


def first_turn(tmp, base_url, loader=False, in_tree=False, lib=None):
    """One fresh Neovim: ms from its first `:Mia prompt` to the answer's end
    (library load, runtime start, store open and the first request). With
    `loader`, Neovim's bytecode cache is on (`vim.loader.enable()`,
    lazy.nvim's default). With `in_tree`, the library is target/release's,
    as a plugin manager's build leaves it, so its check against the sources
    it was built from counts (otherwise a copy named by $MIA_CORE_PATH,
    which skips that check). `lib` names another library to copy-load."""
    tui = Tui(tmp, base_url, loader=loader, in_tree=in_tree, lib=lib)
    try:
        tui.lua("bench.first_turn()")
        deadline = time.monotonic() + 30
        while (ms := tui.poll("bench.first_turn_ms", "first turn")) is None:
            if time.monotonic() > deadline:
                notices = tui.lua("return bench.notices")
                raise RuntimeError(f"first turn: no end after 30 s; mia said: {notices or 'nothing'}")
            time.sleep(0.02)
        return ms
    finally:
        tui.close()


FIRST_TURNS = {  # result key: first_turn()'s keywords
    "first_turn_ms": {},
    "first_turn_loader_ms": {"loader": True},
    "first_turn_in_tree_ms": {"in_tree": True},
    # --against: the same two copy-loaded variants with the other library.
    "first_turn_against_ms": {"lib": AGAINST_SNAPSHOT},
    "first_turn_loader_against_ms": {"loader": True, "lib": AGAINST_SNAPSHOT},
}


def first_turns(tmp, base_url, runs, variants):
    """Median first turn of each variant in `variants` (keys of FIRST_TURNS),
    the variants taking turns within each round so that drift hits all alike,
    and each round starting one variant later, so that none always runs in
    the same place (run last in every round, the in-tree variant measured
    1.8 ms slower than the copy run first; run first, as fast). The bytecode
    cache is filled first by an unmeasured run."""
    if "first_turn_loader_ms" in variants:
        first_turn(tmp, base_url, loader=True)
    if "first_turn_loader_against_ms" in variants:
        first_turn(tmp, base_url, loader=True, lib=AGAINST_SNAPSHOT)
    out = {v: [] for v in variants}
    for r in range(runs):
        for v in variants[r % len(variants):] + variants[:r % len(variants)]:
            out[v].append(first_turn(tmp, base_url, **FIRST_TURNS[v]))
    return {**{v: statistics.median(ms) for v, ms in out.items()}, "first_turn_runs": out}


def idle_cpu(tmp, base_url, with_mia, seconds=10):
    tui = Tui(tmp, base_url, with_mia)
    try:
        if with_mia:  # library loaded and runtime running: the real idle state
            tui.lua("bench.start_mia('echo warm up')")
            while not tui.lua("return bench.mia_done()"):
                time.sleep(0.05)
        time.sleep(1)
        m0, p0, t0 = task_cpu_ns(tui.pid, tui.pid), process_cpu_ns(tui.pid), process_cpu_ns(tui.tui_pid)
        time.sleep(seconds)
        m1, p1, t1 = task_cpu_ns(tui.pid, tui.pid), process_cpu_ns(tui.pid), process_cpu_ns(tui.tui_pid)
        return {"main_ms": (m1 - m0) / 1e6, "process_ms": (p1 - p0) / 1e6, "tui_ms": (t1 - t0) / 1e6}
    finally:
        tui.close()


def startup(tmp, runs=15):
    """Median --startuptime total and setup()'s own time, with and without setup()."""
    out = {}
    nvim = nvim_binary()
    for label, body in (
        ("plugin only", f"vim.opt.rtp:prepend('{ROOT}')"),
        ("plugin + setup()", f"vim.opt.rtp:prepend('{ROOT}')\n"
         "local t = vim.uv.hrtime(); require('mia').setup({ model = 'openai/gpt-4.1' })\n"
         "vim.g.mia_setup_ns = vim.uv.hrtime() - t"),
    ):
        init = Path(tmp) / f"init-{len(out)}.lua"
        init.write_text(body + "\nvim.api.nvim_create_autocmd('VimEnter', { callback = function() "
                        "io.open(vim.env.MIA_SETUP_OUT, 'w'):write(tostring(vim.g.mia_setup_ns or 0)); "
                        "vim.cmd('qa!') end })\n")
        totals, setups = [], []
        for _ in range(runs):
            log = Path(tmp) / "startup.log"
            log.unlink(missing_ok=True)
            env = dict(os.environ, MIA_SETUP_OUT=str(Path(tmp) / "setup_ns"))
            subprocess.run([nvim, "--headless", "--clean", "-u", str(init), "--startuptime", str(log)],
                           env=env, check=True, timeout=30)
            last = [l for l in log.read_text().splitlines() if "NVIM STARTED" in l][-1]
            totals.append(float(last.split()[0]))
            setups.append(int((Path(tmp) / "setup_ns").read_text()) / 1e6)
        out[label] = {"startup_ms": statistics.median(totals), "setup_ms": statistics.median(setups)}
    return out


def clean_build_seconds():
    """A clean release build of the committed code (HEAD), as a user's install does it."""
    with tempfile.TemporaryDirectory() as tree, tempfile.TemporaryDirectory() as target:
        archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
        t = time.monotonic()
        subprocess.run(["cargo", "build", "--release", "--locked"], cwd=tree, check=True,
                       env=dict(os.environ, CARGO_TARGET_DIR=target), stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        return time.monotonic() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--build-time", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--scenario", action="append", default=[],
                    help="run only the stream scenarios whose label contains this (repeatable), e.g. '50 Hz'")
    ap.add_argument("--lib", type=Path, default=ROOT / "target/release/libmia_core.so",
                    help="the library to measure (default: target/release's), e.g. one built with another profile")
    ap.add_argument("--streams-only", action="store_true",
                    help="skip typing, first turn, idle and startup (for iterating on one scenario)")
    ap.add_argument("--first-turn-only", action="store_true",
                    help="only the first turns, each run's value shown (for iterating on the first turn)")
    ap.add_argument("--against", type=Path,
                    help="another library whose first turns (copy and bytecode-cache variants) "
                         "take turns with --lib's in the same run, e.g. one built from the last commit")
    ap.add_argument("--first-turn-runs", type=int, default=15,
                    help="fresh Neovims per first-turn variant: their spread (10-17 ms on 2 cores) "
                         "needs more runs than a stream for a steady median")
    args = ap.parse_args()
    scenarios = [s for s in SCENARIOS if not args.scenario or any(f in s[0] for f in args.scenario)]
    if not scenarios:
        sys.exit(f"no scenario matches {args.scenario}: {[s[0] for s in SCENARIOS]}")
    if not shutil.which("tmux") or not shutil.which("curl"):
        sys.exit("the benchmark needs tmux and curl (apt-get install tmux curl)")
    shutil.copy(args.lib, LIB_SNAPSHOT)
    if args.against:
        shutil.copy(args.against, AGAINST_SNAPSHOT)
    # The copy's 20 MB, written back while a first turn runs, would slow the
    # store's one sync on opening.
    os.sync()
    results = {"streams": {}}
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(Path(tmp) / "sends.log")
        if args.first_turn_only:
            try:
                results.update(first_turns(tmp, server.base_url, args.first_turn_runs, first_turn_variants(args)))
            finally:
                server.stop()
            return finish(results, args)
        try:
            tui = Tui(tmp, server.base_url)
            tuis = {"lib": tui}
            clients = CLIENTS
            if args.against:  # the other library's mia, in its own TUI, taking turns with this one's
                tuis["against"] = Tui(tmp, server.base_url, lib=AGAINST_SNAPSHOT)
                clients = CLIENTS + ("mia_against",)
            try:
                for t in tuis.values():
                    t.lua("bench.start_mia('echo warm up')")
                    while not t.lua("return bench.mia_done()"):
                        time.sleep(0.05)
                tui.lua("bench.start_curl('echo warm up')")
                while not tui.lua("return bench.curl_done()"):
                    time.sleep(0.05)
                for label, prompt, n in scenarios:
                    per = {c: [] for c in clients}
                    for _ in range(args.runs):
                        for client in clients:  # interleaved: drift hits all alike
                            per[client].append(run_stream(tuis, server, client, prompt, n))
                    results["streams"][label] = {c: median_of(r) for c, r in per.items()}
                    print(f"{label}: done", file=sys.stderr)
                if args.streams_only:
                    return finish(results, args)
                typing = {c or "nothing streaming": [] for c in (None, *CLIENTS)}
                for _ in range(args.runs):
                    for client in (None, *CLIENTS):
                        typing[client or "nothing streaming"] += run_typing(tui, server, client)
                results["typing"] = {
                    c: {"keys": len(v), "p50_ms": percentile(v, 0.5), "p99_ms": percentile(v, 0.99), "max_ms": max(v)}
                    for c, v in typing.items()
                }
                print("typing: done", file=sys.stderr)
            finally:
                for t in tuis.values():
                    t.close()
            results.update(first_turns(tmp, server.base_url, args.first_turn_runs, first_turn_variants(args)))
            results["idle_10s"] = {
                "with mia": idle_cpu(tmp, server.base_url, True),
                "without mia": idle_cpu(tmp, server.base_url, False),
            }
        finally:
            server.stop()
        results["startup"] = startup(tmp)
    finish(results, args)


def first_turn_variants(args):
    """The in-tree variant only measures target/release's library."""
    variants = ["first_turn_ms", "first_turn_loader_ms"]
    if args.lib.resolve() == (ROOT / "target/release/libmia_core.so").resolve():
        variants.append("first_turn_in_tree_ms")
    if args.against:
        variants += ["first_turn_against_ms", "first_turn_loader_against_ms"]
    return variants


def finish(results, args):
    results["so_bytes"] = args.lib.stat().st_size
    if args.build_time:
        results["clean_release_build_s"] = clean_build_seconds()
    LIB_SNAPSHOT.unlink(missing_ok=True)
    AGAINST_SNAPSHOT.unlink(missing_ok=True)
    report(results, args.runs)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


def report_first_turns(r):
    print(f"First turn after start (fresh Neovim, `:Mia prompt` to the answer's end, median): "
          f"{r['first_turn_ms']:.1f} ms; with Neovim's bytecode cache (`vim.loader.enable()`, lazy.nvim's "
          f"default) warm: {r['first_turn_loader_ms']:.1f} ms")
    if "first_turn_in_tree_ms" in r:
        print(f"First turn with the library in the plugin's tree (checked against its sources on load, as users "
              f"have it; the above use a copy named by $MIA_CORE_PATH): {r['first_turn_in_tree_ms']:.1f} ms")
    if "first_turn_against_ms" in r:
        print(f"The same with --against's library: {r['first_turn_against_ms']:.1f} ms; bytecode cache warm: "
              f"{r['first_turn_loader_against_ms']:.1f} ms")
    for v, ms in r["first_turn_runs"].items():
        print(f"- {v}, each run: {', '.join(f'{x:.1f}' for x in ms)}")


def report(r, runs):
    if not r["streams"]:
        return report_first_turns(r)
    print(f"## Streaming (medians of {runs} runs; Neovim TUI in tmux; ms)\n")
    print("| scenario | client | wall | main-thread CPU | whole-process CPU | TUI CPU | command → first text | first token after send | p50 | p99 | buffer changes | longest gap |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    def ms(v):
        return "–" if v is None else f"{v:.2f}"

    for label, per in r["streams"].items():
        for client, m in per.items():
            print(f"| {label} | {client} | {m['wall_ms']:.1f} | {m['main_cpu_ms']:.1f} | {m['process_cpu_ms']:.1f} | "
                  f"{m['tui_cpu_ms']:.1f} | "
                  f"{m['cmd_to_first_ms']:.2f} | {ms(m['first_token_ms'])} | {ms(m['p50_ms'])} | {ms(m['p99_ms'])} | "
                  f"{m['buffer_changes']:.0f} | {m['max_gap_ms']:.1f} |")
        ratio = per["curl"]["main_cpu_ms"] / max(per["mia"]["main_cpu_ms"], 1e-9)
        print(f"| {label} | baseline ÷ mia main-thread CPU | {ratio:.1f}× | | | | | | | | | |")
        own = per["mia"]["main_cpu_ms"] - per["floor"]["main_cpu_ms"]
        print(f"| {label} | mia − floor: mia's own main-thread CPU | {own:.1f} | | | | | | | | | |")
        rt = per["mia"]["process_cpu_ms"] - per["mia"]["main_cpu_ms"]
        print(f"| {label} | mia: the other threads' CPU (whole process − main thread) | {rt:.1f} | | | | | | | | | |")
        if "mia_against" in per:
            rt = per["mia_against"]["process_cpu_ms"] - per["mia_against"]["main_cpu_ms"]
            print(f"| {label} | mia_against: the other threads' CPU | {rt:.1f} | | | | | | | | | |")
    print(f"\n## Per frame: mia's own work on the main thread (µs, medians of each run's median; "
          "the floor's frame is its bare write)\n")
    print("| scenario | client | text frames | drain | dispatch | write | other frames | drain | dispatch | write | "
          "all frames, ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")

    def us(v):
        return "–" if v is None else f"{v:.1f}"

    for label, per in r["streams"].items():
        for client, m in per.items():
            if m.get("frames_own_ms") is None:
                continue
            cells = [f"{m['frames_text']:.0f}"] + [us(m[f"text_{p}_us"]) for p in FRAME_PARTS]
            cells += [f"{m['frames_other']:.0f}"] + [us(m[f"other_{p}_us"]) for p in FRAME_PARTS]
            print(f"| {label} | {client} | {' | '.join(cells)} | {m['frames_own_ms']:.2f} |")
    if "typing" not in r:
        return
    print(f"\n## Typing one key every {TYPING_EVERY_S * 1000:.0f} ms in another window during a 1 kHz stream "
          "(send → end of the redraw showing it; ms)\n")
    print("| while | keys | p50 | p99 | max |")
    print("|---|---|---|---|---|")
    for c, m in r["typing"].items():
        print(f"| {c} | {m['keys']} | {m['p50_ms']:.2f} | {m['p99_ms']:.2f} | {m['max_ms']:.2f} |")
    print()
    report_first_turns(r)
    print("\n## Idle for 10 s (CPU ms)\n")
    for k, v in r["idle_10s"].items():
        print(f"- {k}: main thread {v['main_ms']:.2f}, whole server process {v['process_ms']:.2f}, TUI {v['tui_ms']:.2f}")
    print("\n## Startup (median)\n")
    for k, v in r["startup"].items():
        print(f"- {k}: --startuptime total {v['startup_ms']:.3f} ms; setup() itself {v['setup_ms']:.3f} ms")
    print(f"\n.so size: {r['so_bytes'] / 1e6:.2f} MB")
    if "clean_release_build_s" in r:
        print(f"clean release build: {r['clean_release_build_s']:.0f} s")


if __name__ == "__main__":
    main()
