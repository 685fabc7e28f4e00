#!/usr/bin/env python3
"""Offline fake OpenAI-compatible LLM server for mia's tests, benchmarks and demo.

    python3 scripts/scenario_server.py [--port N] [--host 127.0.0.1] [--log-sends FILE]

Prints one stdout line, ``LISTENING <port>`` (default port 0 = ephemeral),
then serves until SIGTERM/SIGINT and exits 0.  Loopback hosts only; nothing
else goes to stdout.  ``--log-sends FILE`` appends ``<request_seq>
<token_index> <time.monotonic_ns()>`` per token event once its write/drain
returned, flushed before each response ends.

HTTP/1.1, keep-alive (``Connection: close`` honoured), request bodies by
Content-Length only (chunked ones get 411):
    POST   /v1/chat/completions  OpenAI Chat Completions, stream true or false
    GET    /v1/models            a fixed model list
    GET    /_requests            requests so far: seq, method, path, JSON body
                                 or null, headers (authorization, x-api-key,
                                 x-goog-api-key values -> "<redacted>")
    DELETE /_requests            clears that list
    anything else                404 with an OpenAI-style error body
/_requests calls are neither recorded nor counted; every other request takes
the next ``seq`` (1, 2, ...), which also names replies ``chatcmpl-scn<seq>``.

The scenario is the first word of the LAST "user" message's text (text parts
concatenated); bad numeric arguments fall back to echo.  "Word tokens" are
``"w%05d " % i`` for i = 0, 1, ... (7 bytes each while i < 100000).
  echo <anything>  (and any other text) the whole unstripped user text, split
                   after each word's trailing whitespace:
                   "Hello big world" -> "Hello ", "big ", "world".
  long N           N word tokens as fast as possible (batched writes).
  slow N RATE      N word tokens, token i sent at start + i/RATE seconds.
  unicode          "héllo wörld — 你好世界 🎉🚀 naïve café ∑∫" (precomposed
                   é ö ï, U+2014, U+1F389 U+1F680) in tokens of 1, 2, 3, 1, 2,
                   3, ... characters; the SSE body goes out in 3-byte HTTP
                   chunks, each drained with a ~2 ms pause, splitting UTF-8
                   sequences, JSON and "data:" prefixes across reads.
  http STATUS [m]  status 400-599, body {"error":{message,type,param,code}}:
                   401 invalid_request_error/invalid_api_key, 404
                   invalid_request_error/model_not_found, 429 requests/
                   rate_limit_exceeded + "retry-after: 1", 500 server_error,
                   others api_error.  Words after STATUS replace the message.
  reset N          N word tokens, then a TCP reset (SO_LINGER 0, close).
  stall N          N word tokens, then silence until the client leaves.
  truncate N       N word tokens, then the 0-size chunk: no finish, no [DONE].
  malformed        token "ok ", the event 'data: {"choices":[{"delta":{"content":'
                   (broken JSON), token "after", then a normal finish.
  count            one token: this request's seq, as decimal text.

A stream: role chunk (delta {"role":"assistant","content":""}), one chunk per
token (delta {"content":...}), finish chunk (delta {}, finish_reason "stop"),
usage chunk (choices []) if stream_options.include_usage, ``data: [DONE]``;
each SSE event is its own HTTP chunk.  prompt_tokens counts whitespace-split
words over all messages, completion_tokens the tokens emitted.  With stream
false the reply is a chat.completion with the same text (reset and stall
misbehave the same way; the others answer at once).
"""
import argparse
import asyncio
import fcntl
import json
import re
import signal
import socket
import struct
import sys
import termios
import time
from collections.abc import Sequence
from http import HTTPStatus

UNICODE_TEXT = ("h\u00e9llo w\u00f6rld \u2014 \u4f60\u597d\u4e16\u754c "
                "\U0001f389\U0001f680 na\u00efve caf\u00e9 \u2211\u222b")
UNICODE_TOKENS = []  # consecutive slices of 1, 2, 3, 1, 2, 3, ... characters
while (_at := sum(map(len, UNICODE_TOKENS))) < len(UNICODE_TEXT):
    UNICODE_TOKENS.append(UNICODE_TEXT[_at:_at + 1 + len(UNICODE_TOKENS) % 3])
MODELS = ["echo", "mia-scenario", "gpt-4o-mini", "gpt-4o"]
SECRET_HEADERS = {"authorization", "x-api-key", "x-goog-api-key"}
BATCH = 512           # token events per write in fast scenarios
MAX_BODY = 64 << 20
PHRASES = {s.value: s.phrase for s in HTTPStatus}


def dumps(obj):
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def chunk(data: bytes) -> bytes:  # one HTTP/1.1 chunk
    return b"%x\r\n%s\r\n" % (len(data), data)


def sse(obj) -> bytes:
    return b"data: " + dumps(obj).encode() + b"\n\n"


class Words(Sequence):
    """Lazy "w00000 ", "w00001 ", ... so that `long 10000000` stays cheap."""
    def __init__(self, n): self.n = n
    def __len__(self): return self.n
    def __getitem__(self, i): return "w%05d " % range(self.n)[i]


def message_text(msg):
    content = msg.get("content") if isinstance(msg, dict) else None
    if isinstance(content, list):
        return "".join(p["text"] for p in content if isinstance(p, dict)
                       and p.get("type") == "text" and isinstance(p.get("text"), str))
    return content if isinstance(content, str) else ""


def parse_scenario(text, seq):
    """Map user text to (kind, tokens, extra)."""
    key, *args = text.split() or [""]
    n = int(args[0]) if args and args[0].isdecimal() else None
    if key in ("long", "reset", "stall", "truncate") and len(args) == 1 and n is not None:
        return key, Words(n), None
    if key == "slow" and len(args) == 2 and n is not None:
        try:
            if 0 < float(args[1]) < float("inf"):
                return "slow", Words(n), float(args[1])
        except ValueError:
            pass
    if key == "http" and n is not None and 400 <= n <= 599:
        message = text.split(None, 2)[2:]
        return "http", [], (n, message[0].strip() if message else None)
    fixed = {"unicode": UNICODE_TOKENS, "malformed": ["ok ", "after"], "count": [str(seq)]}
    if key in fixed:
        return key, fixed[key], None
    return "echo", re.findall(r"\S+\s*|\s+", text), None


ERRORS = {  # status -> (type, code, default message)
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    404: ("invalid_request_error", "model_not_found",
          "The model `{model}` does not exist or you do not have access to it."),
    429: ("requests", "rate_limit_exceeded", "Rate limit reached for requests."),
    500: ("server_error", None,
          "The server had an error while processing your request."),
}


def error_body(status, message=None, model=None, kind=None, code=None):
    """OpenAI-style error object; explicit kind/code override the table."""
    dkind, dcode, default = ERRORS.get(status, ("api_error", None, PHRASES.get(status, "Error")))
    return {"error": {"message": message or default.replace("{model}", str(model)),
                      "type": kind or dkind, "param": None, "code": code or dcode}}


class Gone(Exception):
    """The client closed the connection."""


class BadRequest(Exception):
    """A request we refuse; answered with an error and the connection closed."""


class Server:
    def __init__(self, log_path):
        self.seq = 0
        self.requests = []
        self.tasks = set()
        self.sends = open(log_path, "a", buffering=1 << 16) if log_path else None

    # ---- connection handling -------------------------------------------
    async def on_connect(self, reader, writer):
        task = asyncio.current_task()
        self.tasks.add(task)
        sock = writer.get_extra_info("socket")
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # drain() now waits until everything reached the kernel.
            writer.transport.set_write_buffer_limits(high=0)
            while await self.one_request(reader, writer):
                pass
        except (ConnectionError, Gone, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass  # shutdown; ending normally keeps 3.11's stream callback quiet
        except Exception as exc:  # never let one request kill the server
            print(f"scenario_server: {type(exc).__name__}: {exc}", file=sys.stderr)
        finally:
            self.tasks.discard(task)
            writer.close()

    async def one_request(self, reader, writer):
        """Serve one request; return True to keep the connection open."""
        try:
            req = await self.read_request(reader, writer)
        except BadRequest as exc:
            status, message = exc.args
            await self.reply(writer, status, error_body(
                status, message, kind="invalid_request_error"), close=True)
            return False
        if req is None:
            return False
        method, target, headers, body, close = req
        path = target.split("?", 1)[0]

        if path == "/_requests":
            if method == "DELETE":
                self.requests.clear()
                return await self.reply(writer, 200, {"deleted": True}, close)
            if method == "GET":
                return await self.reply(writer, 200, self.requests, close)
        self.seq += 1
        seq = self.seq
        self.requests.append({
            "seq": seq, "method": method, "path": target, "body": body,
            "headers": {k: "<redacted>" if k in SECRET_HEADERS else v
                        for k, v in headers.items()}})

        if path == "/v1/models" and method == "GET":
            data = [{"id": m, "object": "model", "owned_by": "mia-scenarios"}
                    for m in MODELS]
            return await self.reply(writer, 200, {"object": "list", "data": data}, close)
        if path == "/v1/chat/completions" and method == "POST":
            if not isinstance(body, dict):
                return await self.reply(writer, 400, error_body(
                    400, "We could not parse the JSON body of your request.",
                    kind="invalid_request_error"), close)
            return await self.chat(reader, writer, seq, body, close)
        return await self.reply(writer, 404, error_body(
            404, f"Unknown request URL: {method} {target}.",
            kind="invalid_request_error", code="unknown_url"), close)

    async def read_request(self, reader, writer):
        """Parse one request; None on a clean EOF between requests."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if exc.partial.strip():
                raise BadRequest(400, "Incomplete request head.")
            return None
        except asyncio.LimitOverrunError:
            raise BadRequest(431, "Request headers too large.")
        lines = head.decode("latin-1").lstrip("\r\n").split("\r\n")
        parts = lines[0].split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise BadRequest(400, "Malformed request line.")
        method, target, version = parts
        headers = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            name, value = name.strip().lower(), value.strip()
            if sep:
                headers[name] = f"{headers[name]}, {value}" if name in headers else value
        conn = headers.get("connection", "").lower()
        close = "close" in conn or (version == "HTTP/1.0" and "keep-alive" not in conn)
        if headers.get("transfer-encoding", "identity").lower() != "identity":
            raise BadRequest(411, "Chunked request bodies are not supported.")
        length = headers.get("content-length", "0")
        if not re.fullmatch(r"[0-9]{1,12}", length) or int(length) > MAX_BODY:
            raise BadRequest(400, "Invalid Content-Length.")
        if int(length) and headers.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        raw = await reader.readexactly(int(length))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        return method, target, headers, body, close

    async def reply(self, writer, status, obj, close, extra=()):
        body = dumps(obj).encode()
        head = [f"HTTP/1.1 {status} {PHRASES.get(status, 'Error')}",
                "Content-Type: application/json",
                f"Content-Length: {len(body)}",
                f"Connection: {'close' if close else 'keep-alive'}", *extra]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        await writer.drain()
        return not close

    # ---- chat completions ----------------------------------------------
    async def chat(self, reader, writer, seq, body, close):
        messages = body.get("messages")
        messages = messages if isinstance(messages, list) else []
        users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
        text = message_text(users[-1]) if users else ""
        kind, tokens, extra = parse_scenario(text, seq)
        model = body.get("model", "")
        if kind == "http":
            status, message = extra
            hdrs = ["retry-after: 1"] if status == 429 else []
            return await self.reply(writer, status, error_body(status, message, model),
                                    close, hdrs)
        prompt = sum(len(message_text(m).split()) for m in messages)
        opts = body.get("stream_options")
        want_usage = isinstance(opts, dict) and opts.get("include_usage") is True
        created = int(time.time())
        cid = f"chatcmpl-scn{seq}"
        usage = {"prompt_tokens": prompt, "completion_tokens": len(tokens),
                 "total_tokens": prompt + len(tokens)}

        if body.get("stream") is not True:
            if kind == "reset":
                return await self.reset(writer)
            if kind == "stall":
                return await self.stall(reader)
            return await self.reply(writer, 200, {
                "id": cid, "object": "chat.completion", "created": created,
                "model": model, "choices": [{
                    "index": 0, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "".join(tokens)}}],
                "usage": usage}, close)

        base = {"id": cid, "object": "chat.completion.chunk",
                "created": created, "model": model}

        def event(delta, finish=None):
            return sse({**base, "choices": [
                {"index": 0, "delta": delta, "finish_reason": finish}]})

        # Token events are built from a pre-rendered prefix/suffix for speed;
        # the result is byte-identical to event({"content": token}).
        pre, post = event({"content": ""}).split(b'"content":""', 1)
        pre += b'"content":'

        def token_event(tok):
            return pre + dumps(tok).encode() + post

        tail = [event({}, "stop"), b"data: [DONE]\n\n"]
        if want_usage:
            tail.insert(1, sse({**base, "choices": [], "usage": usage}))

        writer.write(("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                      "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n"
                      f"Connection: {'close' if close else 'keep-alive'}\r\n\r\n").encode())
        writer.write(chunk(event({"role": "assistant", "content": ""})))
        try:
            if kind == "unicode":
                await self.trickle(reader, writer, seq, tokens, token_event, tail)
                return not close
            if kind == "malformed":
                await self.send_tokens(reader, writer, seq, tokens[:1], token_event)
                writer.write(chunk(b'data: {"choices":[{"delta":{"content":\n\n'))
                await self.send_tokens(reader, writer, seq, tokens[1:], token_event, 1)
            else:
                await self.send_tokens(reader, writer, seq, tokens, token_event,
                                       rate=extra if kind == "slow" else None)
            if kind == "reset":
                return await self.reset(writer)
            if kind == "stall":
                return await self.stall(reader)
            if kind != "truncate":
                writer.write(b"".join(map(chunk, tail)))
            await self.end_body(writer)
            return not close
        finally:
            self.flush_sends()

    def log_send(self, seq, index, stamp):
        if self.sends:
            self.sends.write(f"{seq} {index} {stamp}\n")

    def flush_sends(self):
        if self.sends:
            self.sends.flush()

    async def end_body(self, writer):
        # Flush first so the log is complete once the client sees the end.
        self.flush_sends()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def send_tokens(self, reader, writer, seq, tokens, token_event,
                          first=0, rate=None):
        n = len(tokens)
        if rate:
            start = asyncio.get_running_loop().time()
            for i in range(n):
                await self.sleep_until(reader, writer, start + i / rate)
                writer.write(chunk(token_event(tokens[i])))
                await writer.drain()
                self.log_send(seq, first + i, time.monotonic_ns())
            return
        for lo in range(0, n, BATCH):
            hi = min(n, lo + BATCH)
            writer.write(b"".join(chunk(token_event(tokens[i])) for i in range(lo, hi)))
            await writer.drain()
            stamp = time.monotonic_ns()
            for i in range(lo, hi):
                self.log_send(seq, first + i, stamp)
            self.check_gone(reader, writer)

    async def trickle(self, reader, writer, seq, tokens, token_event, tail):
        """Write the SSE body in 3-byte HTTP chunks (the unicode scenario)."""
        body, ends = b"", []
        for tok in tokens:
            body += token_event(tok)
            ends.append(len(body))
        body += b"".join(tail)
        await writer.drain()
        logged = 0
        for pos in range(0, len(body), 3):
            writer.write(chunk(body[pos:pos + 3]))
            await writer.drain()
            stamp = time.monotonic_ns()
            while logged < len(ends) and ends[logged] <= pos + 3:
                self.log_send(seq, logged, stamp)
                logged += 1
            await self.sleep_until(reader, writer,
                                   asyncio.get_running_loop().time() + 0.002)
        await self.end_body(writer)

    @staticmethod
    def check_gone(reader, writer):
        # EOF from the client (even a half-close) counts as having left.
        if reader.at_eof() or writer.transport.is_closing():
            raise Gone

    async def sleep_until(self, reader, writer, deadline):
        """Sleep in short slices so a departed client is noticed quickly."""
        loop = asyncio.get_running_loop()
        while (left := deadline - loop.time()) > 0:
            self.check_gone(reader, writer)
            await asyncio.sleep(min(left, 0.05))
        self.check_gone(reader, writer)

    async def reset(self, writer):
        await writer.drain()
        sock = writer.get_extra_info("socket")
        # Give the peer up to 1 s to acknowledge what was sent, because an
        # RST discards data still waiting in our send queue (Linux only).
        try:
            for _ in range(100):
                out = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4)
                if struct.unpack("i", out)[0] == 0:
                    break
                await asyncio.sleep(0.01)
        except (OSError, AttributeError):
            pass
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
        return False

    async def stall(self, reader):
        while await reader.read(65536):
            pass
        return False


async def serve(args):
    app = Server(args.log_sends)
    server = await asyncio.start_server(app.on_connect, args.host, args.port)
    print(f"LISTENING {server.sockets[0].getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()
    for task in list(app.tasks):
        task.cancel()
    await asyncio.gather(*app.tasks, return_exceptions=True)
    await server.wait_closed()
    if app.sends:
        app.sends.close()


def main():
    parser = argparse.ArgumentParser(description="Offline fake LLM server.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--log-sends", metavar="FILE")
    args = parser.parse_args()
    if args.host not in ("127.0.0.1", "::1"):
        parser.error("only loopback hosts are allowed")
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
