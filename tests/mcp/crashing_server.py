"""A minimal MCP server over stdio for the crash test: `crash` writes a line
to stderr and exits mid-call; `pid` answers the process id (a restarted
server answers another)."""

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
