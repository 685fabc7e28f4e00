"""A minimal MCP server over stdio for the crash test: `crash` writes a line
to stderr and exits mid-call; `pid` answers the process id (a restarted
server answers another). With FRAGILE_ENDLESS_PAGES set, `tools/list`
never ends: every page adds a tool `pageN` and a next cursor."""

import json
import os
import sys

TOOLS = [
    {"name": "crash", "description": "exits mid-call", "inputSchema": {"type": "object"}},
    {"name": "pid", "description": "the process id", "inputSchema": {"type": "object"},
     "annotations": {"readOnlyHint": True}},
]


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    req = json.loads(line)
    method, rid = req.get("method"), req.get("id")
    if rid is None:
        continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": req["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "fragile", "version": "1"}}})
    elif method == "tools/list" and os.environ.get("FRAGILE_ENDLESS_PAGES"):
        n = int((req.get("params") or {}).get("cursor") or 0)
        page = (TOOLS if n == 0 else []) + [{"name": f"page{n}", "inputSchema": {"type": "object"}}]
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": page, "nextCursor": str(n + 1)}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": TOOLS}})
    elif method == "tools/call" and req["params"]["name"] == "crash":
        sys.stderr.write("fragile: dying now\n")
        sys.stderr.flush()
        os._exit(3)
    elif method == "tools/call":
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "content": [{"type": "text", "text": f"pid {os.getpid()}"}]}})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no such method"}})
