"""mia-acp, mia's own agent over the Agent Client Protocol, driven by the
official ACP SDK's client (0.17.x and 2.x, pinned in tests/acp) against the
scenario server as its model provider; plus its command line and config errors."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import mcp_http_server

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "target" / "release" / "mia-acp"
SCRIPT = ROOT / "tests" / "acp" / "mia_acp_client.mjs"
SDKS = {
    "0.17": ROOT / "tests" / "acp" / "node_modules" / "acp-sdk-0.17",
    "2": ROOT / "tests" / "acp" / "node_modules" / "acp-sdk-2",
}


def need_binary():
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing: run cargo build --release first")


def acp_config(tmp_path, server, **extra):
    cfg = {
        "model": "scn/echo",
        "providers": {"scn": {"kind": "openai_compatible", "base_url": server.base_url}},
        "retry": {"initial_delay_ms": 10, "multiplier": 2, "jitter": False, "max_retries": 2},
        "pricing": {"scn/echo": {"input": 1000, "output": 2000}},
        "data_dir": str(tmp_path / "data"),
        "log_file": str(tmp_path / "mia-acp.log"),
        "acp": {"list_page_size": 2},
    }
    cfg.update(extra)
    path = tmp_path / "mia-acp.json"
    path.write_text(json.dumps(cfg))
    return path


@pytest.mark.parametrize("sdk", sorted(SDKS))
def test_the_official_sdk_client_drives_mia_acp_through_every_session_method(tmp_path, server, sdk):
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the ACP SDK client tests of mia-acp need it (install Node.js 18+)")
    if not (SDKS[sdk] / "package.json").exists():
        pytest.skip(f"the pinned ACP SDK {sdk} is not installed in tests/acp/node_modules: run scripts/bootstrap")
    need_binary()
    config = acp_config(tmp_path, server)
    proj_a, proj_b = tmp_path / "projA", tmp_path / "projB"
    proj_a.mkdir()
    proj_b.mkdir()
    env = dict(os.environ, HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path / "xdg"))
    r = subprocess.run(
        [node, str(SCRIPT), str(SDKS[sdk]), str(BIN), str(config), str(proj_a), str(proj_b)],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert r.stdout.rstrip().endswith("ALL OK"), out
    # the store is where the config put it, and nothing went to the default place
    assert (tmp_path / "data" / "mia.sqlite3").exists()
    assert not (tmp_path / "xdg").exists()
    log = (tmp_path / "mia-acp.log").read_text()
    assert "mia core loaded" in log


def test_help_and_version_go_to_stdout_and_exit_0():
    need_binary()
    r = subprocess.run([str(BIN), "--version"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0 and r.stdout.startswith("mia-acp "), r
    r = subprocess.run([str(BIN), "--help"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0 and "--config FILE" in r.stdout, r


@pytest.mark.parametrize(
    "options, message",
    [
        ({"modle": "a/b"}, "`modle` is not an option; did you mean `mode`, `model`, `modes`?"),
        ({"checkpoints": {"max_mbb": 3}}, "`checkpoints.max_mbb` is not an option; did you mean `max_mb`?"),
        ({"log_level": "debgu"}, 'did you mean "debug"?'),
        ({"mcp": {"servers": {}}}, "`mcp` is a setup() option mia-acp does not support"),
        ({"model": "gpt"}, '`model` must be "provider/model"'),
        ({"providers": {"x": {"kind": "olama"}}}, "`providers.x.kind` must be one of"),
        ({"providers": {"anthropic": {"api": "responses"}}}, "`providers.anthropic.api` is for kinds openai,"),
        ({"costs": {"daily_limit_usd": "ten"}}, "`costs.daily_limit_usd` must be a number"),
        ({"permissions": {"rules": [{"tool": "bash", "action": "maybe"}]}}, "permissions"),
        ({"providers": {"openai": {"api_key": "sk-test-do-not-print"}}}, "environment only"),
    ],
)
def test_a_bad_config_is_one_clear_error_naming_the_option(tmp_path, options, message):
    need_binary()
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(options))
    r = subprocess.run([str(BIN), "--config", str(path)], capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
    assert r.returncode != 0
    assert r.stdout == "", "stdout is the protocol: errors go to stderr"
    assert message in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "sk-test-do-not-print" not in r.stderr


def test_a_config_that_is_a_fifo_or_huge_or_has_an_endless_key_is_refused_at_once(tmp_path):
    """--config's file comes from wherever the editor's settings point: a
    FIFO fails instead of waiting for a writer, a file past 4 MiB is not
    read, and a key as long as the file is cut in the one-line error."""
    need_binary()
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.json"
    huge.write_text('{"model": "' + "a" * (5 * 1024 * 1024) + '"}')
    long_key = tmp_path / "long.json"
    long_key.write_text(json.dumps({"k" * 200_000: 1}))
    for path, said in [(fifo, "not a regular file"), (huge, "more than the"), (long_key, "is not an option")]:
        r = subprocess.run([str(BIN), "--config", str(path)], capture_output=True, text=True, timeout=10,
                           stdin=subprocess.DEVNULL)
        assert r.returncode != 0 and said in r.stderr, (path, r.stderr[:300])
        assert len(r.stderr.strip().splitlines()) == 1 and len(r.stderr) < 1000, (path, len(r.stderr))


def test_a_missing_config_file_names_the_file(tmp_path):
    need_binary()
    r = subprocess.run([str(BIN), "--config", str(tmp_path / "nope.json")], capture_output=True, text=True, timeout=10)
    assert r.returncode != 0 and "nope.json" in r.stderr, r


EVERYTHING = ROOT / "tests" / "mcp" / "node_modules" / ".bin" / "mcp-server-everything"
MCP_SCRIPT = ROOT / "tests" / "acp" / "mia_acp_mcp.mjs"


def test_an_editors_mcp_servers_reach_each_sessions_agent_loop_and_bad_ones_are_refused(tmp_path, server):
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the ACP SDK client tests of mia-acp need it (install Node.js 18+)")
    if not (SDKS["2"] / "package.json").exists() or not EVERYTHING.exists():
        pytest.skip("the pinned ACP SDK 2 or MCP test servers are missing: run scripts/bootstrap")
    need_binary()
    secret = "sk-mcp-env-secret-4711"
    config = acp_config(tmp_path, server, log_level="debug")
    project = tmp_path / "project"
    project.mkdir()
    env = dict(os.environ, HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path / "xdg"))
    with mcp_http_server(EVERYTHING) as url:
        r = subprocess.run(
            [node, str(MCP_SCRIPT), str(SDKS["2"]), str(BIN), str(config), str(project), str(EVERYTHING), secret,
             url],
            capture_output=True,
            text=True,
            timeout=240,
            env=env,
        )
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert r.stdout.rstrip().endswith("ALL OK"), out
    # The model was offered each session's own server's tools, and got their results.
    offered = [
        {t["function"]["name"] for t in req["body"].get("tools", [])}
        for req in server.requests()
        if req["method"] == "POST" and req["body"]
    ]
    assert any("everything__echo" in o and "other__echo" not in o for o in offered), offered
    assert any("other__echo" in o and "everything__echo" not in o for o in offered), offered
    # The env and header values (secrets) reached neither the log nor the store.
    assert secret not in (tmp_path / "mia-acp.log").read_text()
    for f in (tmp_path / "data").rglob("*"):
        if f.is_file():
            assert secret.encode() not in f.read_bytes(), f


class RawAcp:
    """mia-acp driven by hand over newline-delimited JSON-RPC: requests are
    sent without waiting, so a cancel can go out while a prompt runs."""

    def __init__(self, config, tmp_path):
        env = dict(os.environ, HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path / "xdg"))
        self.proc = subprocess.Popen([str(BIN), "--config", str(config)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        self.next_id = 0
        self.seen = []  # every message from mia-acp
        self.lines = __import__("queue").Queue()
        __import__("threading").Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))

    def send(self, method, params, notify=False):
        msg = {"jsonrpc": "2.0", "method": method, "params": params}
        if not notify:
            self.next_id += 1
            msg["id"] = self.next_id
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())
        self.proc.stdin.flush()
        return msg.get("id")

    def until(self, pred, timeout=20):
        """The first message `pred` accepts (answering permission requests: allow once)."""
        import queue
        import time
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                m = self.lines.get(timeout=0.2)
            except queue.Empty:
                continue
            self.seen.append(m)
            if m.get("method") == "session/request_permission":
                option = m["params"]["options"][0]["optionId"]
                self.proc.stdin.write((json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": {
                    "outcome": {"outcome": "selected", "optionId": option}}}) + "\n").encode())
                self.proc.stdin.flush()
            if pred(m):
                return m
        return None

    def close(self):
        self.proc.kill()
        self.proc.wait()


def test_a_session_in_proc_never_reads_its_files_and_a_cancel_ends_its_command(tmp_path, server):
    need_binary()
    config = acp_config(tmp_path, server, permissions={"rules": [{"tool": "bash", "action": "allow"}]})
    acp = RawAcp(config, tmp_path)
    try:
        acp.send("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        assert acp.until(lambda m: m.get("id") == 1)
        acp.send("session/new", {"cwd": "/proc", "mcpServers": []})
        sid = acp.until(lambda m: m.get("id") == 2)["result"]["sessionId"]
        prompt = [{"type": "text", "text": 'tool bash {"command": "sleep 60"}'}]
        pid = acp.send("session/prompt", {"sessionId": sid, "prompt": prompt})
        started = acp.until(lambda m: m.get("method") == "session/update"
                            and m["params"]["update"].get("sessionUpdate") == "tool_call")
        assert started, acp.seen
        # Before the fix the scan before the command blocked on /proc/kmsg: the cancel went unanswered.
        acp.send("session/cancel", {"sessionId": sid}, notify=True)
        ended = acp.until(lambda m: m.get("id") == pid, timeout=30)
        assert ended and ended["result"]["stopReason"] == "cancelled", acp.seen[-5:]
        # The session answers again, and its command's output says /proc is not covered.
        prompt = [{"type": "text", "text": 'tool bash {"command": "echo hi"}'}]
        pid = acp.send("session/prompt", {"sessionId": sid, "prompt": prompt})
        ended = acp.until(lambda m: m.get("id") == pid, timeout=30)
        assert ended and ended["result"]["stopReason"] == "end_turn", acp.seen[-5:]
        said = json.dumps([m for m in acp.seen if m.get("method") == "session/update"])
        assert "virtual file system proc" in said, said[-3000:]
        assert not list((tmp_path / "data").glob("checkpoints/objects/*/*"))
    finally:
        acp.close()


def test_a_reviewed_write_file_is_pending_until_allowed_then_in_progress_as_bash_is(tmp_path, server):
    from acp_agents import missing, run_sdk_client
    if missing():
        pytest.skip(missing())
    need_binary()
    config = acp_config(tmp_path, server)
    project = tmp_path / "proj"
    project.mkdir()
    prompts = [{"text": 'tool bash {"command":"echo hi"}'},
               {"text": 'tool write_file {"path":"new.txt","content":"hello\\n"}'}]
    env = {"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "xdg")}
    run = run_sdk_client([BIN, "--config", config], prompts, project, env=env)
    assert run.returncode == 0, run.explain()
    assert (project / "new.txt").read_text() == "hello\n", run.explain()
    for turn in (0, 1):
        steps = []
        for line in run.lines:
            if line.get("turn") != turn:
                continue
            if line["event"] == "permission":
                steps.append("permission")
            elif line["event"] == "update" and line["kind"] in ("tool_call", "tool_call_update") and line.get("status"):
                steps.append(line["status"])
        assert steps == ["pending", "permission", "in_progress", "completed"], (turn, steps, run.explain())


def test_tool_call_ids_are_unique_in_the_session_when_the_provider_reuses_its_own(tmp_path, server):
    from acp_agents import missing, run_sdk_client
    if missing():
        pytest.skip(missing())
    need_binary()
    config = acp_config(tmp_path, server)
    project = tmp_path / "proj"
    project.mkdir()
    # The provider calls its tool "call_0" in every answer.
    prompts = [{"text": f'sameids tool bash {{"command":"echo turn{i}"}}'} for i in range(3)]
    env = {"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "xdg")}
    run = run_sdk_client([BIN, "--config", config], prompts, project, env=env)
    assert run.returncode == 0, run.explain()
    ids = [c["toolCallId"] for t in run.turns for c in t["toolCalls"]]
    assert len(ids) == 3 and len(set(ids)) == 3, ids
    assert ids[0] == "call_0", ids
    # Each turn's updates, permission and result name that turn's call.
    for turn, want in zip(run.turns, ids):
        assert {s["toolCallId"] for s in turn["toolStatuses"]} == {want}, turn
        assert [p["toolCall"]["toolCallId"] for p in turn["permissions"]] == [want], turn
        assert "tool said:" in turn["text"], turn
    # The provider gets its own id back with every result.
    last = [r for r in server.requests() if r["method"] == "POST" and r["body"]][-1]["body"]["messages"]
    assert [m["tool_call_id"] for m in last if m["role"] == "tool"] == ["call_0"] * 3, last
    assert [c["id"] for m in last if m["role"] == "assistant" for c in m.get("tool_calls") or []] == ["call_0"] * 3
