"""OpenTelemetry export (issue 18, :h mia-telemetry) as a team sees it: a
real Neovim runs prompts against the scenario server with telemetry pointed
at an OTLP receiver nobody here wrote (Datadog's ddapm-test-agent, pinned in
requirements-test.txt), quits, and the test reads back what arrived."""

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import free_port, process_running, quit_editor as quit, scenario_setup

PRICE = {"input": 3.0, "output": 15.0}
AGENT = Path(sys.executable).parent / "ddapm-test-agent"
SECRET_HEADER = "team-token-0123456789"
PROMPT_WORDS = "confidential-roadmap-words"


class OtlpReceiver:
    """ddapm-test-agent on loopback: its APM API on one port; OTLP/HTTP, and
    the /test/session/{metrics,logs} read-back of what arrived, on another."""

    def __init__(self, tmp_path):
        self.port, self.otlp, self.grpc = free_port(), free_port(), free_port()
        self.log = open(tmp_path / "test-agent.log", "w")
        self.proc = subprocess.Popen(
            [str(AGENT), "--host", "127.0.0.1", "--port", str(self.port), "--otlp-http-port", str(self.otlp),
             "--otlp-grpc-port", str(self.grpc)],
            stdout=self.log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                self.get("/test/session/metrics")
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("ddapm-test-agent did not start: " + (tmp_path / "test-agent.log").read_text())
                time.sleep(0.1)

    def get(self, path):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.otlp}{path}", timeout=10) as r:
            return json.loads(r.read())

    def log_text(self):
        self.log.flush()
        return Path(self.log.name).read_text()

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


@pytest.fixture
def test_agent(tmp_path):
    if not AGENT.exists():
        pytest.skip("ddapm-test-agent is not installed in this venv: run scripts/bootstrap (requirements-test.txt)")
    a = OtlpReceiver(tmp_path)
    yield a
    a.stop()


def attrs(kvs):
    out = {}
    for kv in kvs or []:
        v = kv.get("value", {})
        out[kv["key"]] = next(iter(v.values()), None) if v else None
    return out


def prompt(ed, text):
    ed.nvim.command("Mia prompt " + text)
    ed.wait("require('mia.chat').state() == 'done'")


def telemetry_setup(server, endpoint, **extra):
    return scenario_setup(server, pricing={"scn/echo": PRICE}, telemetry={
        "otlp": {"endpoint": endpoint, "headers": {"x-team-token": SECRET_HEADER}, "interval_ms": 60000},
        **extra,
    })


def test_two_prompts_reach_an_independent_otlp_receiver_with_the_issue_names(editor_factory, server, test_agent,
                                                                              tmp_path):
    ed = editor_factory(env={"OTEL_RESOURCE_ATTRIBUTES": "team.id=payments,cost_center=cc-42"},
                        setup=telemetry_setup(server, f"http://127.0.0.1:{test_agent.otlp}", project="webshop"))
    prompt(ed, f"echo one {PROMPT_WORDS}")
    # Priced by the gateway (LiteLLM's header): the export says so.
    prompt(ed, "gateway header 0.25")
    data_dir = Path(ed.lua("return require('mia.config').get().data_dir"))
    # Quitting flushes what the interval has not sent yet.
    quit(ed)

    metrics = test_agent.get("/test/session/metrics")
    logs = test_agent.get("/test/session/logs")
    everything = json.dumps(metrics) + json.dumps(logs)
    assert PROMPT_WORDS not in everything, "prompt text was exported without log_prompts"
    assert SECRET_HEADER not in everything

    user_id = (data_dir / "telemetry-id").read_text().strip()
    seen = {}
    for req in metrics:
        for rm in req["resource_metrics"]:
            res = attrs(rm["resource"]["attributes"])
            assert res["team.id"] == "payments" and res["cost_center"] == "cc-42", res
            assert res["service.name"] == "mia"
            for sm in rm["scope_metrics"]:
                for m in sm["metrics"]:
                    data = m.get("sum") or m.get("histogram")
                    assert data is not None, m
                    assert data["aggregation_temporality"] == "AGGREGATION_TEMPORALITY_DELTA", m["name"]
                    seen.setdefault(m["name"], []).extend(data["data_points"])
                    for p in data["data_points"]:
                        a = attrs(p["attributes"])
                        assert a["user.id"] == user_id, a
                        assert a["model"] == "echo" and a["provider"] == "scn" and a["agent"] == "mia", a
                        assert a["mode"] == "ask" and a["project"] == "webshop", a
                        assert a["session.id"], a
    for name in ["mia.cost.usage", "mia.token.usage", "mia.session.count", "gen_ai.client.token.usage",
                 "gen_ai.client.operation.duration"]:
        assert name in seen, (name, sorted(seen))
    cost = sum(p["as_double"] for p in seen["mia.cost.usage"])
    assert cost > 0.25
    sources = {attrs(p["attributes"])["source"] for p in seen["mia.cost.usage"]}
    assert sources == {"local", "gateway"}, sources
    types = {attrs(p["attributes"])["type"] for p in seen["mia.token.usage"]}
    assert {"input", "output"} <= types, types
    genai = attrs(seen["gen_ai.client.token.usage"][0]["attributes"])
    assert genai["gen_ai.operation.name"] == "chat"
    assert genai["gen_ai.provider.name"] == "scn" and genai["gen_ai.request.model"] == "echo"
    assert genai["gen_ai.token.type"] in ("input", "output")

    events = []
    for req in logs:
        for rl in req["resource_logs"]:
            assert attrs(rl["resource"]["attributes"])["team.id"] == "payments"
            for sl in rl["scope_logs"]:
                for r in sl["log_records"]:
                    events.append((r.get("event_name"), attrs(r["attributes"])))
    requests = [a for n, a in events if n == "mia.api_request"]
    assert len(requests) == 2, events
    for a in requests:
        assert a["model"] == "echo" and a["provider"] == "scn" and a["status"] == "ok"
        assert float(a["cost_usd"]) > 0 and int(a["output_tokens"]) > 0 and "duration_ms" in a
        assert int(a["retries"]) == 0
    assert sorted((a["cost_source"], float(a["cost_usd"])) for a in requests)[0] == ("gateway", 0.25), requests
    assert sorted(a["cost_source"] for a in requests) == ["gateway", "local"], requests
    prompts = [a for n, a in events if n == "mia.user_prompt"]
    assert len(prompts) == 2 and all("prompt" not in a for a in prompts), prompts


def test_checkhealth_shows_the_last_export_and_never_a_header_value(editor_factory, server, test_agent):
    ed = editor_factory(setup=scenario_setup(server, telemetry={
        "otlp": {"endpoint": f"http://127.0.0.1:{test_agent.otlp}", "headers": {"x-team-token": SECRET_HEADER},
                 "interval_ms": 1000},
    }))
    prompt(ed, "echo health")
    ed.wait("(require('mia.core').get().telemetry_status() or {}).exports_ok > 0", 20000)
    ed.nvim.command("checkhealth mia")
    text = "\n".join(ed.nvim.current.buffer[:])
    section = text[text.index("telemetry (OpenTelemetry export)"):]
    assert f"to http://127.0.0.1:{test_agent.otlp}" in section, section
    assert "1 header(s)" in section and "last export:" in section, section
    assert SECRET_HEADER not in text


def quit_and_check_the_log_says_it_once(ed, tmp_path):
    """Quitting is not held up by a dead collector, which was logged once."""
    pid = ed.pid
    quit(ed)
    assert not process_running(pid)
    log = (tmp_path / "nvim" / "state" / "nvim" / "mia.log").read_text()
    assert "panicked" not in log
    assert log.count("telemetry: export failed") == 1, log


def test_a_dead_collector_never_holds_up_answers_or_quitting(editor_factory, server, tmp_path):
    dead = free_port()
    ed = editor_factory(setup=scenario_setup(server, telemetry={"otlp": {"endpoint": f"http://127.0.0.1:{dead}",
                                                                          "interval_ms": 1000}}))
    for i in range(3):
        prompt(ed, f"echo still answering {i}")
    ed.wait("(require('mia.core').get().telemetry_status() or {}).exports_failed > 0", 20000)
    st = ed.lua("return require('mia.core').get().telemetry_status()")
    assert st["enabled"] and st["last_ok"] is False and "connect" in st["last_result"], st
    ed.nvim.command("checkhealth mia")
    text = "\n".join(ed.nvim.current.buffer[:])
    assert "last export failed" in text, text
    quit_and_check_the_log_says_it_once(ed, tmp_path)


def test_a_bad_setting_is_refused_at_setup_with_the_option_named(editor_factory):
    ed = editor_factory()
    for bad, words in [
        ({"otlp": {"endpoint": "collector:4318"}}, "telemetry.otlp.endpoint"),
        ({"otlp": {"endpoint": "http://c:4318", "protocol": "http/json"}}, "telemetry.otlp.protocol"),
        ({"otlp": {"endpoint": "http://c:4318", "compression": "zstd"}}, "telemetry.otlp.compression"),
        ({"otlp": {"endpoint": "http://c:4318", "interval_ms": 10}}, "telemetry.otlp.interval_ms"),
        ({"log_prompt": True}, "telemetry.log_prompt"),
    ]:
        err = ed.lua("local ok, e = pcall(require('mia').setup, { telemetry = ... }) return e", bad)
        assert words in err, (bad, err)


def test_a_bad_otel_variable_is_told_once_and_mia_works_on(editor_factory, server):
    ed = editor_factory(env={"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}",
                             "OTEL_METRICS_EXPORTER": "prometheus"},
                        setup=scenario_setup(server))
    prompt(ed, "echo still fine")
    assert "echo still fine" in ed.chat_text()
    ed.wait("vim.api.nvim_exec2('messages', { output = true }).output:find('OTEL_METRICS_EXPORTER', 1, true) ~= nil")
    assert 'mia: OTEL_METRICS_EXPORTER must be "otlp" or "none" (got "prometheus")' in ed.messages(), ed.messages()
    assert ed.lua("return require('mia.core').get().telemetry_status()") is None


def test_the_standard_variables_alone_turn_export_on(editor_factory, server, test_agent):
    ed = editor_factory(env={"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{test_agent.otlp}",
                             "OTEL_METRICS_EXPORTER": "none"},
                        setup=scenario_setup(server))
    prompt(ed, "echo env only")
    st = ed.lua("return require('mia.core').get().telemetry_status()")
    assert st["enabled"] and "on: events to" in st["state"], st
    quit(ed)
    assert test_agent.get("/test/session/metrics") == []
    names = [r.get("event_name") for req in test_agent.get("/test/session/logs") for rl in req["resource_logs"]
             for sl in rl["scope_logs"] for r in sl["log_records"]]
    assert "mia.api_request" in names, names


def test_a_retried_request_and_a_failed_one_are_exported_with_the_chat_session(editor_factory, server, test_agent):
    ed = editor_factory(env={"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{test_agent.otlp}",
                             "OTEL_METRICS_EXPORTER": "none"},
                        setup=scenario_setup(server))
    # One 502, then the answer: a request retried once.
    prompt(ed, "fail5xx 1")
    assert "ok after 1" in ed.chat_text()
    # A 400 is not retried: the turn ends in an error.
    ed.nvim.command("Mia prompt http 400 refused here")
    ed.wait("require('mia.chat').state() == 'error'")
    sid = ed.lua("return require('mia.chat').session_id()")
    quit(ed)
    events = [(r.get("event_name"), attrs(r["attributes"])) for req in test_agent.get("/test/session/logs")
              for rl in req["resource_logs"] for sl in rl["scope_logs"] for r in sl["log_records"]]
    requests = [a for n, a in events if n == "mia.api_request"]
    assert [int(a["retries"]) for a in requests] == [1], events
    errors = [a for n, a in events if n == "mia.api_error"]
    assert len(errors) == 1, events
    assert errors[0]["session.id"] == sid and errors[0]["class"] == "invalid_request", errors
    assert int(errors[0]["status_code"]) == 400, errors


def received(test_agent):
    """Metric names and (event name, attributes) pairs that arrived."""
    names = {m["name"] for req in test_agent.get("/test/session/metrics") for rm in req["resource_metrics"]
             for sm in rm["scope_metrics"] for m in sm["metrics"]}
    events = [(r.get("event_name"), attrs(r["attributes"])) for req in test_agent.get("/test/session/logs")
              for rl in req["resource_logs"] for sl in rl["scope_logs"] for r in sl["log_records"]]
    return names, events


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_grpc_export_reaches_the_receivers_grpc_port(editor_factory, server, test_agent, compression):
    ed = editor_factory(env={"OTEL_RESOURCE_ATTRIBUTES": "team.id=payments"},
                        setup=scenario_setup(server, pricing={"scn/echo": PRICE}, telemetry={"otlp": {
                            "endpoint": f"http://127.0.0.1:{test_agent.grpc}", "protocol": "grpc",
                            "compression": compression, "headers": {"x-team-token": SECRET_HEADER},
                            "interval_ms": 60000}}))
    prompt(ed, f"echo over grpc {PROMPT_WORDS}")
    prompt(ed, "gateway usage 0.5")
    st = ed.lua("return require('mia.core').get().telemetry_status()")
    gz = ", gzip" if compression == "gzip" else ""
    assert f"to http://127.0.0.1:{test_agent.grpc} (grpc{gz})" in st["state"], st
    quit(ed)
    names, events = received(test_agent)
    for name in ["mia.cost.usage", "mia.token.usage", "mia.session.count", "gen_ai.client.token.usage"]:
        assert name in names, (name, sorted(names))
    requests = [a for n, a in events if n == "mia.api_request"]
    assert sorted(a["cost_source"] for a in requests) == ["gateway", "local"], events
    assert all(a["model"] == "echo" and a["provider"] == "scn" for a in requests), requests
    everything = json.dumps(test_agent.get("/test/session/metrics")) + json.dumps(test_agent.get("/test/session/logs"))
    assert PROMPT_WORDS not in everything and SECRET_HEADER not in everything
    # It came over gRPC: the agent hands what its gRPC server receives to
    # its own HTTP handler (aiohttp's user agent); mia's OTLP/HTTP exporter
    # never posted.
    posts = [line for line in test_agent.log_text().splitlines() if '"POST /v1/' in line]
    assert posts and all("aiohttp" in line for line in posts), posts


def test_a_grpc_collector_that_is_down_is_told_once_and_quitting_is_not_held_up(editor_factory, server, tmp_path):
    dead = free_port()
    ed = editor_factory(setup=scenario_setup(server, telemetry={"otlp": {
        "endpoint": f"http://127.0.0.1:{dead}", "protocol": "grpc", "interval_ms": 1000}}))
    for i in range(2):
        prompt(ed, f"echo still answering {i}")
    ed.wait("(require('mia.core').get().telemetry_status() or {}).exports_failed > 0", 20000)
    st = ed.lua("return require('mia.core').get().telemetry_status()")
    assert st["last_ok"] is False and "connect" in st["last_result"], st
    assert st["backlog"] > 0, st
    quit_and_check_the_log_says_it_once(ed, tmp_path)


def test_each_signals_own_endpoint_variable_and_gzip_are_honoured(editor_factory, server, test_agent):
    base = f"http://127.0.0.1:{test_agent.otlp}"
    ed = editor_factory(env={"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": base + "/v1/metrics",
                             "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": base + "/v1/logs",
                             "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"},
                        setup=scenario_setup(server))
    prompt(ed, "echo per signal")
    st = ed.lua("return require('mia.core').get().telemetry_status()")
    assert st["enabled"] and f"metrics and events to {base} (http/protobuf, gzip)" in st["state"], st
    quit(ed)
    names, events = received(test_agent)
    assert "mia.token.usage" in names, names
    assert "mia.api_request" in [n for n, _ in events], events
