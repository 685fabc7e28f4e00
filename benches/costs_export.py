"""How long `:Mia costs export csv` over a heavy history keeps Neovim's main
thread busy at a stretch (issue 18): a store with N usage rows (default
1,000,000), a 5 ms repeating timer in the exporting Neovim records how late
each tick fires, and the longest lateness is reported with the phase it fell
in (waiting for the rows, appending, after). Usage:
.venv/bin/python benches/costs_export.py [N]"""
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "functional"))
from conftest import Editor, ScenarioServer, scenario_setup  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
server = ScenarioServer()
tmp = Path(tempfile.mkdtemp())
data = tmp / "data"
env = {"XDG_DATA_HOME": str(data)}
opts = scenario_setup(server, pricing={"scn/echo": {"input": 3.0, "output": 15.0}})
ed = Editor(tmp / "seed", env=env, setup=opts)
ed.nvim.command("Mia prompt echo seed")
ed.wait("require('mia.chat').state() == 'done'")
ed.close()
db = data / "nvim" / "mia" / "mia.sqlite3"
with sqlite3.connect(db) as c:
    cols = [r[1] for r in c.execute("pragma table_info(usage)") if r[1] != "id"]
    row = c.execute(f"select {','.join(cols)} from usage limit 1").fetchone()
    at = cols.index("created_at_ms")
    t0 = row[at] - N * 1000
    c.executemany(
        f"insert into usage ({','.join(cols)}) values ({','.join('?' * len(cols))})",
        (row[:at] + (t0 + i * 1000,) + row[at + 1:] for i in range(N - 1)),
    )
print(f"store: {N} usage rows", flush=True)

ed = Editor(tmp / "export", env=env, setup=opts)
# The core is loaded first: its start-up is measured elsewhere (first turn).
ed.lua("""
require('mia')._core()
_G.lag = { max = 0, at = 0, phase = '', n = 0, over16 = 0 }
_G.phase = 'idle'
local t = vim.uv.new_timer()
local last = vim.uv.hrtime()
t:start(5, 5, function()
  local now = vim.uv.hrtime()
  local late = (now - last) / 1e6 - 5
  last = now
  lag.n = lag.n + 1
  if late > 16 then lag.over16 = lag.over16 + 1 end
  if late > lag.max then lag.max = late; lag.phase = _G.phase; lag.at = now end
end)
_G.lag_timer = t
""")
start = time.monotonic()
ed.lua("""
_G.phase = 'waiting for rows'
local set_lines = vim.api.nvim_buf_set_lines
vim.api.nvim_buf_set_lines = function(...)
  _G.phase = 'appending'
  return set_lines(...)
end
vim.cmd('Mia costs export csv')
""")
ed.wait("vim.b.mia_costs_export ~= nil and vim.b.mia_costs_export.done", timeout_ms=600000)
total = time.monotonic() - start
ed.lua("_G.phase = 'after'")
time.sleep(2)
lag = ed.lua("return _G.lag")
lines = ed.lua("return vim.api.nvim_buf_line_count(0)")
print(f"export of {N} rows: {total:.2f} s to fill {lines} lines; timer ticks {lag['n']}, "
      f"late > 16 ms: {lag['over16']}; longest lateness {lag['max']:.1f} ms while {lag['phase']}", flush=True)
ed.close()
server.stop()
