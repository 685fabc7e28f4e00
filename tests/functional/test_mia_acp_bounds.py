"""mia-acp against a hostile client: messages too large or too deep to read,
and prompts past the memory bound (acp.max_memory_mb), are answered under
their own id with an error that says why, and the connection goes on."""

import json
import os
import queue
import subprocess
import threading
import time

import pytest

from test_mia_acp import BIN, acp_config, need_binary

INIT = {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}}}


class RawClient:
    """A JSON-RPC client on mia-acp's stdio that writes whatever it is told."""

    def __init__(self, config, tmp_path, ignore=()):
        # Requests of mia-acp with these methods are never answered; others are refused.
        self.ignore = set(ignore)
        self.ignored = []
        self.updates = []
        self.proc = subprocess.Popen(
            [str(BIN), "--config", str(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=dict(os.environ, HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path / "xdg")),
        )
        self.next = 100
        # Lines are read on a thread: select() on the pipe would miss lines
        # already read into the file object's buffer.
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def write(self, raw: bytes):
        self.proc.stdin.write(raw + b"\n")
        self.proc.stdin.flush()

    def send(self, method, params):
        self.next += 1
        self.write(json.dumps({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params}).encode())
        return self.next

    def answer(self, id_, timeout=60):
        """The response to `id_` (notifications are skipped; requests refused)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                raise AssertionError("mia-acp closed its stdout")
            msg = json.loads(line)
            if msg.get("method") in self.ignore:
                self.ignored.append(msg)
            elif msg.get("method") == "session/update":
                self.updates.append(msg["params"]["update"])
            elif "method" in msg and "id" in msg:
                self.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "no"}}).encode())
            elif msg.get("id") == id_ and "method" not in msg:
                return msg
        raise AssertionError(f"no answer to {id_} within {timeout} s")

    def call(self, method, params):
        return self.answer(self.send(method, params))

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def client(tmp_path, server):
    need_binary()
    # 128 MB: messages up to 8 MB, a turn's text up to 3.5 MB.
    config = acp_config(tmp_path, server, acp={"max_memory_mb": 128})
    c = RawClient(config, tmp_path)
    assert "result" in c.call("initialize", INIT)
    yield c
    c.close()


def new_session(c, tmp_path):
    r = c.call("session/new", {"cwd": str(tmp_path), "mcpServers": []})
    return r["result"]["sessionId"]


def prompt(c, sid, text):
    return c.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]})


def test_a_message_larger_than_mia_acp_reads_is_refused_under_its_id_and_the_session_goes_on(client, tmp_path):
    sid = new_session(client, tmp_path)
    r = prompt(client, sid, "echo " + "x" * (9 * 1024 * 1024))
    assert r["id"] == client.next and "error" in r, r
    message = r["error"]["message"]
    assert "9.0 MB, more than mia-acp reads (8.0 MB a message" in message, message
    assert "x" * 100 not in json.dumps(r)
    r = prompt(client, sid, "echo still here")
    assert r["result"]["stopReason"] == "end_turn", r


def test_a_prompt_past_the_memory_bound_is_refused_with_the_option_to_raise(client, tmp_path):
    sid = new_session(client, tmp_path)
    r = prompt(client, sid, "echo " + "y" * (5 * 1024 * 1024))
    message = r["error"]["message"]
    assert "acp.max_memory_mb = 128" in message and "at most 3.5 MB" in message, message
    r = prompt(client, sid, "echo small")
    assert r["result"]["stopReason"] == "end_turn", r


@pytest.mark.parametrize("depth", [130, 10_000, 200_000])
def test_json_nested_past_what_mia_acp_reads_gets_an_error_under_its_id(client, tmp_path, depth):
    client.write(
        b'{"jsonrpc":"2.0","id":"deep-1","method":"session/new","params":{"cwd":"/","mcpServers":[],"x":'
        + b"[" * depth + b"]" * depth + b"}}"
    )
    r = client.answer("deep-1")
    assert "levels deep" in r["error"]["message"], r
    # and the connection still answers
    assert new_session(client, tmp_path)


def test_a_client_that_never_answers_fs_requests_does_not_hold_the_turn_and_the_user_is_told(tmp_path, server):
    need_binary()
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.txt").write_text("disk copy\n")
    config = acp_config(tmp_path, server, mode="code")
    c = RawClient(config, tmp_path, ignore={"fs/read_text_file", "fs/write_text_file"})
    try:
        init = dict(INIT, clientCapabilities={"fs": {"readTextFile": True, "writeTextFile": True}})
        assert "result" in c.call("initialize", init)
        sid = new_session(c, project)
        # The read falls back to the disk after 5 s, and says so.
        r = prompt(c, sid, 'tool read_file {"path": "a.txt"}')
        assert r["result"]["stopReason"] == "end_turn", r
        assert any(m["method"] == "fs/read_text_file" for m in c.ignored)
        said = "".join(u.get("content", {}).get("text", "") for u in c.updates if u.get("sessionUpdate") == "agent_message_chunk")
        assert "did not answer fs/read_text_file" in said and "read from disk" in said, said
        assert "disk copy" in said
        # The write gives up after 30 s with an error the model reads.
        c.updates.clear()
        r = c.answer(c.send("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": 'tool write_file {"path": "b.txt", "content": "x"}'}]}), timeout=120)
        assert r["result"]["stopReason"] == "end_turn", r
        assert any(m["method"] == "fs/write_text_file" for m in c.ignored)
        said = "".join(u.get("content", {}).get("text", "") for u in c.updates if u.get("sessionUpdate") == "agent_message_chunk")
        assert "did not answer fs/write_text_file within 30 s" in said, said
    finally:
        c.close()
