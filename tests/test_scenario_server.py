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
    assert 0.19 <= elapsed < 2.0
    lines = server.log_lines()
    assert [line[:2] for line in lines] == [["1", str(i)] for i in range(5)]
    stamps = [int(line[2]) for line in lines]
    gaps = [(b - a) / 1e9 for a, b in zip(stamps, stamps[1:])]
    assert all(0.03 < g < 0.15 for g in gaps), gaps
    assert abs((stamps[-1] - stamps[0]) / 1e9 - 0.2) < 0.05  # no drift


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
