"""Main-thread and whole-process CPU per :Mia prompt with telemetry export off and on
(issue 18), against the scenario server and ddapm-test-agent. Usage: .venv/bin/python
benches/telemetry_cpu.py [N]. CPU is read from /proc in clock ticks (10 ms), so use N >= 40."""
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "functional"))
from conftest import Editor, ScenarioServer, scenario_setup  # noqa: E402
from test_telemetry import OtlpReceiver  # noqa: E402

HZ = os.sysconf("SC_CLK_TCK")
def cpu(pid, tid=None):
    p = f"/proc/{pid}/task/{tid}/stat" if tid else f"/proc/{pid}/stat"
    f = open(p).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / HZ * 1000  # utime+stime ms

N = int(sys.argv[1]) if len(sys.argv) > 1 else 30
server = ScenarioServer()
tmp = Path(tempfile.mkdtemp())
agent = OtlpReceiver(tmp)
results = {}
for label in ["off", "on", "off2", "on2"]:
    tel = {"otlp": {"endpoint": f"http://127.0.0.1:{agent.otlp}", "interval_ms": 1000}} if label.startswith("on") else None
    opts = scenario_setup(server, pricing={"scn/echo": {"input": 3.0, "output": 15.0}})
    if tel: opts["telemetry"] = tel
    ed = Editor(tmp / label, setup=opts)
    ed.nvim.command("Mia prompt echo warm")
    ed.wait("require('mia.chat').state() == 'done'")
    m0, t0 = cpu(ed.pid, ed.pid), cpu(ed.pid)
    for i in range(N):
        ed.nvim.command(f"Mia prompt echo number {i}")
        ed.wait("require('mia.chat').state() == 'done'")
    m1, t1 = cpu(ed.pid, ed.pid), cpu(ed.pid)
    results[label] = ((m1 - m0) / N, (t1 - t0) / N)
    print(label, "main-thread ms/request %.2f, whole process ms/request %.2f" % results[label], flush=True)
    ed.close()
agent.stop()
server.stop()
