"""MCP servers' tools through the agent loop (issue 13), against
@modelcontextprotocol/server-everything (tests/mcp/package.json, pinned,
installed by scripts/bootstrap) in a real headless Neovim."""

import json
import shutil
from pathlib import Path

import pytest

from conftest import scenario_setup, tool_results

ROOT = Path(__file__).resolve().parents[2]
EVERYTHING = ROOT / "tests" / "mcp" / "node_modules" / ".bin" / "mcp-server-everything"

needs_server = pytest.mark.skipif(
    shutil.which("node") is None or not EVERYTHING.exists(),
    reason="node or the pinned MCP test servers are missing: run scripts/bootstrap (needs node and npm)",
)


@pytest.fixture
def project(tmp_path):
    p = tmp_path / "project"
    p.mkdir()
    return p


@pytest.fixture
def agent(editor_factory, server, project):
    def make(servers, **extra):
        ed = editor_factory(setup=scenario_setup(server, mcp={"servers": servers}, **extra))
        ed.lua("vim.cmd.cd(...)", str(project))
        return ed
    return make


EVERYTHING_SPEC = {"command": [str(EVERYTHING), "stdio"], "timeout_ms": 20000}


def offered_tools(server):
    """The tool names the last chat request offered."""
    bodies = [r["body"] for r in server.requests() if r["method"] == "POST" and r["body"]]
    return [t["function"]["name"] for t in bodies[-1].get("tools", [])]


def prompt(ed, text):
    ed.nvim.command("Mia prompt " + text)
    ed.wait("require('mia.chat').state() == 'done'")


def mcp_lines(ed):
    return ed.lua("return require('mia.mcp').lines()")


@needs_server
def test_an_mcp_tool_runs_through_the_agent_loop(agent, server):
    ed = agent({"everything": EVERYTHING_SPEC})
    # lazy: nothing started before the first turn
    assert mcp_lines(ed) == ["everything: not started (starts when the agent first needs tools)"]
    prompt(ed, 'tool everything__echo {"message": "hello mcp"}')
    assert "everything__echo" in offered_tools(server)
    result = tool_results(server)[-1][0]["content"]
    assert result == "Echo: hello mcp"
    text = ed.chat_text()
    assert "**everything__echo**" in text
    assert text.endswith("tool said: Echo: hello mcp")
    line = mcp_lines(ed)[0]
    assert line.startswith("everything: ready, ") and line.endswith(" tools"), line
    ed.nvim.command("Mia mcp everything")
    assert "  everything__echo" in ed.messages()
    ed.nvim.command("checkhealth mia")
    section = "\n".join(ed.nvim.current.buffer[:]).split("mia: MCP servers", 1)[1]
    assert "OK everything: ready, " in section, section
    # arguments are checked against the server's inputSchema before the call
    prompt(ed, 'tool everything__echo {"msg": 1}')
    assert tool_results(server)[-1][-1]["content"].startswith("Invalid arguments for `everything__echo`")


@needs_server
def test_a_rule_denying_the_servers_tools_is_honoured(agent, server):
    ed = agent(
        {"everything": EVERYTHING_SPEC},
        permissions={"rules": [{"tool": "everything__*", "action": "deny"}]},
    )
    prompt(ed, 'tool everything__echo {"message": "secret"}')
    assert not any(n.startswith("everything__") for n in offered_tools(server))
    result = tool_results(server)[-1][0]["content"]
    assert result.startswith("Permission denied (denied by the rule `everything__*`)"), result
    assert "Echo: secret" not in ed.chat_text()


def test_a_server_that_cannot_start_gives_one_warning_and_the_turn_answers(agent, server):
    ed = agent({"broken": {"command": ["/nonexistent/mcp-server"]}})
    prompt(ed, "hello")
    assert ed.chat_text().rstrip().endswith("hello")
    messages = ed.messages()
    assert messages.count("MCP server `broken` did not start") == 1, messages
    assert "/nonexistent/mcp-server" in messages
    prompt(ed, "again")
    assert ed.messages().count("MCP server `broken` did not start") == 1
    assert mcp_lines(ed)[0].startswith("broken: failed: cannot start `/nonexistent/mcp-server`")
    ed.nvim.command("checkhealth mia")
    section = "\n".join(ed.nvim.current.buffer[:]).split("mia: MCP servers", 1)[1]
    assert "ERROR broken: failed: cannot start" in section, section


def test_setup_rejects_a_server_without_command_or_url(editor_factory):
    ed = editor_factory()
    err = ed.lua("""
      local ok, err = pcall(require('mia').setup, { mcp = { servers = { x = { env = {} } } } })
      return err
    """)
    assert "mcp.servers.x" in err and "command" in err
    err = ed.lua("""
      local ok, err = pcall(require('mia').setup, { mcp = { servers = { a__b = { command = { 'x' } } } } })
      return err
    """)
    assert "mcp.servers.a__b" in err


def test_completion_offers_the_configured_servers(agent):
    ed = agent({"everything": EVERYTHING_SPEC, "other": {"command": ["x"]}})
    assert ed.nvim.call("getcompletion", "Mia mcp ", "cmdline") == ["everything", "other"]
    assert "mcp" in ed.nvim.call("getcompletion", "Mia ", "cmdline")


def test_a_server_that_exits_mid_call_is_named_and_restarted_on_next_use(agent, server):
    import sys
    script = str(ROOT / "tests" / "mcp" / "crashing_server.py")
    ed = agent({"fragile": {"command": [sys.executable, script], "timeout_ms": 10000}},
               permissions={"rules": [{"tool": "fragile__*", "action": "allow"}]})
    prompt(ed, "tool fragile__pid {}")
    first = tool_results(server)[-1][-1]["content"]
    assert first.startswith("pid "), first
    prompt(ed, "tool fragile__crash {}")
    crashed = tool_results(server)[-1][-1]["content"]
    assert "MCP server `fragile`" in crashed and "fragile: dying now" in crashed, crashed
    prompt(ed, "tool fragile__pid {}")
    second = tool_results(server)[-1][-1]["content"]
    assert second.startswith("pid ") and second != first, (first, second)


def test_a_server_that_pages_its_tools_without_end_is_cut_at_twenty_pages(agent, server):
    import sys
    script = str(ROOT / "tests" / "mcp" / "crashing_server.py")
    ed = agent({"fragile": {"command": [sys.executable, script], "env": {"FRAGILE_ENDLESS_PAGES": "1"},
                            "timeout_ms": 10000}},
               permissions={"rules": [{"tool": "fragile__*", "action": "allow"}]})
    prompt(ed, "tool fragile__pid {}")
    assert tool_results(server)[-1][-1]["content"].startswith("pid ")
    fragile = [t for t in offered_tools(server) if t.startswith("fragile__")]
    # The two tools of the first page and one per page, for 20 pages; the endless cursor is not followed further.
    assert len(fragile) == 22 and "fragile__page19" in fragile and "fragile__page20" not in fragile, fragile


@needs_server
def test_an_mcp_tool_over_streamable_http(agent, server):
    import os
    import socket
    import subprocess
    import time
    from conftest import free_port
    port = free_port()
    proc = subprocess.Popen([str(EVERYTHING), "streamableHttp"], env={**os.environ, "PORT": str(port)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        ed = agent({"web": {"url": f"http://127.0.0.1:{port}/mcp", "timeout_ms": 20000}})
        prompt(ed, 'tool web__echo {"message": "over http"}')
        assert tool_results(server)[-1][-1]["content"] == "Echo: over http"
        assert mcp_lines(ed)[0].startswith("web: ready, ")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
