"""@-mentions, in a real headless Neovim with mia:

1. `@path` completion in a 100,000-file git repository (generated under
   /tmp, reused when it exists): the time from typing `@` to the menu
   showing, then to the menu holding the repository's files; and the
   keystroke latency while the file list is gathered: a timer types one
   character into the prompt every 10 ms, and each key's latency is the time
   from the timer's `nvim_input` to the `TextChangedI`/`TextChangedP` it
   causes, including the completion refresh that key triggers. Headless
   Neovim has no screen: the text change (and the completion refresh run
   from it) stands for "on screen"; a redraw would come after it in the
   same loop iteration.
2. Tokens saved by diffs over a 10-turn session that edits one file: the
   bytes/4 of the request bodies (every turn's request carries the whole
   history), as sent (with diffs), and with every mention's block replaced
   by the whole file it stood for (without diffs), from the same run.

Run: .venv/bin/python benches/mentions.py   (needs target/release/libmia_core.so)
"""

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "functional"))

from conftest import Editor, ScenarioServer, scenario_setup  # noqa: E402

REPO = Path("/tmp/mia-bench-100k")
N_FILES = 100_000


def make_repo():
    marker = REPO / ".mia-bench-done"
    if marker.exists():
        return
    REPO.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(REPO)], check=True)
    for i in range(N_FILES):
        d = REPO / f"pkg{i // 1000:03d}" / f"mod{(i // 100) % 10}"
        if i % 100 == 0:
            d.mkdir(parents=True, exist_ok=True)
        (d / f"file_{i:06d}.rs").touch()
    subprocess.run(["git", "-C", str(REPO), "add", "-A"], check=True)
    marker.touch()


MEASURE = r"""
local t = { }
_G.bench = t
local function now() return vim.uv.hrtime() / 1e6 end
vim.api.nvim_create_autocmd('CompleteChanged', { callback = function()
  if not t.menu then t.menu = now() end
  local items = vim.fn.complete_info({ 'items' }).items
  if not t.files then
    for _, i in ipairs(items) do
      if i.word:find('^@pkg') then t.files = now() break end
    end
  end
  if t.typed and items[1] and items[1].word:find('^@pkg042/mod3/file_04') then t.final = t.final or now() end
end })
t.start = now()
vim.api.nvim_input('i@')
"""

TYPER = r"""
local t = _G.bench
local function now() return vim.uv.hrtime() / 1e6 end
vim.api.nvim_create_autocmd({ 'TextChangedI', 'TextChangedP' }, { callback = function()
  local sent = table.remove(t.pending, 1)
  if sent then t.lat[#t.lat + 1] = now() - sent end
end })
function t.type(text)
  t.lat, t.pending, t.typed, t.final = {}, {}, false, nil
  local keys = vim.split(text, '')
  local i = 0
  t.timer = vim.uv.new_timer()
  t.timer:start(10, 10, vim.schedule_wrap(function()
    if t.typed then return end -- callbacks queued before the timer stopped
    i = i + 1
    if i > #keys then t.timer:stop(); t.timer:close(); t.typed = true; return end
    t.last_key = now()
    t.pending[#t.pending + 1] = t.last_key
    vim.api.nvim_input(keys[i])
  end))
end
"""


def poll(ed, condition, timeout_s=20):
    print("waiting for", condition, flush=True)
    """Waits from outside: `vim.wait` would hold back typed keys, which Neovim handles only between events."""
    end = time.time() + timeout_s
    while time.time() < end:
        if ed.lua(f"return {condition}"):
            return
        time.sleep(0.02)
    state = ed.lua("return { typed = bench.typed, pending = #(bench.pending or {}), lat = #(bench.lat or {}), "
                   "mode = vim.fn.mode(), line = vim.api.nvim_get_current_line() }")
    raise AssertionError(f"timed out waiting for: {condition} ({state})")


def completion_latency(server, tmp):
    ed = Editor(Path(tmp) / "ed1", setup=scenario_setup(server))
    try:
        ed.lua("vim.cmd.cd(...)", str(REPO))
        ed.nvim.command("Mia open")
        ed.lua(MEASURE)
        # type while the 100k list is being gathered (the first `@` starts it)
        ed.lua(TYPER)
        ed.lua("bench.type(...)", "pkg042mod3file_04")
        poll(ed, "bench.typed == true and #bench.pending == 0")
        poll(ed, "bench.files ~= nil")
        b = ed.lua("return { start = bench.start, menu = bench.menu, files = bench.files, lat = bench.lat }")
        # a second `@` once the list is cached
        ed.nvim.input("<C-e><Esc>")
        poll(ed, "vim.fn.mode() == 'n'")
        ed.lua("bench.menu, bench.files = nil, nil; vim.api.nvim_buf_set_lines(0, 0, -1, false, {}); "
               "bench.start = vim.uv.hrtime() / 1e6; vim.api.nvim_input('A@')")
        poll(ed, "bench.files ~= nil")
        warm = ed.lua("return bench.files - bench.start")
        ed.lua("bench.type(...)", "pkg042mod3file_04")
        poll(ed, "bench.typed == true and #bench.pending == 0")
        warm_lat = ed.lua("return bench.lat")
        poll(ed, "bench.final ~= nil")
        settle = ed.lua("return bench.final - bench.last_key")
        print(f"last key -> menu shows the best match for the typed path (100k, sliced fuzzy): {settle:.1f} ms")
        return b, warm, warm_lat
    finally:
        ed.close()


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


BLOCK = re.compile(r'<file path="src/edited\.txt"[^>]*>.*?</file>', re.S)


def diff_savings(server, tmp):
    project = Path(tmp) / "proj"
    (project / "src").mkdir(parents=True)
    target = project / "src" / "edited.txt"
    lines = [f"let value_{i} = compute({i}); // line {i} of a 300-line file" for i in range(300)]
    ed = Editor(Path(tmp) / "ed2", setup=scenario_setup(server))
    versions = []
    try:
        ed.lua("vim.cmd.cd(...)", str(project))
        for turn in range(10):
            if turn:
                lines[turn * 29] = f"let value_{turn} = changed({turn}); // edited at turn {turn + 1}"
            text = "\n".join(lines) + "\n"
            target.write_text(text)
            versions.append(text)
            ed.nvim.command(f"Mia prompt long 3 @src/edited.txt turn {turn + 1}")
            ed.wait("require('mia.chat').state() == 'done'")
    finally:
        ed.close()
    bodies = [r["body"] for r in server.requests() if r["method"] == "POST" and r["body"]][-10:]
    # (with, without) for whole bodies and for the user messages alone: the
    # echo scenario answers with the user's text, so its answers carry the
    # blocks again; a real model's would not.
    body_with = body_without = user_with = user_without = 0
    for body in bodies:
        raw = json.dumps(body)
        body_with += len(raw)
        extra = 0
        k = -1
        for m in body["messages"]:
            if m["role"] == "user":
                k += 1
            content = m.get("content") or ""
            if not isinstance(content, str):
                content = "".join(p.get("text", "") for p in content)
            saved = 0
            for block in BLOCK.findall(content):
                whole = f'<file path="src/edited.txt" lines="300">\n{versions[k]}</file>'
                saved += len(json.dumps(whole)) - len(json.dumps(block))
            extra += saved
            if m["role"] == "user":
                user_with += len(json.dumps(content))
                user_without += len(json.dumps(content)) + saved
        body_without += len(raw) + extra
    return (body_with, body_without), (user_with, user_without)


def main():
    t0 = time.time()
    make_repo()
    print(f"repository: {N_FILES} files in {REPO} (ready in {time.time() - t0:.1f} s)")
    server = ScenarioServer()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            b, warm, warm_lat = completion_latency(server, tmp)
            print(f"@ -> menu shown (cold, list not gathered yet): {b['menu'] - b['start']:.1f} ms")
            print(f"@ -> menu holds the repository's files (cold, git ls-files of 100k): {b['files'] - b['start']:.1f} ms")
            print(f"@ -> menu holds the files (warm, list cached): {warm:.1f} ms")
            lat = b["lat"]
            print(f"keystroke latency while the list is gathered ({len(lat)} keys, one per 10 ms): "
                  f"median {statistics.median(lat):.1f} ms, p95 {pct(lat, 95):.1f} ms, max {max(lat):.1f} ms")
            print(f"keystroke latency with the list cached, fuzzy over 100k each key ({len(warm_lat)} keys): "
                  f"median {statistics.median(warm_lat):.1f} ms, p95 {pct(warm_lat, 95):.1f} ms, max {max(warm_lat):.1f} ms")
        with tempfile.TemporaryDirectory() as tmp:
            for what, (w, wo) in zip(("request bodies (echo answers included)", "user messages of the bodies"),
                                     diff_savings(server, tmp)):
                print(f"10-turn session editing one 300-line file, {what}: {w} bytes with diffs, {wo} without; "
                      f"tokens (bytes/4) {w // 4} vs {wo // 4}: {(wo - w) // 4} saved ({100 * (wo - w) / wo:.0f}%)")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
