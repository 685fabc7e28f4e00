"""Main-thread time of turning OpenTelemetry export on (issue 18): the first
command's core start (`_core()`, which configures export) with export off
and on, and a second setup() while export is on (it replaces the exporter).
Side by side in one run, against ddapm-test-agent. Usage:
.venv/bin/python benches/telemetry_setup.py [runs]"""
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "functional"))
from conftest import Editor, ScenarioServer, scenario_setup  # noqa: E402
from test_telemetry import OtlpReceiver  # noqa: E402

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 7
# For a build without gRPC (or an older mia): MIA_BENCH_NO_GRPC=1.
GRPC = os.environ.get("MIA_BENCH_NO_GRPC") != "1"
server = ScenarioServer()
tmp = Path(tempfile.mkdtemp())
agent = OtlpReceiver(tmp)
rows = {k: [] for k in ["core start, export off", "core start, export on (http/protobuf)",
                        "core start, export on (grpc)", "setup() again, export on"]}
TIME = "local a = vim.uv.hrtime(); %s; return (vim.uv.hrtime() - a) / 1e6"
for i in range(RUNS):
    for label, tel in [("off", None),
                       ("http", {"otlp": {"endpoint": f"http://127.0.0.1:{agent.otlp}", "interval_ms": 1000}}),
                       ("grpc", {"otlp": {"endpoint": f"http://127.0.0.1:{getattr(agent, 'grpc', 0)}", "protocol": "grpc",
                                          "interval_ms": 1000}})][:3 if GRPC else 2]:
        opts = scenario_setup(server)
        if tel:
            opts["telemetry"] = tel
        ed = Editor(tmp / f"{label}{i}", setup=opts)
        ms = ed.lua(TIME % "require('mia')._core()")
        key = {"off": "core start, export off", "http": "core start, export on (http/protobuf)",
               "grpc": "core start, export on (grpc)"}[label]
        rows[key].append(ms)
        if label == "http":
            ed.nvim.command("Mia prompt echo one")
            ed.wait("require('mia.chat').state() == 'done'")
            # Metrics are pending in the exporter being replaced.
            rows["setup() again, export on"].append(ed.lua(TIME % "require('mia').setup(...)", opts))
        ed.close()
for k, v in rows.items():
    if not v:
        continue
    print(f"{k:42} median {statistics.median(v):6.2f} ms  (min {min(v):.2f}, max {max(v):.2f}, n={len(v)})")
agent.stop()
server.stop()
