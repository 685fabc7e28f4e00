"""A minimal MCP server over stdio for the crash test: `crash` writes a line
to stderr and exits mid-call; `pid` answers the process id (a restarted
server answers another). With FRAGILE_ENDLESS_PAGES set, `tools/list`
never ends: every page adds a tool `pageN` and a next cursor.

`grow` adds a tool `grown` and says so with
`notifications/tools/list_changed` before it answers. With FRAGILE_SLOW_START set, `initialize` is never answered. `huge` answers
with a text of FRAGILE_HUGE_MB MB (default 200). `hang` reports
progress twice (when the call carries a progress token) and never
answers. Every notification the client sends is appended as a JSON line
to the file FRAGILE_LOG names, when set. `bad name!` is a tool whose name
no provider takes."""

import json
import os
import sys

TOOLS = [
    {"name": "crash", "description": "exits mid-call", "inputSchema": {"type": "object"}},
    {"name": "pid", "description": "the process id", "inputSchema": {"type": "object"},
     "annotations": {"readOnlyHint": True}},
]


if os.environ.get("FRAGILE_BAD_NAME"):
    TOOLS.append({"name": "bad name!", "inputSchema": {"type": "object"}})
TOOLS.append({"name": "grow", "inputSchema": {"type": "object"}})
TOOLS.append({"name": "hang", "inputSchema": {"type": "object"}})
TOOLS.append({"name": "huge", "inputSchema": {"type": "object"}})


def log(msg):
    if os.environ.get("FRAGILE_LOG"):
        with open(os.environ["FRAGILE_LOG"], "a") as f:
            f.write(json.dumps(msg) + "\n")


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    req = json.loads(line)
    method, rid = req.get("method"), req.get("id")
    if rid is None:
        log(req)
        continue
    if method == "initialize" and os.environ.get("FRAGILE_SLOW_START"):
        continue  # never answers: a server that takes its whole timeout to start
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": req["params"]["protocolVersion"],
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "fragile", "version": "1"}}})
    elif method == "tools/list" and os.environ.get("FRAGILE_ENDLESS_PAGES"):
        n = int((req.get("params") or {}).get("cursor") or 0)
        page = (TOOLS if n == 0 else []) + [{"name": f"page{n}", "inputSchema": {"type": "object"}}]
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": page, "nextCursor": str(n + 1)}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": TOOLS}})
    elif method == "tools/call" and req["params"]["name"] == "grow":
        if not any(t["name"] == "grown" for t in TOOLS):
            TOOLS.append({"name": "grown", "description": "added by grow", "inputSchema": {"type": "object"}})
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "grew"}]}})
    elif method == "tools/call" and req["params"]["name"] == "hang":
        token = ((req["params"].get("_meta") or {}).get("progressToken"))
        log({"hang": rid, "progressToken": token})
        if token is not None:
            send({"jsonrpc": "2.0", "method": "notifications/progress",
                  "params": {"progressToken": token, "progress": 1, "total": 4}})
            send({"jsonrpc": "2.0", "method": "notifications/progress",
                  "params": {"progressToken": token, "progress": 2, "total": 4, "message": "halfway\nthere"}})
            # A token nobody handed out is ignored.
            send({"jsonrpc": "2.0", "method": "notifications/progress",
                  "params": {"progressToken": "not-mine", "progress": 99}})
    elif method == "tools/call" and req["params"]["name"] == "huge":
        # A result of FRAGILE_HUGE_MB MB (default 200) in one line, then still alive.
        mb = int(os.environ.get("FRAGILE_HUGE_MB", "200"))
        head = json.dumps({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": ""}]}})
        cut = head.index('"text": ""') + len('"text": "')
        sys.stdout.write(head[:cut])
        chunk = "h" * (1 << 20)
        for _ in range(mb):
            sys.stdout.write(chunk)
        sys.stdout.write(head[cut:] + "\n")
        sys.stdout.flush()
    elif method == "tools/call" and req["params"]["name"] == "crash":
        sys.stderr.write("fragile: dying now\n")
        sys.stderr.flush()
        os._exit(3)
    elif method == "tools/call":
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "content": [{"type": "text", "text": f"pid {os.getpid()}"}]}})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no such method"}})
