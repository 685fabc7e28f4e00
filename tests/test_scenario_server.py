"""Wire-level tests for scripts/scenario_server.py (stdlib client only)."""
import http.client
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

SERVER = Path(__file__).resolve().parent.parent / "scripts" / "scenario_server.py"
UNICODE_TEXT = "héllo wörld — 你好世界 🎉🚀 naïve café ∑∫"


def dumps(obj):
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


class Server:
    def __init__(self, tmp_path, *extra):
        self.log = tmp_path / "sends.log"
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), "--log-sends", str(self.log), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        line = self.proc.stdout.readline()
        m = re.fullmatch(rb"LISTENING (\d+)\n", line)
        assert m, line
        self.port = int(m.group(1))

    def stop(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=5)
        out, err = self.proc.communicate()
        assert out == b"", out  # nothing but the LISTENING line on stdout
        return rc, err

    def log_lines(self):
        if not self.log.exists():
            return []
        return [line.split() for line in self.log.read_text().splitlines()]


@pytest.fixture
def server(tmp_path):
    srv = Server(tmp_path)
    yield srv
    rc, err = srv.stop()
    assert rc == 0, err
    assert err == b"", err.decode()  # no tracebacks or asyncio warnings


class Conn:
    """A raw HTTP/1.1 client connection."""

    def __init__(self, port, timeout=10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.f = self.sock.makefile("rb")

    def close(self):
        self.f.close()
        self.sock.close()

    def send(self, method, path, obj=None, headers=()):
        body = b"" if obj is None else json.dumps(obj).encode()
        lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1",
                 f"Content-Length: {len(body)}", *headers]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)

    def chat(self, text, stream=True, usage=False, model="echo", headers=(), messages=None):
        obj = {"model": model, "stream": stream,
               "messages": messages or [{"role": "user", "content": text}]}
        if usage:
            obj["stream_options"] = {"include_usage": True}
        self.send("POST", "/v1/chat/completions", obj, headers)

    def head(self):
        status_line = self.f.readline()
        m = re.fullmatch(rb"HTTP/1\.1 (\d{3}) [^\r\n]+\r\n", status_line)
        assert m, status_line
        headers = {}
        while (line := self.f.readline()) != b"\r\n":
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        return int(m.group(1)), headers

    def chunks(self):
        """Yield chunk payloads until the 0-size terminator."""
        while True:
            size_line = self.f.readline()
            assert re.fullmatch(rb"[0-9a-f]+\r\n", size_line), size_line
            size = int(size_line, 16)
            data = self.f.read(size)
            assert self.f.read(2) == b"\r\n"
            if size == 0:
                return
            yield data

    def response(self):
        status, headers = self.head()
        if headers.get("transfer-encoding") == "chunked":
            chunks = list(self.chunks())
            return status, headers, b"".join(chunks), chunks
        body = self.f.read(int(headers["content-length"]))
        return status, headers, body, None


def events(body):
    assert body.endswith(b"\n\n")
    return body.split(b"\n\n")[:-1]


def contents(body):
    out = []
    for ev in events(body):
        assert ev.startswith(b"data: ")
        if ev == b"data: [DONE]":
            continue
        obj = json.loads(ev[6:])
        for choice in obj["choices"]:
            if "content" in choice["delta"]:
                out.append(choice["delta"]["content"])
    return out[1:]  # drop the role chunk's empty content


def created_of(body):
    return int(re.search(rb'"created":(\d+)', body).group(1))


def stream_bytes(seq, created, model, tokens, usage=None, finish=True):
    base = {"id": f"chatcmpl-scn{seq}", "object": "chat.completion.chunk",
            "created": created, "model": model}

    def ev(obj):
        return b"data: " + dumps(obj).encode() + b"\n\n"

    def choice(delta, reason=None):
        return ev({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": reason}]})

    out = choice({"role": "assistant", "content": ""})
    out += b"".join(choice({"content": t}) for t in tokens)
    if finish:
        out += choice({}, "stop")
        if usage:
            out += ev({**base, "choices": [], "usage": usage})
        out += b"data: [DONE]\n\n"
    return out


def test_echo_stream_exact_bytes(server):
    c = Conn(server.port)
    c.chat("Hello big world", usage=True)
    status, headers, body, chunks = c.response()
    assert status == 200
    assert headers["content-type"] == "text/event-stream"
    assert headers["cache-control"] == "no-cache"
    assert headers["transfer-encoding"] == "chunked"
    t = created_of(body)
    pre = '{"id":"chatcmpl-scn1","object":"chat.completion.chunk","created":%d,"model":"echo",' % t
    expected = "".join("data: " + pre + s + "\n\n" for s in [
        '"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}',
        '"choices":[{"index":0,"delta":{"content":"Hello "},"finish_reason":null}]}',
        '"choices":[{"index":0,"delta":{"content":"big "},"finish_reason":null}]}',
        '"choices":[{"index":0,"delta":{"content":"world"},"finish_reason":null}]}',
        '"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}',
        '"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":3,"total_tokens":6}}',
    ]) + "data: [DONE]\n\n"
    assert body == expected.encode()
    assert chunks == [e + b"\n\n" for e in events(body)]  # one event per chunk


def test_echo_roundtrip_parts_and_last_user_message(server):
    text = "  echo multi\n\nline  text\twith ünïcödé 🎉 and spaces  "
    parts = [{"type": "text", "text": text[:9]}, {"type": "image_url", "image_url": {}},
             {"type": "text", "text": text[9:]}]
    messages = [{"role": "system", "content": "be brief"},
                {"role": "user", "content": "long 5"},
                {"role": "assistant", "content": "w00000"},
                {"role": "user", "content": parts}]
    c = Conn(server.port)
    c.chat(None, usage=True, messages=messages)
    status, _, body, _ = c.response()
    toks = contents(body)
    assert "".join(toks) == text
    assert toks[:3] == ["  ", "echo ", "multi\n\n"]
    words = 2 + 2 + 1 + len(text.split())
    usage = {"prompt_tokens": words, "completion_tokens": len(toks),
             "total_tokens": words + len(toks)}
    assert body == stream_bytes(1, created_of(body), "echo", toks, usage)
    assert "ünïcödé".encode() in body  # raw UTF-8, not \u escapes


def test_non_streaming(server):
    c = Conn(server.port)
    c.chat("Hello big world", stream=False, model="gpt-x")
    status, headers, body, _ = c.response()
    assert status == 200 and headers["content-type"] == "application/json"
    assert int(headers["content-length"]) == len(body)
    obj = json.loads(body)
    assert obj["object"] == "chat.completion" and obj["id"] == "chatcmpl-scn1"
    assert obj["model"] == "gpt-x"
    assert obj["choices"] == [{"index": 0, "finish_reason": "stop",
                               "message": {"role": "assistant", "content": "Hello big world"}}]
    assert obj["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}
    c.chat("unicode", stream=False)
    assert json.loads(c.response()[2])["choices"][0]["message"]["content"] == UNICODE_TEXT


def test_gateway_sends_litellms_cost_header_and_usage_cost(server):
    c = Conn(server.port)
    c.chat("gateway header 0.0042", stream=False)
    _, headers, body, _ = c.response()
    assert headers["x-litellm-response-cost"] == "0.0042"
    assert "cost" not in json.loads(body)["usage"]
    c.chat("gateway usage 0.5", usage=True)
    _, headers, body, _ = c.response()
    assert "x-litellm-response-cost" not in headers
    last = json.loads(events(body)[-2][len(b"data: "):])
    assert last["choices"] == [] and last["usage"]["cost"] == 0.5
    c.chat("gateway both NaN", stream=False)
    _, headers, body, _ = c.response()
    assert headers["x-litellm-response-cost"] == "NaN"
    assert json.loads(body)["usage"]["cost"] == "NaN"  # not JSON's NaN: a string


def test_keep_alive_and_connection_close(server):
    c = Conn(server.port)
    c.chat("one")
    assert contents(c.response()[2]) == ["one"]
    c.send("GET", "/v1/models")
    assert c.response()[0] == 200
    c.chat("two", headers=["Connection: close"])
    status, headers, body, _ = c.response()
    assert headers["connection"] == "close" and contents(body) == ["two"]
    assert c.f.read(1) == b""  # server closed the connection


def test_models_and_unknown_path(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request("GET", "/v1/models")
    resp = conn.getresponse()
    obj = json.loads(resp.read())
    assert resp.status == 200 and obj["object"] == "list"
    assert obj["data"][0] == {"id": "echo", "object": "model", "owned_by": "mia-scenarios"}
    assert len(obj["data"]) >= 2
    conn.request("GET", "/nope")
    resp = conn.getresponse()
    err = json.loads(resp.read())["error"]
    assert resp.status == 404 and set(err) == {"message", "type", "param", "code"}


def test_azure_routes_need_an_api_version_and_redact_the_api_key(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    body = dumps({"messages": [{"role": "user", "content": "echo az"}]})
    conn.request("POST", "/openai/deployments/dep/chat/completions", body=body,
                 headers={"content-type": "application/json", "api-key": "az-secret"})
    resp = conn.getresponse()
    err = json.loads(resp.read())["error"]
    assert resp.status == 404 and err["message"] == "Resource not found"
    conn.request("POST", "/openai/deployments/dep/chat/completions?api-version=2024-10-21", body=body,
                 headers={"content-type": "application/json", "api-key": "az-secret"})
    resp = conn.getresponse()
    answer = json.loads(resp.read())
    assert resp.status == 200 and answer["choices"][0]["message"]["content"] == "echo az"
    streamed = dumps({"messages": [{"role": "user", "content": "echo az"}], "stream": True})
    conn.request("POST", "/openai/deployments/dep/chat/completions?api-version=2024-10-21", body=streamed,
                 headers={"content-type": "application/json", "api-key": "az-secret"})
    resp = conn.getresponse()
    first = json.loads(events(resp.read())[0].removeprefix(b"data: "))
    assert first["choices"] == [] and first["prompt_filter_results"][0]["prompt_index"] == 0
    conn.request("GET", "/openai/models?api-version=2024-10-21", headers={"api-key": "az-secret"})
    resp = conn.getresponse()
    assert resp.status == 200 and json.loads(resp.read())["data"][0]["id"] == "echo"
    conn.request("GET", "/_requests")
    seen = json.loads(conn.getresponse().read())
    assert [r["headers"].get("api-key") for r in seen] == ["<redacted>"] * 4
    assert "az-secret" not in json.dumps(seen)


def test_texttool_writes_the_call_in_the_answer_text(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    body = dumps({"messages": [{"role": "user", "content": 'texttool shout {"word": "hi"}'}]})
    conn.request("POST", "/v1/chat/completions", body=body, headers={"content-type": "application/json"})
    answer = json.loads(conn.getresponse().read())
    choice = answer["choices"][0]
    assert choice["message"]["content"] == 'Calling shout. <tool_call>{"name": "shout", "arguments": {"word": "hi"}}</tool_call>'
    assert choice["finish_reason"] == "stop" and "tool_calls" not in choice["message"]


def test_long(server):
    c = Conn(server.port)
    c.chat("long 3000", usage=True)
    _, _, body, chunks = c.response()
    toks = [f"w{i:05d} " for i in range(3000)]
    usage = {"prompt_tokens": 2, "completion_tokens": 3000, "total_tokens": 3002}
    assert body == stream_bytes(1, created_of(body), "echo", toks, usage)
    assert len(chunks) == 1 + 3000 + 3  # one HTTP chunk per SSE event


def test_slow_and_send_log(server):
    c = Conn(server.port)
    start = time.monotonic()
    c.chat("slow 5 20")
    _, _, body, _ = c.response()
    elapsed = time.monotonic() - start
    assert contents(body) == [f"w{i:05d} " for i in range(5)]
    # A loaded machine can only make tokens late, never early: the bounds
    # are lower ones (token i not before start + i/RATE), which load cannot
    # break; how late a token is says nothing about the server.
    assert elapsed >= 0.19
    lines = server.log_lines()
    assert [line[:2] for line in lines] == [["1", str(i)] for i in range(5)]
    stamps = [int(line[2]) for line in lines]
    since_first = [(t - stamps[0]) / 1e9 for t in stamps]
    assert all(s >= i / 20 - 0.002 for i, s in enumerate(since_first)), since_first


def test_unicode_split_writes(server):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    body = json.dumps({"model": "echo", "stream": True,
                       "messages": [{"role": "user", "content": "unicode"}]}).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    reads = []
    while data := s.recv(65536):
        reads.append(data)
    s.close()
    raw = b"".join(reads)
    assert len(reads) > 50  # trickled, not one write
    head, rest = raw.split(b"\r\n\r\n", 1)
    assert b"Transfer-Encoding: chunked" in head
    payloads = []
    while True:
        size_line, rest = rest.split(b"\r\n", 1)
        size = int(size_line, 16)
        payloads.append(rest[:size])
        assert rest[size:size + 2] == b"\r\n"
        rest = rest[size + 2:]
        if size == 0:
            break
    assert rest == b""
    first, trickled = payloads[0], payloads[1:-1]
    assert all(len(p) == 3 for p in trickled[:-1]) and 1 <= len(trickled[-1]) <= 3
    undecodable = 0
    for p in trickled:
        try:
            p.decode("utf-8")
        except UnicodeDecodeError:
            undecodable += 1
    assert undecodable > 0  # some pieces split multi-byte characters
    assert any(p in (b"dat", b"ata", b"ta:", b"a: ") for p in trickled)
    sse = first + b"".join(trickled)
    toks = contents(sse)
    assert "".join(toks) == UNICODE_TEXT
    assert all(1 <= len(t) <= 3 for t in toks)
    assert sse == stream_bytes(1, created_of(sse), "echo", toks)


@pytest.mark.parametrize("status,kind,code,message", [
    (401, "invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    (404, "invalid_request_error", "model_not_found",
     "The model `gpt-nope` does not exist or you do not have access to it."),
    (429, "requests", "rate_limit_exceeded", None),
    (500, "server_error", None, "The server had an error while processing your request."),
    (418, "api_error", None, None),
])
def test_http_errors(server, status, kind, code, message):
    c = Conn(server.port)
    c.chat(f"http {status}", model="gpt-nope")
    got, headers, body, _ = c.response()
    assert got == status
    assert headers["content-type"] == "application/json"
    assert int(headers["content-length"]) == len(body)
    err = json.loads(body)["error"]
    assert (err["type"], err["code"], err["param"]) == (kind, code, None)
    if message:
        assert err["message"] == message
    assert (headers.get("retry-after") == "1") == (status == 429)


def test_http_error_custom_message_exact(server):
    c = Conn(server.port)
    c.chat("http 401 Bad key for you", stream=False)
    status, _, body, _ = c.response()
    assert status == 401
    assert body == (b'{"error":{"message":"Bad key for you","type":"invalid_request_error",'
                    b'"param":null,"code":"invalid_api_key"}}')
    c.chat("echo still alive")  # error replies keep the connection usable
    assert "".join(contents(c.response()[2])) == "echo still alive"


def test_reset(server):
    c = Conn(server.port)
    c.chat("reset 3")
    assert c.head()[0] == 200
    got = []
    with pytest.raises(ConnectionResetError):
        for data in c.chunks():
            got.append(data)
    body = b"".join(got)
    assert contents(body + b"data: [DONE]\n\n") == ["w00000 ", "w00001 ", "w00002 "]
    assert b"finish_reason\":\"stop" not in body


def test_stall_does_not_block_others(server):
    c = Conn(server.port, timeout=0.5)
    c.chat("stall 2")
    c.head()
    chunks = c.chunks()
    got = [next(chunks) for _ in range(3)]
    assert contents(b"".join(got)) == ["w00000 ", "w00001 "]
    with pytest.raises(socket.timeout):
        next(chunks)
    other = Conn(server.port)
    other.chat("count")
    assert contents(other.response()[2]) == ["2"]
    c.close()


def test_truncate(server):
    c = Conn(server.port)
    c.chat("truncate 4")
    status, _, body, _ = c.response()  # completes: the 0-size chunk arrived
    assert body == stream_bytes(1, created_of(body), "echo",
                                [f"w{i:05d} " for i in range(4)], finish=False)
    c.chat("after truncate")
    assert "".join(contents(c.response()[2])) == "after truncate"


def test_malformed(server):
    c = Conn(server.port)
    c.chat("malformed")
    _, _, body, _ = c.response()
    good = stream_bytes(1, created_of(body), "echo", ["ok ", "after"])
    i = good.index(b"data: ", good.index(b'"ok "'))
    assert body == good[:i] + b'data: {"choices":[{"delta":{"content":\n\n' + good[i:]


def test_count_and_request_log(server):
    c = Conn(server.port)
    secrets = ["Authorization: Bearer sk-secret1", "x-api-key: secret2",
               "X-Goog-Api-Key: secret3"]
    c.chat("hi", headers=secrets + ["X-Custom: yes"])
    c.response()
    c.send("GET", "/v1/models")
    c.response()
    c.chat("count")
    assert contents(c.response()[2]) == ["3"]
    c.send("GET", "/_requests")
    _, _, raw, _ = c.response()
    assert b"secret" not in raw
    log = json.loads(raw)
    assert [(r["method"], r["path"]) for r in log] == [
        ("POST", "/v1/chat/completions"), ("GET", "/v1/models"),
        ("POST", "/v1/chat/completions")]
    h = log[0]["headers"]
    assert h["authorization"] == h["x-api-key"] == h["x-goog-api-key"] == "<redacted>"
    assert h["x-custom"] == "yes"
    assert log[0]["body"]["messages"] == [{"role": "user", "content": "hi"}]
    assert log[1]["body"] is None
    c.send("DELETE", "/_requests")
    assert c.response()[0] == 200
    c.send("GET", "/_requests")
    assert json.loads(c.response()[2]) == []
    c.chat("count")  # /_requests calls are not counted
    assert contents(c.response()[2]) == ["4"]


def test_bad_requests_do_not_crash(server):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    s.sendall(b"garbage\r\n\r\n")
    assert s.recv(100).startswith(b"HTTP/1.1 400 ")
    s.close()
    c = Conn(server.port)
    c.sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    assert c.response()[0] == 411
    c = Conn(server.port)
    c.sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 5\r\n\r\n{nope")
    assert c.response()[0] == 400
    s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")
    s.close()  # half a body, then gone
    c = Conn(server.port)
    c.chat("still here")
    assert "".join(contents(c.response()[2])) == "still here"


def test_many_concurrent_connections(server):
    errors = []

    def worker(n):
        try:
            c = Conn(server.port)
            c.chat(f"long {200 + n}")
            toks = contents(c.response()[2])
            assert toks == [f"w{i:05d} " for i in range(200 + n)]
            c.close()
        except Exception as exc:  # collected and reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(60)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []


def test_client_disconnect_stops_handler(server):
    c = Conn(server.port)
    c.chat("slow 1000 50")
    c.head()
    chunks = c.chunks()
    for _ in range(3):
        next(chunks)
    c.close()
    time.sleep(0.5)
    # The send log is flushed only when a response handler finishes, so
    # seeing lines proves the handler stopped; few lines proves promptly.
    lines = server.log_lines()
    assert 2 <= len(lines) <= 8, lines
    time.sleep(0.3)
    assert len(server.log_lines()) == len(lines)


def test_shutdown_with_open_connections(tmp_path):
    srv = Server(tmp_path)
    c = Conn(srv.port)
    c.chat("stall 1")
    c.head()
    next(c.chunks())
    rc, err = srv.stop(signal.SIGINT)
    assert rc == 0, err
    c.close()


def test_refuses_non_loopback_host(tmp_path):
    proc = subprocess.run([sys.executable, str(SERVER), "--host", "0.0.0.0"],
                          capture_output=True, timeout=10)
    assert proc.returncode != 0 and proc.stdout == b""


def test_fork_mode_starts_separate_servers_and_ends_them_at_the_end_of_its_input():
    """--fork (what the functional tests start servers with): each line is
    a server of its own, with its own state and pid; a refused argument
    list is an ERROR line; the end of input ends the servers left."""
    proc = subprocess.Popen([sys.executable, str(SERVER), "--fork"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        started = []
        for args in ([], ["--prompt-tokens", "pieces"]):
            proc.stdin.write(json.dumps(args) + "\n")
            proc.stdin.flush()
            m = re.fullmatch(r"(\d+) LISTENING (\d+)\n", proc.stdout.readline())
            assert m
            started.append((int(m.group(1)), int(m.group(2))))
        for bad in (["--host", "0.0.0.0"], "not json", {"port": 1}):
            proc.stdin.write((bad if isinstance(bad, str) else json.dumps(bad)) + "\n")
            proc.stdin.flush()
            assert proc.stdout.readline().startswith("ERROR "), bad
        (pid_a, port_a), (pid_b, port_b) = started
        assert pid_a != pid_b and port_a != port_b
        # Separate state: a request to one is not in the other's list.
        c = Conn(port_a)
        c.chat("echo hi", stream=False)
        c.head()
        c.close()
        def seen(port):
            h = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            h.request("GET", "/_requests")
            n = len(json.loads(h.getresponse().read()))
            h.close()
            return n
        assert (seen(port_a), seen(port_b)) == (1, 0)
        proc.stdin.close()
        assert proc.wait(timeout=10) == 0
        for port in (port_a, port_b):
            with pytest.raises(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=5).close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ======================================================================
# Anthropic Messages and Gemini formats, and the cross-format scenarios
# ======================================================================
FORMATS = ["openai", "anthropic", "gemini", "ollama"]


def messages_request(c, text=None, stream=True, model="claude-test", headers=(),
                     messages=None, **extra):
    obj = {"model": model, "max_tokens": 64, "stream": stream,
           "messages": messages or [{"role": "user", "content": text}], **extra}
    c.send("POST", "/v1/messages", obj, ["anthropic-version: 2023-06-01", *headers])


def gemini_request(c, text=None, stream=True, model="gemini-test", headers=(),
                   contents=None, query=None, **extra):
    method = "streamGenerateContent" if stream else "generateContent"
    if query is None:
        query = "?alt=sse" if stream else ""
    obj = {"contents": contents or [{"role": "user", "parts": [{"text": text}]}], **extra}
    c.send("POST", f"/v1beta/models/{model}:{method}{query}", obj, headers)


def ollama_request(c, text=None, stream=True, model="llama-test", headers=(),
                   messages=None, **extra):
    obj = {"model": model, "stream": stream,
           "messages": messages or [{"role": "user", "content": text}], **extra}
    c.send("POST", "/api/chat", obj, headers)


def ask(c, fmt, text, stream=True, **kw):
    """Send `text` as the user message in format `fmt`; return the response."""
    if fmt == "openai":
        c.chat(text, stream=stream, **kw)
    elif fmt == "anthropic":
        messages_request(c, text, stream=stream, **kw)
    elif fmt == "ollama":
        ollama_request(c, text, stream=stream, **kw)
    else:
        gemini_request(c, text, stream=stream, **kw)
    return c.response()


def request(c, fmt, text, stream=True):
    """Send `text` in format `fmt` without reading the response."""
    {"openai": c.chat, "anthropic": messages_request, "gemini": gemini_request,
     "ollama": ollama_request}[fmt](*(() if fmt == "openai" else (c,)), text, stream=stream)


def ollama_lines(body):
    """An Ollama NDJSON body as parsed objects (every line ends with a newline)."""
    assert body.endswith(b"\n")
    return [json.loads(line) for line in body.split(b"\n")[:-1]]


def named_events(body):
    """Anthropic (or Responses) events as parsed objects (checking "event:" = data type)."""
    out = []
    for ev in events(body):
        m = re.fullmatch(rb"event: ([a-z_.]+)\ndata: (.*)", ev, re.S)
        assert m, ev
        obj = json.loads(m.group(2))
        assert obj["type"] == m.group(1).decode()
        out.append(obj)
    return out


def gemini_chunks(body):
    out = []
    for ev in events(body):
        assert ev.startswith(b"data: ") and ev != b"data: [DONE]", ev
        out.append(json.loads(ev[6:]))
    return out


def text_of(fmt, body, stream=True):
    """The answer text (not reasoning) of a response body."""
    if not stream:
        obj = json.loads(body)
        if fmt == "openai":
            return obj["choices"][0]["message"]["content"]
        if fmt == "ollama":
            return obj["message"]["content"]
        if fmt == "anthropic":
            return "".join(b["text"] for b in obj["content"] if b["type"] == "text")
        return "".join(p.get("text", "") for p in obj["candidates"][0]["content"]["parts"]
                       if not p.get("thought"))
    if fmt == "openai":
        return "".join(contents(body))
    if fmt == "ollama":
        return "".join(o["message"]["content"] for o in ollama_lines(body))
    if fmt == "anthropic":
        return "".join(e["delta"]["text"] for e in named_events(body)
                       if e["type"] == "content_block_delta"
                       and e["delta"]["type"] == "text_delta")
    return "".join(p.get("text", "") for ch in gemini_chunks(body)
                   for p in ch["candidates"][0].get("content", {}).get("parts", [])
                   if not p.get("thought"))


def anthropic_stream(seq, model, blocks, stop, usage=(None, None)):
    """Expected Anthropic bytes; blocks are (content_block, [deltas]) pairs."""
    inp, out = usage

    def ev(obj):
        return f"event: {obj['type']}\ndata: {dumps(obj)}\n\n"

    text = ev({"type": "message_start", "message": {
        "id": f"msg_scn{seq}", "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": inp, "output_tokens": 1 if out else 0,
                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}})
    text += ev({"type": "ping"})
    for i, (block, deltas) in enumerate(blocks):
        text += ev({"type": "content_block_start", "index": i, "content_block": block})
        text += "".join(ev({"type": "content_block_delta", "index": i, "delta": d})
                        for d in deltas)
        text += ev({"type": "content_block_stop", "index": i})
    text += ev({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": out}})
    return (text + ev({"type": "message_stop"})).encode()


def text_deltas(*tokens):
    return [{"type": "text_delta", "text": t} for t in tokens]


def test_anthropic_echo_stream_exact_bytes(server):
    c = Conn(server.port)
    messages_request(c, "Hello big world", system="be brief")
    status, headers, body, chunks = c.response()
    assert status == 200
    assert headers["content-type"] == "text/event-stream"
    assert headers["transfer-encoding"] == "chunked"
    expected = (
        'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_scn1",'
        '"type":"message","role":"assistant","model":"claude-test","content":[],'
        '"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":5,'
        '"output_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}\n\n'
        'event: ping\ndata: {"type":"ping"}\n\n'
        'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
        '"content_block":{"type":"text","text":""}}\n\n'
        'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        '"delta":{"type":"text_delta","text":"Hello "}}\n\n'
        'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        '"delta":{"type":"text_delta","text":"big "}}\n\n'
        'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        '"delta":{"type":"text_delta","text":"world"}}\n\n'
        'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
        'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":'
        '"end_turn","stop_sequence":null},"usage":{"output_tokens":3}}\n\n'
        'event: message_stop\ndata: {"type":"message_stop"}\n\n')
    assert body == expected.encode()
    assert chunks == [e + b"\n\n" for e in events(body)]  # one event per chunk
    assert body == anthropic_stream(1, "claude-test", [
        ({"type": "text", "text": ""}, text_deltas("Hello ", "big ", "world"))],
        "end_turn", (5, 3))


def test_anthropic_scenario_text_from_last_user_message_blocks(server):
    c = Conn(server.port)
    text = "echo  multi\nline ünï 🎉 "
    messages = [
        {"role": "user", "content": "long 5"},
        {"role": "assistant", "content": [{"type": "text", "text": "w00000"}]},
        {"role": "user", "content": [
            {"type": "text", "text": text[:6]},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "AAAA"}},
            {"type": "text", "text": text[6:]}]}]
    messages_request(c, messages=messages, system=[{"type": "text", "text": "sys words"}])
    _, _, body, _ = c.response()
    assert text_of("anthropic", body) == text
    evs = named_events(body)
    assert evs[0]["message"]["usage"]["input_tokens"] == 2 + 2 + 1 + len(text.split())
    assert "ünï".encode() in body and "🎉".encode() in body  # raw UTF-8


def claude_code_blocks(*texts):
    """A user message the way Claude Code sends it: markup blocks, then the prompt."""
    markup = ["<system-reminder>\nThe following skills are available: long 9\n</system-reminder>",
              "<local-command-caveat>Caveat: stall 1</local-command-caveat>\n",
              "<command-name>/model</command-name>\n   <command-args>default</command-args>\n"]
    return {"role": "user", "content": [{"type": "text", "text": t} for t in [*markup, *texts]]}


def test_scenario_from_the_users_words_inside_harness_markup(server):
    c = Conn(server.port)
    messages_request(c, messages=[claude_code_blocks("echo hello there")])
    _, _, body, _ = c.response()
    assert text_of("anthropic", body) == "echo hello there"
    # words count for usage as before: markup included
    assert named_events(body)[0]["message"]["usage"]["input_tokens"] > 10
    messages_request(c, messages=[claude_code_blocks("tool Write {\"file_path\":\"/x\"}")])
    _, _, body, _ = c.response()
    starts = [e for e in named_events(body) if e["type"] == "content_block_start"]
    assert [s["content_block"]["name"] for s in starts] == ["Write"]
    # a reminder inside the prompt's own block, in the other formats too
    c.chat("<system-reminder>\nlong 9\n</system-reminder>\n\ncount")
    _, _, body, _ = c.response()
    assert "".join(contents(body)) == "3"
    # after a cancelled turn: the cut-off prompt, the marker, the new prompt
    messages_request(c, messages=[claude_code_blocks(
        "stall 3\n", "[Request interrupted by user]\n", "echo after cancel")])
    _, _, body, _ = c.response()
    assert text_of("anthropic", body) == "echo after cancel"
    gemini_request(c, contents=[{"role": "user", "parts": [
        {"text": "<system-reminder>x</system-reminder>"}, {"text": "echo gem"}]}])
    _, _, body, _ = c.response()
    assert text_of("gemini", body) == "echo gem"
    # nothing but markup, or no markup at all: the plain concatenation, as before
    messages_request(c, messages=[{"role": "user", "content": [
        {"type": "text", "text": "<b>bold</b>"}, {"type": "text", "text": "<i>x</i>"}]}])
    _, _, body, _ = c.response()
    assert text_of("anthropic", body) == "<b>bold</b><i>x</i>"
    c.chat(None, messages=[{"role": "user", "content": [
        {"type": "text", "text": "Hello "}, {"type": "text", "text": "<b>big</b> world"}]}])
    _, _, body, _ = c.response()
    assert "".join(contents(body)) == "Hello <b>big</b> world"


def test_anthropic_thinking_event_order(server):
    c = Conn(server.port)
    messages_request(c, "reason 3")
    _, _, body, _ = c.response()
    assert body == anthropic_stream(1, "claude-test", [
        ({"type": "thinking", "thinking": "", "signature": ""},
         [{"type": "thinking_delta", "thinking": f"r0000{i} "} for i in range(3)]
         + [{"type": "signature_delta", "signature": "sig-scn1"}]),
        ({"type": "text", "text": ""}, text_deltas("done"))],
        "end_turn", (2, 4))
    kinds = [(e["type"], e.get("index"), e.get("delta", {}).get("type")) for e in named_events(body)]
    assert kinds == [("message_start", None, None), ("ping", None, None),
                     ("content_block_start", 0, None)] + \
        [("content_block_delta", 0, "thinking_delta")] * 3 + [
        ("content_block_delta", 0, "signature_delta"), ("content_block_stop", 0, None),
        ("content_block_start", 1, None), ("content_block_delta", 1, "text_delta"),
        ("content_block_stop", 1, None), ("message_delta", None, None),
        ("message_stop", None, None)]
    # the send log numbers reasoning and text tokens together
    assert [line[:2] for line in server.log_lines()] == [["1", str(i)] for i in range(4)]


def test_anthropic_tool_use_event_order(server):
    c = Conn(server.port)
    messages_request(c, 'tool get_weather {"city": "Paris", "days": [1, 2]}',
                     tools=[{"name": "get_weather", "input_schema": {"type": "object"}}])
    _, _, body, _ = c.response()
    args = '{"city":"Paris","days":[1,2]}'
    pieces = [args[:9], args[9:19], args[19:]]
    assert body == anthropic_stream(1, "claude-test", [
        ({"type": "tool_use", "id": "toolu_scn1_0", "name": "get_weather", "input": {}},
         [{"type": "input_json_delta", "partial_json": p} for p in pieces])],
        "tool_use", (7, 3))
    messages_request(c, "tools2")
    _, _, body, _ = c.response()
    evs = named_events(body)
    starts = [e["content_block"] for e in evs if e["type"] == "content_block_start"]
    assert starts == [{"type": "tool_use", "id": f"toolu_scn2_{k}", "name": "read_file",
                       "input": {}} for k in range(2)]
    for k, path in enumerate(["a.txt", "b.txt"]):
        parts = [e["delta"]["partial_json"] for e in evs
                 if e["type"] == "content_block_delta" and e["index"] == k]
        assert len(parts) == 3 and json.loads("".join(parts)) == {"path": path}
    assert evs[-2]["delta"]["stop_reason"] == "tool_use"
    assert evs[-2]["usage"] == {"output_tokens": 6}


def test_anthropic_non_streaming(server):
    c = Conn(server.port)
    messages_request(c, "Hello big world", stream=False)
    status, headers, body, _ = c.response()
    assert status == 200 and headers["content-type"] == "application/json"
    assert json.loads(body) == {
        "id": "msg_scn1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [{"type": "text", "text": "Hello big world"}],
        "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 3, "cache_creation_input_tokens": 0,
                  "cache_read_input_tokens": 0}}
    messages_request(c, "reason 2", stream=False)
    obj = json.loads(c.response()[2])
    assert obj["content"] == [
        {"type": "thinking", "thinking": "r00000 r00001 ", "signature": "sig-scn2"},
        {"type": "text", "text": "done"}]
    messages_request(c, "tools2", stream=False)
    obj = json.loads(c.response()[2])
    assert obj["stop_reason"] == "tool_use"
    assert obj["content"] == [
        {"type": "tool_use", "id": f"toolu_scn3_{k}", "name": "read_file",
         "input": {"path": p}} for k, p in enumerate(["a.txt", "b.txt"])]
    messages_request(c, "filtered", stream=False)
    assert json.loads(c.response()[2])["stop_reason"] == "refusal"


@pytest.mark.parametrize("status,kind,message", [
    (401, "authentication_error", "invalid x-api-key"),
    (404, "not_found_error", "model: claude-nope"),
    (429, "rate_limit_error", None),
    (500, "api_error", None),
    (529, "overloaded_error", "Overloaded"),
    (400, "invalid_request_error", None),
    (503, "api_error", None),
])
def test_anthropic_http_errors(server, status, kind, message):
    c = Conn(server.port)
    messages_request(c, f"http {status}", model="claude-nope")
    got, headers, body, _ = c.response()
    assert got == status and headers["content-type"] == "application/json"
    obj = json.loads(body)
    assert set(obj) == {"type", "error"} and obj["type"] == "error"
    assert obj["error"]["type"] == kind and set(obj["error"]) == {"type", "message"}
    if message:
        assert obj["error"]["message"] == message
    assert (headers.get("retry-after") == "1") == (status == 429)
    messages_request(c, "http 401 Bad key for you", stream=False)
    assert c.response()[2] == (b'{"type":"error","error":{"type":"authentication_error",'
                               b'"message":"Bad key for you"}}')


def test_anthropic_truncate_malformed_reset(server):
    c = Conn(server.port)
    messages_request(c, "truncate 2")
    _, _, body, _ = c.response()
    evs = named_events(body)
    assert [e["type"] for e in evs] == ["message_start", "ping", "content_block_start",
                                        "content_block_delta", "content_block_delta"]
    messages_request(c, "malformed")
    _, _, body, _ = c.response()
    broken = (b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
              b'"delta":{"type":"text_delta","text":\n\n')
    assert broken in body
    good = anthropic_stream(2, "claude-test", [
        ({"type": "text", "text": ""}, text_deltas("ok ", "after"))], "end_turn", (1, 2))
    assert body.replace(broken, b"", 1) == good
    assert body.index(b'"ok "') < body.index(broken) < body.index(b'"after"')
    c2 = Conn(server.port)
    messages_request(c2, "reset 3")
    assert c2.head()[0] == 200
    got = []
    with pytest.raises(ConnectionResetError):
        for data in c2.chunks():
            got.append(data)
    assert text_of("anthropic", b"".join(got)) == "w00000 w00001 w00002 "


def gemini_stream(seq, model, parts, final, finish="STOP", usage=None):
    """Expected Gemini bytes: one chunk per part, then the final chunk."""
    def response(candidate, with_usage=False):
        obj = {"candidates": [{**candidate, "index": 0}]}
        if with_usage and usage:
            obj["usageMetadata"] = usage
        obj["modelVersion"] = model
        obj["responseId"] = f"scn{seq}"
        return b"data: " + dumps(obj).encode() + b"\n\n"

    out = b"".join(response({"content": {"parts": [p], "role": "model"}}) for p in parts)
    last = {"content": {"parts": final, "role": "model"}, "finishReason": finish}
    return out + response(last, True)


def test_gemini_echo_stream_exact_bytes(server):
    c = Conn(server.port)
    gemini_request(c, "Hello big world", systemInstruction={"parts": [{"text": "be brief"}]},
                   generationConfig={"temperature": 0})
    status, headers, body, chunks = c.response()
    assert status == 200 and headers["content-type"] == "text/event-stream"
    expected = "".join(
        'data: {"candidates":[{"content":{"parts":[{"text":"%s"}],"role":"model"},'
        '"index":0}],"modelVersion":"gemini-test","responseId":"scn1"}\n\n' % t
        for t in ["Hello ", "big ", "world"])
    expected += ('data: {"candidates":[{"content":{"parts":[{"text":""}],"role":"model"},'
                 '"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":5,'
                 '"candidatesTokenCount":3,"totalTokenCount":8},"modelVersion":"gemini-test",'
                 '"responseId":"scn1"}\n\n')
    assert body == expected.encode()
    assert b"[DONE]" not in body
    assert chunks == [e + b"\n\n" for e in events(body)]


def test_gemini_scenario_text_from_last_user_content(server):
    c = Conn(server.port)
    contents = [{"role": "user", "parts": [{"text": "long 5"}]},
                {"role": "model", "parts": [{"text": "w00000"}]},
                {"role": "user", "parts": [{"text": "echo one "},
                                           {"inlineData": {"mimeType": "image/png", "data": "AA"}},
                                           {"text": "two"}]}]
    gemini_request(c, contents=contents)
    _, _, body, _ = c.response()
    assert text_of("gemini", body) == "echo one two"


def test_gemini_reason_tools_filtered_truncate(server):
    c = Conn(server.port)
    gemini_request(c, "reason 2")
    _, _, body, _ = c.response()
    assert body == gemini_stream(
        1, "gemini-test", [{"text": "r00000 ", "thought": True},
                           {"text": "r00001 ", "thought": True}, {"text": "done"}],
        [{"text": ""}], usage={"promptTokenCount": 2, "candidatesTokenCount": 1,
                               "totalTokenCount": 5, "thoughtsTokenCount": 2})
    gemini_request(c, 'tool lookup {"q": "x"}',
                   tools=[{"functionDeclarations": [{"name": "lookup"}]}])
    _, _, body, _ = c.response()
    assert body == gemini_stream(
        2, "gemini-test", [], [{"functionCall": {"name": "lookup", "args": {"q": "x"}}}],
        usage={"promptTokenCount": 4, "candidatesTokenCount": 3, "totalTokenCount": 7})
    gemini_request(c, "tools2")
    chunk_objs = gemini_chunks(c.response()[2])
    assert len(chunk_objs) == 1
    assert chunk_objs[0]["candidates"][0]["content"]["parts"] == [
        {"functionCall": {"name": "read_file", "args": {"path": p}}} for p in ("a.txt", "b.txt")]
    assert chunk_objs[0]["candidates"][0]["finishReason"] == "STOP"
    gemini_request(c, "filtered")
    chunk_objs = gemini_chunks(c.response()[2])
    assert chunk_objs[0]["candidates"][0]["content"]["parts"] == [{"text": "w00000 "}]
    last = chunk_objs[-1]["candidates"][0]
    assert last["finishReason"] == "SAFETY" and "content" not in last
    gemini_request(c, "truncate 3")
    chunk_objs = gemini_chunks(c.response()[2])
    assert len(chunk_objs) == 3
    assert not any("finishReason" in ch["candidates"][0] or "usageMetadata" in ch
                   for ch in chunk_objs)


def test_gemini_non_streaming(server):
    c = Conn(server.port)
    gemini_request(c, "Hello big world", stream=False, model="gemini-x")
    status, headers, body, _ = c.response()
    assert status == 200 and headers["content-type"] == "application/json"
    assert json.loads(body) == {
        "candidates": [{"content": {"parts": [{"text": "Hello big world"}], "role": "model"},
                        "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 3,
                          "totalTokenCount": 6},
        "modelVersion": "gemini-x", "responseId": "scn1"}
    gemini_request(c, "reason 1", stream=False)
    obj = json.loads(c.response()[2])
    assert obj["candidates"][0]["content"]["parts"] == [
        {"text": "r00000 ", "thought": True}, {"text": "done"}]
    assert obj["usageMetadata"]["thoughtsTokenCount"] == 1


def test_gemini_stream_requires_alt_sse(server):
    c = Conn(server.port)
    for query in ("", "?alt=json"):
        gemini_request(c, "echo hi", query=query)
        status, _, body, _ = c.response()
        assert status == 400
        err = json.loads(body)["error"]
        assert err["code"] == 400 and err["status"] == "INVALID_ARGUMENT"
        assert "alt=sse" in err["message"]
    gemini_request(c, "echo hi")  # the connection stays usable
    assert text_of("gemini", c.response()[2]) == "echo hi"


@pytest.mark.parametrize("status,state,message", [
    (401, "UNAUTHENTICATED", None),
    (404, "NOT_FOUND", "models/gemini-nope is not found."),
    (429, "RESOURCE_EXHAUSTED", None),
    (500, "INTERNAL", None),
    (503, "UNAVAILABLE", None),
    (400, "INVALID_ARGUMENT", None),
])
def test_gemini_http_errors(server, status, state, message):
    c = Conn(server.port)
    gemini_request(c, f"http {status}", model="gemini-nope")
    got, headers, body, _ = c.response()
    assert got == status and "retry-after" not in headers
    err = json.loads(body)["error"]
    assert err["code"] == status and err["status"] == state
    if message:
        assert err["message"] == message
    if status == 429:
        assert err["details"] == [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                   "retryDelay": "1s"}]
    else:
        assert set(err) == {"code", "message", "status"}


def test_openai_reasoning_and_usage(server):
    c = Conn(server.port)
    c.chat("reason 2", usage=True)
    _, _, body, _ = c.response()
    objs = [json.loads(e[6:]) for e in events(body)[:-1]]
    deltas = [o["choices"][0]["delta"] for o in objs if o["choices"]]
    assert deltas == [{"role": "assistant", "content": ""},
                      {"reasoning_content": "r00000 "}, {"reasoning_content": "r00001 "},
                      {"content": "done"}, {}]
    assert objs[-1]["usage"] == {"prompt_tokens": 2, "completion_tokens": 3,
                                 "total_tokens": 5,
                                 "completion_tokens_details": {"reasoning_tokens": 2}}
    c.chat("reason 2", stream=False)
    msg = json.loads(c.response()[2])["choices"][0]["message"]
    assert msg == {"role": "assistant", "content": "done", "reasoning_content": "r00000 r00001 "}


def test_openai_tool_call_deltas(server):
    c = Conn(server.port)
    c.chat('tool get_weather {"city": "Paris"}', usage=True)
    _, _, body, _ = c.response()
    t = created_of(body)
    pre = '{"id":"chatcmpl-scn1","object":"chat.completion.chunk","created":%d,"model":"echo",' % t
    args = '{"city":"Paris"}'
    calls = [{"index": 0, "id": "call_scn1_0", "type": "function",
              "function": {"name": "get_weather", "arguments": ""}}]
    calls += [{"index": 0, "function": {"arguments": p}} for p in (args[:5], args[5:10], args[10:])]
    expected = "data: " + pre + '"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
    expected += "".join("data: " + pre + '"choices":[{"index":0,"delta":{"tool_calls":[%s]},"finish_reason":null}]}\n\n' % dumps(call)
                        for call in calls)
    expected += "data: " + pre + '"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}\n\n'
    expected += "data: " + pre + '"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":3,"total_tokens":7}}\n\n'
    expected += "data: [DONE]\n\n"
    assert body == expected.encode()

    c.chat("tools2")
    _, _, body, _ = c.response()
    objs = [json.loads(e[6:]) for e in events(body)[:-1]]
    tcs = [o["choices"][0]["delta"]["tool_calls"][0] for o in objs
           if "tool_calls" in o["choices"][0]["delta"]]
    assert [tc["index"] for tc in tcs] == [0, 1, 0, 1, 0, 1, 0, 1]
    assert [tc.get("id") for tc in tcs[:2]] == ["call_scn2_0", "call_scn2_1"]
    for k, path in enumerate(["a.txt", "b.txt"]):
        joined = "".join(tc["function"]["arguments"] for tc in tcs if tc["index"] == k)
        assert json.loads(joined) == {"path": path}
    assert objs[-1]["choices"][0]["finish_reason"] == "tool_calls"

    c.chat("tools2", stream=False)
    choice = json.loads(c.response()[2])["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_scn3_{k}", "type": "function",
         "function": {"name": "read_file", "arguments": dumps({"path": p})}}
        for k, p in enumerate(["a.txt", "b.txt"])]}


def test_openai_filtered_and_nousage(server):
    c = Conn(server.port)
    c.chat("filtered", usage=True)
    _, _, body, _ = c.response()
    objs = [json.loads(e[6:]) for e in events(body)[:-1]]
    assert contents(body) == ["w00000 "]
    assert objs[-2]["choices"][0]["finish_reason"] == "content_filter"
    c.chat("nousage a b", usage=True)
    _, _, body, _ = c.response()
    assert b'"usage"' not in body and contents(body) == ["nousage ", "a ", "b"]
    c.chat("nousage a b", stream=False)
    assert "usage" not in json.loads(c.response()[2])


@pytest.mark.parametrize("fmt", FORMATS)
def test_tool_result_answers_and_ignores_scenarios(server, fmt):
    c = Conn(server.port)
    if fmt == "openai":
        c.chat(None, messages=[
            {"role": "user", "content": "http 500"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "read_file", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "first result"},
            {"role": "tool", "tool_call_id": "call_2",
             "content": [{"type": "text", "text": "second"}]}])
        expected = "tool said: first result | second"
    elif fmt == "anthropic":
        messages_request(c, messages=[
            {"role": "user", "content": "http 500"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "first result"},
                {"type": "tool_result", "tool_use_id": "toolu_2",
                 "content": [{"type": "text", "text": "second"}]}]}])
        expected = "tool said: first result | second"
    elif fmt == "ollama":
        ollama_request(c, messages=[
            {"role": "user", "content": "http 500"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": "read_file", "arguments": {}}}]},
            {"role": "tool", "content": "first result", "tool_name": "read_file"},
            {"role": "tool", "content": "second", "tool_name": "read_file"}])
        expected = "tool said: first result | second"
    else:
        gemini_request(c, contents=[
            {"role": "user", "parts": [{"text": "http 500"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "read_file", "args": {}}}]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "read_file", "response": {"text": "A b"}}},
                {"functionResponse": {"name": "read_file", "response": {"n": 2}}}]}])
        expected = 'tool said: {"text":"A b"} | {"n":2}'
    status, _, body, _ = c.response()
    assert status == 200
    assert text_of(fmt, body) == expected


def error_details(fmt, status, headers, body):
    """Checks common to every format's error reply; returns the parsed body."""
    obj = json.loads(body)
    assert int(headers["content-length"]) == len(body)
    if fmt == "anthropic":
        assert obj["type"] == "error" and set(obj["error"]) == {"type", "message"}
    elif fmt == "ollama":
        assert set(obj) == {"error"} and isinstance(obj["error"], str)
    elif fmt == "gemini":
        assert obj["error"]["code"] == status
    else:
        assert set(obj["error"]) == {"message", "type", "param", "code"}
    return obj


@pytest.mark.parametrize("fmt", FORMATS)
def test_retry429_counts_attempts_per_prompt(server, fmt):
    c = Conn(server.port)
    for _ in range(2):
        status, headers, body, _ = ask(c, fmt, "retry429 2 0.2")
        assert status == 429
        obj = error_details(fmt, status, headers, body)
        if fmt == "openai":
            assert headers["retry-after"] == "0.2" and headers["retry-after-ms"] == "200"
            assert (obj["error"]["type"], obj["error"]["code"]) == ("requests", "rate_limit_exceeded")
        elif fmt == "anthropic":
            assert headers["retry-after"] == "0.2" and "retry-after-ms" not in headers
            assert obj["error"]["type"] == "rate_limit_error"
        elif fmt == "ollama":
            assert headers["retry-after"] == "0.2" and "retry-after-ms" not in headers
            assert obj == {"error": "too many requests, please try again later"}
        else:
            assert "retry-after" not in headers
            assert obj["error"]["status"] == "RESOURCE_EXHAUSTED"
            assert obj["error"]["details"] == [
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0.2s"}]
    for _ in range(2):  # from now on it keeps succeeding
        status, _, body, _ = ask(c, fmt, "retry429 2 0.2")
        assert status == 200 and text_of(fmt, body) == "ok after 2"
    # counted per exact prompt text: a trailing space is another prompt
    status, headers, _, _ = ask(c, fmt, "retry429 1 ", stream=False)
    assert status == 429
    if fmt == "openai":
        assert (headers["retry-after"], headers["retry-after-ms"]) == ("1", "1000")
    status, _, body, _ = ask(c, fmt, "retry429 1 ", stream=False)
    assert status == 200 and text_of(fmt, body, stream=False) == "ok after 1"
    # DELETE /_requests resets the counters
    c.send("DELETE", "/_requests")
    assert c.response()[0] == 200
    assert ask(c, fmt, "retry429 2 0.2")[0] == 429


def test_attempts_are_counted_per_format(server):
    c = Conn(server.port)
    assert ask(c, "openai", "fail5xx 1")[0] == 502
    assert ask(c, "anthropic", "fail5xx 1")[0] == 502
    assert ask(c, "gemini", "fail5xx 1")[0] == 502
    assert ask(c, "ollama", "fail5xx 1")[0] == 502
    for fmt in FORMATS:
        status, _, body, _ = ask(c, fmt, "fail5xx 1")
        assert status == 200 and text_of(fmt, body) == "ok after 1"


@pytest.mark.parametrize("fmt", FORMATS)
def test_fail5xx_and_noretry(server, fmt):
    c = Conn(server.port)
    status, headers, body, _ = ask(c, fmt, "fail5xx 1 500")
    assert status == 500
    obj = error_details(fmt, status, headers, body)
    if fmt == "ollama":
        assert obj == {"error": "an error was encountered while running the model"}
    else:
        kind = {"openai": ("error", "type", "server_error"), "anthropic": ("error", "type", "api_error"),
                "gemini": ("error", "status", "INTERNAL")}[fmt]
        assert obj[kind[0]][kind[1]] == kind[2]
    assert text_of(fmt, ask(c, fmt, "fail5xx 1 500")[2]) == "ok after 1"
    status, headers, body, _ = ask(c, fmt, "fail5xx 2")
    assert status == 502 and "x-should-retry" not in headers
    assert ask(c, fmt, "fail5xx 2")[0] == 502
    assert ask(c, fmt, "fail5xx 2")[0] == 200
    for _ in range(3):
        status, headers, body, _ = ask(c, fmt, "noretry 3")
        assert status == 503 and headers["x-should-retry"] == "false"
        error_details(fmt, status, headers, body)
    status, headers, body, _ = ask(c, fmt, "noretry 3")
    assert status == 200 and "x-should-retry" not in headers
    assert text_of(fmt, body) == "ok after 3"


def test_overloaded_in_band(server):
    c = Conn(server.port)
    status, _, body, _ = ask(c, "openai", "overloaded 1")
    assert status == 200
    assert body == b'data: {"error":{"message":"Overloaded","type":"server_error"}}\n\n'
    assert text_of("openai", ask(c, "openai", "overloaded 1")[2]) == "ok after 1"

    for _ in range(2):
        status, _, body, _ = ask(c, "anthropic", "overloaded 2")
        assert status == 200
        evs = named_events(body)
        assert [e["type"] for e in evs] == ["message_start", "ping", "error"]
        assert evs[2] == {"type": "error", "error": {"type": "overloaded_error",
                                                     "message": "Overloaded"}}
        assert body.endswith(b'event: error\ndata: {"type":"error","error":'
                             b'{"type":"overloaded_error","message":"Overloaded"}}\n\n')
    assert text_of("anthropic", ask(c, "anthropic", "overloaded 2")[2]) == "ok after 2"

    status, _, body, _ = ask(c, "gemini", "overloaded 1")
    assert status == 200
    assert body == (b'data: {"error":{"code":503,"message":"The model is overloaded.",'
                    b'"status":"UNAVAILABLE"}}\n\n')
    assert text_of("gemini", ask(c, "gemini", "overloaded 1")[2]) == "ok after 1"
    # without streaming: the format's overloaded HTTP status
    assert ask(c, "anthropic", "overloaded 1 ", stream=False)[0] == 529
    assert ask(c, "openai", "overloaded 1 ", stream=False)[0] == 503
    assert ask(c, "gemini", "overloaded 1 ", stream=False)[0] == 503


def test_context_errors_exact(server):
    c = Conn(server.port)
    status, _, body, _ = ask(c, "openai", "context")
    assert status == 400 and json.loads(body) == {"error": {
        "message": "This model's maximum context length is 128000 tokens. However, your "
                   "messages resulted in 130000 tokens. Please reduce the length of the "
                   "messages.",
        "type": "invalid_request_error", "param": "messages",
        "code": "context_length_exceeded"}}
    status, _, body, _ = ask(c, "anthropic", "context")
    assert status == 400 and body == (
        b'{"type":"error","error":{"type":"invalid_request_error",'
        b'"message":"prompt is too long: 210000 tokens > 200000 maximum"}}')
    status, _, body, _ = ask(c, "gemini", "context", stream=False)
    assert status == 400 and json.loads(body) == {"error": {
        "code": 400, "status": "INVALID_ARGUMENT",
        "message": "The input token count (1200000) exceeds the maximum number of tokens "
                   "allowed (1048576)."}}


def test_nousage_per_format(server):
    c = Conn(server.port)
    _, _, body, _ = ask(c, "anthropic", "nousage x y")
    evs = named_events(body)
    assert text_of("anthropic", body) == "nousage x y"
    assert evs[0]["message"]["usage"] == {"input_tokens": 0, "output_tokens": 0,
                                          "cache_creation_input_tokens": 0,
                                          "cache_read_input_tokens": 0}
    assert evs[-2]["usage"] == {"output_tokens": 0}
    _, _, body, _ = ask(c, "gemini", "nousage x y")
    assert text_of("gemini", body) == "nousage x y"
    assert b"usageMetadata" not in body
    assert gemini_chunks(body)[-1]["candidates"][0]["finishReason"] == "STOP"
    assert b"usageMetadata" not in ask(c, "gemini", "nousage x", stream=False)[2]


def test_ratelimited_window_headers(server):
    c = Conn(server.port)
    status, headers, body, _ = ask(c, "openai", "ratelimited-window 7")
    assert status == 200 and contents(body) == ["ok"]
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["x-ratelimit-reset-requests"] == "7s"
    before = time.time()
    status, headers, body, _ = ask(c, "anthropic", "ratelimited-window 30", stream=False)
    assert status == 200 and text_of("anthropic", body, stream=False) == "ok"
    assert headers["anthropic-ratelimit-requests-remaining"] == "0"
    reset = headers["anthropic-ratelimit-requests-reset"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", reset)
    stamp = datetime.strptime(reset, "%Y-%m-%dT%H:%M:%S%z").timestamp()
    assert before + 29 <= stamp <= time.time() + 31
    status, headers, body, _ = ask(c, "gemini", "ratelimited-window 5")
    assert status == 200 and text_of("gemini", body) == "ok"
    assert not any("ratelimit" in h for h in headers)


SEQ_BITS = re.compile(rb'(scn|"created":)\d+')
CREATED_AT = re.compile(rb'"created_at":"[^"]*"')


def normalized(body):
    return CREATED_AT.sub(b'"created_at":"T"', SEQ_BITS.sub(rb"\1N", body))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("scenario", ["reason 3", "tools2", "long 40", "unicode"])
def test_split_reassembles_to_the_same_events(server, fmt, scenario):
    c = Conn(server.port)
    # one more word elsewhere keeps the prompt counts of both requests equal
    extra = {"openai": {"messages": [{"role": "system", "content": "x"},
                                     {"role": "user", "content": scenario}]},
             "anthropic": {"system": "x"},
             "gemini": {"systemInstruction": {"parts": [{"text": "x"}]}},
             "ollama": {"messages": [{"role": "system", "content": "x"},
                                     {"role": "user", "content": scenario}]}}[fmt]
    status, _, plain, _ = ask(c, fmt, scenario, **extra)
    assert status == 200
    status, headers, split, chunks = ask(c, fmt, "split " + scenario)
    assert status == 200 and headers["transfer-encoding"] == "chunked"
    assert normalized(split) == normalized(plain)
    sizes = [len(p) for p in chunks]
    assert all(1 <= n <= 16 for n in sizes) and len(set(sizes)) > 8
    assert len(chunks) >= len(split) // 16


def test_split_echo_and_errors(server):
    c = Conn(server.port)
    for fmt in FORMATS:
        _, _, body, chunks = ask(c, fmt, "split echo a b  c")
        assert text_of(fmt, body) == "split echo a b  c"
        assert max(map(len, chunks)) <= 16
    c.chat("split http 500 oh no", stream=False)
    c.sock.settimeout(5)
    status, headers, body, _ = c.response()
    assert status == 500 and json.loads(body)["error"]["message"] == "oh no"
    status, headers, body, _ = ask(c, "anthropic", "split retry429 1 0.5")
    assert status == 429 and headers["retry-after"] == "0.5"
    assert text_of("anthropic", ask(c, "anthropic", "split retry429 1 0.5")[2]) == "ok after 1"


def test_split_body_arrives_in_many_small_reads(server):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    body = json.dumps({"model": "m", "max_tokens": 5, "stream": False,
                       "messages": [{"role": "user", "content": "split long 30"}]}).encode()
    s.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    raw = b""
    while data := s.recv(65536):
        raw += data
    s.close()
    head, rest = raw.split(b"\r\n\r\n", 1)
    assert b"Content-Length: %d" % len(rest) in head
    assert json.loads(rest)["content"][0]["text"] == "".join(f"w{i:05d} " for i in range(30))


@pytest.mark.parametrize("fmt", ["anthropic", "gemini", "ollama"])
def test_unicode_trickles_in_other_formats(server, fmt):
    c = Conn(server.port)
    status, _, body, chunks = ask(c, fmt, "unicode")
    assert text_of(fmt, body) == UNICODE_TEXT
    first = 2 if fmt == "anthropic" else 0  # message_start and ping come whole
    assert all(len(p) == 3 for p in chunks[first:-1])
    assert len(chunks) > 100


@pytest.mark.parametrize("fmt", ["anthropic", "gemini", "ollama"])
def test_stall_and_count_in_other_formats(server, fmt):
    c = Conn(server.port, timeout=0.5)
    request(c, fmt, "stall 2")
    c.head()
    chunks = c.chunks()
    wanted = 5 if fmt == "anthropic" else 2  # start, ping, block start, 2 tokens
    got = b"".join(next(chunks) for _ in range(wanted))
    assert text_of(fmt, got) == "w00000 w00001 "
    with pytest.raises(socket.timeout):
        next(chunks)
    other = Conn(server.port)
    assert text_of(fmt, ask(other, fmt, "count")[2]) == "2"
    c.close()


@pytest.mark.parametrize("fmt", FORMATS)
def test_split_slow_stops_when_client_leaves(server, fmt):
    c = Conn(server.port)
    request(c, fmt, "split slow 1000 50")
    c.head()
    got = b""
    for piece in c.chunks():  # until the second token's text has arrived
        assert len(piece) <= 16
        got += piece
        if b"w00001 " in got:
            break
    c.close()
    time.sleep(0.5)
    lines = server.log_lines()
    assert 1 <= len(lines) <= 12, lines
    time.sleep(0.3)
    assert len(server.log_lines()) == len(lines)


def test_redaction_and_query_in_request_log(server):
    c = Conn(server.port)
    messages_request(c, "hi", headers=["x-api-key: sk-ant-secret1"])
    c.response()
    gemini_request(c, "hi", headers=["x-goog-api-key: secret2"])
    c.response()
    gemini_request(c, "hi", query="?alt=sse&key=secret3", headers=["X-Other: 1"])
    c.response()
    c.chat("hi", headers=["Authorization: Bearer secret4"])
    c.response()
    c.send("GET", "/v1beta/models?pageSize=5&%6Bey=secret5")
    c.response()
    c.send("GET", "/_requests")
    _, _, raw, _ = c.response()
    assert b"secret" not in raw
    log = json.loads(raw)
    assert [r["query"] for r in log] == ["", "alt=sse", "alt=sse&key=<redacted>", "",
                                         "pageSize=5&%6Bey=<redacted>"]
    assert [r.get("key_in_url", False) for r in log] == [False, False, True, False, True]
    assert log[2]["path"] == ("/v1beta/models/gemini-test:streamGenerateContent"
                              "?alt=sse&key=<redacted>")
    assert log[0]["headers"]["x-api-key"] == "<redacted>"
    assert log[0]["headers"]["anthropic-version"] == "2023-06-01"
    assert log[1]["headers"]["x-goog-api-key"] == "<redacted>"
    assert log[3]["headers"]["authorization"] == "<redacted>"
    assert log[1]["body"]["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]


def test_model_list_shapes(server):
    c = Conn(server.port)
    for hdr in ("anthropic-version: 2023-06-01", "x-api-key: k"):
        c.send("GET", "/v1/models", headers=[hdr])
        status, _, body, _ = c.response()
        obj = json.loads(body)
        assert status == 200 and set(obj) == {"data", "has_more", "first_id", "last_id"}
        assert obj["has_more"] is False
        assert obj["data"][0] == {"type": "model", "id": "echo", "display_name": "Echo",
                                  "created_at": "2025-01-01T00:00:00Z"}
        assert (obj["first_id"], obj["last_id"]) == (obj["data"][0]["id"], obj["data"][-1]["id"])
    c.send("GET", "/v1/models")
    assert json.loads(c.response()[2])["object"] == "list"
    c.send("GET", "/v1beta/models")
    status, _, body, _ = c.response()
    models = json.loads(body)["models"]
    assert status == 200 and models[0] == {
        "name": "models/echo", "displayName": "Echo",
        "supportedGenerationMethods": ["generateContent", "streamGenerateContent"]}
    c.send("GET", "/v1beta/nothing")
    status, _, body, _ = c.response()
    assert status == 404 and json.loads(body)["error"]["status"] == "NOT_FOUND"


def test_bad_json_in_other_formats(server):
    for path, check in [("/v1/messages", lambda o: o["error"]["type"] == "invalid_request_error"),
                        ("/v1beta/models/g:generateContent",
                         lambda o: o["error"]["status"] == "INVALID_ARGUMENT")]:
        c = Conn(server.port)
        c.sock.sendall(b"POST %s HTTP/1.1\r\nContent-Length: 5\r\n\r\n{nope" % path.encode())
        status, _, body, _ = c.response()
        assert status == 400 and check(json.loads(body))


def test_counting_endpoints_answer_what_the_usage_of_the_same_request_reports(tmp_path):
    srv = Server(tmp_path, "--prompt-tokens", "pieces")
    try:
        tools = [{"name": "read_file", "description": "Reads a file.",
                  "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]
        body = {"model": "echo", "system": "Be brief.", "tools": tools,
                "messages": [{"role": "user", "content": "echo hello, world"}]}
        # Pieces: Be brief . | echo hello , world | read_file: read _ file | Reads a file . |
        # {" type ":" object "," properties ":{" path ":{" type ":" string "}}}
        schema = dumps(tools[0]["input_schema"])
        expected = 3 + 4 + 3 + 4 + len(re.findall(r"[A-Za-z]{1,8}|[0-9]{1,3}|[!-/:-@\[-`{-~]{1,2}", schema))
        c = Conn(srv.port)
        c.send("POST", "/v1/messages/count_tokens", body)
        status, _, raw, _ = c.response()
        assert status == 200 and json.loads(raw) == {"input_tokens": expected}
        c.send("POST", "/v1/messages", {**body, "max_tokens": 100})
        status, _, raw, _ = c.response()
        assert json.loads(raw)["usage"]["input_tokens"] == expected
        gemini = {"contents": [{"role": "user", "parts": [{"text": "echo hello, world"}]}],
                  "systemInstruction": {"parts": [{"text": "Be brief."}]}}
        c.send("POST", "/v1beta/models/echo:countTokens", {"generateContentRequest": gemini})
        status, _, raw, _ = c.response()
        assert status == 200 and json.loads(raw) == {"totalTokens": 7}
        c.close()
    finally:
        rc, err = srv.stop()
    assert rc == 0, err


def test_counting_endpoints_count_words_by_default(server):
    c = Conn(server.port)
    c.send("POST", "/v1/messages/count_tokens",
           {"model": "echo", "system": "Be brief.", "messages": [{"role": "user", "content": "echo hello, world"}]})
    status, _, raw, _ = c.response()
    assert status == 200 and json.loads(raw) == {"input_tokens": 5}
    c.close()


# ======================================================================
# Ollama's native API
# ======================================================================
def test_ollama_echo_stream_lines_exact(server):
    c = Conn(server.port)
    ollama_request(c, "Hello big world", model="llama3.2",
                   messages=[{"role": "system", "content": "be brief"},
                             {"role": "user", "content": "Hello big world"}])
    status, headers, body, chunks = c.response()
    assert status == 200
    assert headers["content-type"] == "application/x-ndjson"
    assert headers["transfer-encoding"] == "chunked"
    lines = ollama_lines(body)
    created = lines[0]["created_at"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", created)

    def token(text):
        return {"model": "llama3.2", "created_at": created,
                "message": {"role": "assistant", "content": text}, "done": False}

    # prompt: "be brief" + "Hello big world" = 5 words; output: 3 tokens
    assert lines == [token("Hello "), token("big "), token("world"), {
        "model": "llama3.2", "created_at": created,
        "message": {"role": "assistant", "content": ""},
        "done_reason": "stop", "done": True,
        "total_duration": 1_000_000 + 5_000_000 + 30_000_000, "load_duration": 1_000_000,
        "prompt_eval_count": 5, "prompt_eval_duration": 5_000_000,
        "eval_count": 3, "eval_duration": 30_000_000}]
    assert chunks == [dumps(o).encode() + b"\n" for o in lines]  # a line per chunk


def test_ollama_streams_unless_stream_is_false(server):
    c = Conn(server.port)
    c.send("POST", "/api/chat", {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    status, headers, body, _ = c.response()
    assert headers["content-type"] == "application/x-ndjson"
    assert text_of("ollama", body) == "hi"
    status, headers, body, _ = ask(c, "ollama", "hi there", stream=False)
    assert headers["content-type"] == "application/json"
    obj = json.loads(body)
    assert obj["message"] == {"role": "assistant", "content": "hi there"}
    assert (obj["done"], obj["done_reason"], obj["prompt_eval_count"], obj["eval_count"]) == \
        (True, "stop", 2, 2)


def test_ollama_thinking_tool_calls_and_whole_responses(server):
    c = Conn(server.port)
    _, _, body, _ = ask(c, "ollama", "reason 2")
    lines = ollama_lines(body)
    assert [o["message"].get("thinking") for o in lines[:2]] == ["r00000 ", "r00001 "]
    assert [o["message"]["content"] for o in lines] == ["", "", "done", ""]
    assert lines[-1]["eval_count"] == 3
    _, _, body, _ = ask(c, "ollama", "tools2")
    lines = ollama_lines(body)
    assert len(lines) == 2
    assert lines[0]["message"]["tool_calls"] == [
        {"function": {"name": "read_file", "arguments": {"path": "a.txt"}}},
        {"function": {"name": "read_file", "arguments": {"path": "b.txt"}}}]
    assert (lines[1]["done"], lines[1]["done_reason"], lines[1]["eval_count"]) == (True, "stop", 6)
    _, _, body, _ = ask(c, "ollama", 'tool lookup {"q": "x"}', stream=False)
    obj = json.loads(body)
    assert obj["message"]["tool_calls"] == [{"function": {"name": "lookup", "arguments": {"q": "x"}}}]
    assert obj["done_reason"] == "stop"
    _, _, body, _ = ask(c, "ollama", "reason 1", stream=False)
    assert json.loads(body)["message"] == {"role": "assistant", "content": "done",
                                           "thinking": "r00000 "}


def test_ollama_truncate_malformed_nousage_filtered_overloaded(server):
    c = Conn(server.port)
    _, _, body, _ = ask(c, "ollama", "truncate 3")
    lines = ollama_lines(body)
    assert len(lines) == 3 and not any(o["done"] for o in lines)
    _, _, body, _ = ask(c, "ollama", "malformed")
    raw = body.split(b"\n")
    assert raw[1] == b'{"model":"m","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":'
    assert json.loads(raw[0])["message"]["content"] == "ok "
    assert json.loads(raw[3])["done"] is True
    _, _, body, _ = ask(c, "ollama", "nousage a")
    last = ollama_lines(body)[-1]
    assert last["done"] is True and "prompt_eval_count" not in last and "eval_count" not in last
    assert "prompt_eval_count" not in json.loads(ask(c, "ollama", "nousage a", stream=False)[2])
    _, _, body, _ = ask(c, "ollama", "filtered")
    assert [o.get("done_reason") for o in ollama_lines(body)] == [None, "stop"]
    status, headers, body, _ = ask(c, "ollama", "overloaded 1")
    assert status == 200 and headers["content-type"] == "application/x-ndjson"
    assert body == b'{"error":"an error was encountered while running the model: unexpected EOF"}\n'
    assert text_of("ollama", ask(c, "ollama", "overloaded 1")[2]) == "ok after 1"
    status, _, body, _ = ask(c, "ollama", "overloaded 1 ", stream=False)
    assert status == 503 and json.loads(body) == {
        "error": "server busy, please try again.  maximum pending requests exceeded"}


@pytest.mark.parametrize("status, message", [
    (401, "unauthorized"),
    (404, 'model "llama-nope" not found, try pulling it first'),
    (418, "i'm a teapot"),
    (500, "an error was encountered while running the model"),
    (503, "server busy, please try again.  maximum pending requests exceeded"),
])
def test_ollama_http_errors(server, status, message):
    c = Conn(server.port)
    got, headers, body, _ = ask(c, "ollama", f"http {status}", model="llama-nope")
    assert got == status and headers["content-type"] == "application/json"
    assert json.loads(body) == {"error": message}
    got, _, body, _ = ask(c, "ollama", f"http {status} custom words")
    assert json.loads(body) == {"error": "custom words"}


def test_ollama_context_badkey_and_windows(server):
    c = Conn(server.port)
    status, _, body, _ = ask(c, "ollama", "context")
    assert status == 400 and body == b'{"error":"input length exceeds maximum context length"}'
    status, _, body, _ = ask(c, "ollama", "badkey", headers=["Authorization: Bearer sk-local-123456789"])
    assert status == 401 and json.loads(body) == {
        "error": "Incorrect API key provided: sk-local-123456789."}
    status, headers, body, _ = ask(c, "ollama", "ratelimited-window 5")
    assert status == 200 and text_of("ollama", body) == "ok"
    assert not any("ratelimit" in h for h in headers)
    status, headers, _, _ = ask(c, "ollama", "window 2 30")
    assert (headers["x-ratelimit-limit"], headers["x-ratelimit-remaining"]) == ("2", "1")
    assert ask(c, "ollama", "window 2 30")[0] == 200
    status, headers, body, _ = ask(c, "ollama", "window 2 30")
    assert status == 429 and int(headers["retry-after"]) >= 1
    assert set(json.loads(body)) == {"error"}


def test_ollama_tags_and_unknown_api_paths(server):
    c = Conn(server.port)
    c.send("GET", "/api/tags")
    status, _, body, _ = c.response()
    models = json.loads(body)["models"]
    assert status == 200
    assert [m["name"] for m in models] == ["echo:latest", "mia-scenario:latest",
                                           "llama3.2:latest", "qwen3:8b"]
    assert all(m["model"] == m["name"] and len(m["digest"]) == 64 for m in models)
    c.send("GET", "/api/nothing")
    status, _, body, _ = c.response()
    assert status == 404 and json.loads(body) == {"error": "404 page not found: GET /api/nothing"}
    c.sock.sendall(b"POST /api/chat HTTP/1.1\r\nContent-Length: 5\r\n\r\n{nope")
    status, _, body, _ = c.response()
    assert status == 400 and set(json.loads(body)) == {"error"}


@pytest.mark.parametrize("framing, content_type", [
    (None, "application/x-ndjson"), ("sse", "text/event-stream"), ("array", "application/json")])
def test_ollama_hugeline_is_ndjson_unless_framed_otherwise(server, framing, content_type):
    c = Conn(server.port)
    scenario = "hugeline 0.001" + (f" {framing}" if framing else "")
    status, headers, body, _ = ask(c, "ollama", scenario)
    assert status == 200 and headers["content-type"] == content_type
    if framing is None:
        objs = ollama_lines(body)
    elif framing == "sse":
        objs = [json.loads(e[6:]) for e in events(body)]
    else:
        objs = json.loads(body)
    assert objs[0]["message"]["content"] == "x" * int(0.001 * (1 << 20))
    assert objs[-1]["done"] is True and len(objs) == 2


# ---- OpenAI Responses ---------------------------------------------------------
def responses_request(c, items, stream=True, stateless=True, **extra):
    body = {"model": "gpt-5", "stream": stream, "input": items, **extra}
    if stateless:
        body.update(store=False, include=["reasoning.encrypted_content"])
    c.send("POST", "/v1/responses", body)
    return c.response()


def test_responses_stream_is_numbered_items_with_encrypted_reasoning_and_usage(server):
    c = Conn(server.port)
    status, headers, body, _ = responses_request(
        c, [{"role": "user", "content": [{"type": "input_text", "text": "reason 2"}]}],
        instructions="be brief")
    assert status == 200 and headers["content-type"] == "text/event-stream"
    evs = named_events(body)
    assert [e["sequence_number"] for e in evs] == list(range(len(evs)))
    assert [e["type"] for e in evs] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.delta", "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done", "response.output_item.done",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.completed"]
    assert evs[8]["item"] == {"id": "rs_scn1", "type": "reasoning", "encrypted_content": "gAAAA-scn1",
                              "summary": [{"type": "summary_text", "text": "r00000 r00001 "}]}
    assert evs[11]["delta"] == "done"
    final = evs[-1]["response"]
    assert final["status"] == "completed" and [i["type"] for i in final["output"]] == ["reasoning", "message"]
    assert final["usage"] == {"input_tokens": 4, "input_tokens_details": {"cached_tokens": 2},
                              "output_tokens": 3, "output_tokens_details": {"reasoning_tokens": 2},
                              "total_tokens": 7}


def test_responses_tool_round_trip_needs_the_reasoning_item_back_when_stateless(server):
    c = Conn(server.port)
    _, _, body, _ = responses_request(c, "tool read_file {\"path\": \"a.txt\"}")
    evs = named_events(body)
    pieces = [e["delta"] for e in evs if e["type"] == "response.function_call_arguments.delta"]
    assert pieces == ['{"pat', 'h":"a', '.txt"}']
    call = evs[-1]["response"]["output"][1]
    assert call["call_id"] == "call_scn1_0" and call["name"] == "read_file"
    reasoning = evs[-1]["response"]["output"][0]
    turn = [{"role": "user", "content": "tool read_file"}, call,
            {"type": "function_call_output", "call_id": "call_scn1_0", "output": "A"}]
    status, _, body, _ = responses_request(c, turn, stream=False)
    assert status == 400 and "without the reasoning item" in json.loads(body)["error"]["message"]
    status, _, body, _ = responses_request(c, [turn[0], reasoning, *turn[1:]], stream=False)
    assert status == 200
    assert json.loads(body)["output"][1]["content"][0]["text"] == "tool said: A"
    forged = {**reasoning, "encrypted_content": "EmwKforged"}
    status, _, body, _ = responses_request(c, [turn[0], forged, *turn[1:]], stream=False)
    assert status == 400 and json.loads(body)["error"]["code"] == "invalid_encrypted_content"


def test_responses_fail_in_band_after_the_open_or_after_tokens(server):
    c = Conn(server.port)
    _, _, body, _ = responses_request(c, "overloaded 1", stateless=False)
    evs = named_events(body)
    assert [e["type"] for e in evs] == ["response.created", "response.in_progress", "error",
                                        "response.failed"]
    assert evs[2]["error"]["code"] == "server_error" and evs[3]["response"]["status"] == "failed"
    _, _, body, _ = responses_request(c, "overloaded 1", stateless=False)
    assert named_events(body)[-1]["response"]["output"][1]["content"][0]["text"] == "ok after 1"
    _, _, body, _ = responses_request(c, "failafter 2", stateless=False)
    evs = named_events(body)
    assert [e["sequence_number"] for e in evs] == list(range(len(evs)))
    assert [e["type"] for e in evs][-3:] == ["response.output_item.done", "error", "response.failed"]
    assert "".join(e["delta"] for e in evs if e["type"] == "response.output_text.delta") == "w00000 w00001 "
    status, _, body, _ = responses_request(c, "http 429", stateless=False)
    assert status == 429 and json.loads(body)["error"]["code"] == "rate_limit_exceeded"


def test_failafter_ends_every_format_in_band_after_its_tokens(server):
    c = Conn(server.port)
    _, _, body, _ = ask(c, "openai", "failafter 2")
    error = b'data: {"error":{"message":"Overloaded","type":"server_error"}}\n\n'
    assert body.endswith(error)
    assert "".join(contents(body[:-len(error)])) == "w00000 w00001 "
    _, _, body, _ = ask(c, "anthropic", "failafter 1")
    assert [e["type"] for e in named_events(body)].count("message_start") == 1
    assert named_events(body)[-1]["type"] == "error"


def test_responses_any_call_output_item_ending_the_input_is_a_tool_result(server):
    c = Conn(server.port)
    items = [{"role": "user", "content": "tool apply_patch"},
             {"type": "custom_tool_call", "call_id": "x1", "name": "apply_patch", "input": "*** Begin Patch"},
             {"type": "custom_tool_call_output", "call_id": "x1", "output": "Done!"}]
    status, _, body, _ = responses_request(c, items, stream=False, stateless=False)
    assert status == 200 and json.loads(body)["output"][1]["content"][0]["text"] == "tool said: Done!"


def test_sameids_gives_every_answer_the_same_openai_call_ids(server):
    c = Conn(server.port)
    for _ in range(2):
        status, _, body, _ = ask(c, "openai", 'sameids tool bash {"command": "ls"}', stream=False)
        calls = json.loads(body)["choices"][0]["message"]["tool_calls"]
        assert status == 200 and [t["id"] for t in calls] == ["call_0"], calls


def test_responses_custom_tool_call_streams_its_freeform_input(server):
    c = Conn(server.port)
    patch = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n"
    _, _, body, _ = responses_request(c, "custom apply_patch " + json.dumps(patch))
    evs = named_events(body)
    assert [e["sequence_number"] for e in evs] == list(range(len(evs)))
    assert "".join(e["delta"] for e in evs if e["type"] == "response.custom_tool_call_input.delta") == patch
    done = [e for e in evs if e["type"] == "response.custom_tool_call_input.done"]
    assert len(done) == 1 and done[0]["input"] == patch
    call = evs[-1]["response"]["output"][1]
    assert call == {"id": "ctc_scn1_0", "type": "custom_tool_call", "status": "completed",
                    "call_id": "call_scn1_0", "input": patch, "name": "apply_patch"}
    # The other formats call it as a function with {"input": TEXT}.
    _, _, body, _ = ask(c, "openai", "custom apply_patch " + json.dumps(patch), stream=False)
    fn = json.loads(body)["choices"][0]["message"]["tool_calls"][0]["function"]
    assert fn["name"] == "apply_patch" and json.loads(fn["arguments"]) == {"input": patch}
