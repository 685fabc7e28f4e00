"""MCP servers' tools through the agent loop (issue 13), against
@modelcontextprotocol/server-everything (tests/mcp/package.json, pinned,
installed by scripts/bootstrap) in a real headless Neovim."""

import json
import shutil
from pathlib import Path

import pytest

from conftest import kill_neovim_and_wait_for, process_running, scenario_setup, tool_results

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
    assert mcp_lines(ed) == ["everything: not started (starts when the agent first needs tools, or :Mia mcp start)"]
    prompt(ed, 'tool everything__echo {"message": "hello mcp"}')
    assert "everything__echo" in offered_tools(server)
    result = tool_results(server)[-1][0]["content"]
    assert result == "Echo: hello mcp"
    text = ed.chat_text()
    assert "**everything__echo**" in text
    assert text.endswith("tool said: Echo: hello mcp")
    line = mcp_lines(ed)[0]
    assert line.startswith("everything: ready, ") and line.endswith(" prompts") and " tools, " in line, line
    shown = ed.lua("return vim.api.nvim_exec2('Mia mcp everything', { output = true }).output")
    assert "    everything__echo" in shown
    ed.nvim.command("checkhealth mia")
    section = "\n".join(ed.nvim.current.buffer[:]).split("mia: MCP servers", 1)[1]
    assert "OK everything: ready, " in section, section
    # arguments are checked against the server's inputSchema before the call
    prompt(ed, 'tool everything__echo {"msg": 1}')
    assert tool_results(server)[-1][-1]["content"].startswith("Invalid arguments for `everything__echo`")
    # The server adds tools once initialized and says so (tools/list_changed): the list is read again.
    log = ed.home / "state" / "nvim" / "mia.log"
    ed.wait(f"(vim.fn.filereadable('{log}') == 1 and table.concat(vim.fn.readfile('{log}'), '\\n')"
            ":find('MCP server `everything` changed its tools', 1, true)) ~= nil", 10000)


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
    assert ed.nvim.call("getcompletion", "Mia mcp ", "cmdline") == ["everything", "other", "restart", "start"]
    assert ed.nvim.call("getcompletion", "Mia mcp restart ", "cmdline") == ["everything", "other"]
    assert ed.nvim.call("getcompletion", "Mia mcp restart ev", "cmdline") == ["everything"]
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
    # The five tools of the first page and one per page, for 20 pages; the endless cursor is not followed further.
    assert len(fragile) == 25 and "fragile__page19" in fragile and "fragile__page20" not in fragile, fragile


def test_a_result_larger_than_mia_reads_is_refused_at_once_and_logged(agent, server, tmp_path):
    import sys
    script = str(ROOT / "tests" / "mcp" / "crashing_server.py")
    log_file = tmp_path / "mia.log"
    ed = agent({"fragile": {"command": [sys.executable, script], "timeout_ms": 120000}},
               permissions={"rules": [{"tool": "fragile__*", "action": "allow"}]}, log_file=str(log_file))
    prompt(ed, "tool fragile__huge {}")
    result = tool_results(server)[-1][-1]["content"]
    assert "MCP server `fragile`" in result and "more than mia reads" in result, result[:500]
    assert "no answer within" not in result, result[:500]
    log = log_file.read_text()
    assert "more than mia reads" in log, log[-2000:]
    # The server is started again for the next call.
    prompt(ed, "tool fragile__pid {}")
    assert tool_results(server)[-1][-1]["content"].startswith("pid ")


def test_stop_ends_a_turn_waiting_for_a_server_to_start(agent, server):
    import sys
    script = str(ROOT / "tests" / "mcp" / "crashing_server.py")
    ed = agent({"fragile": {"command": [sys.executable, script], "env": {"FRAGILE_SLOW_START": "1"},
                            "timeout_ms": 120000}})
    ed.nvim.command("Mia prompt echo hello")
    ed.wait("require('mia.chat').state() == 'streaming'")
    ed.nvim.command("Mia stop")
    # Well before the server's two minutes: the guard is the wait's own.
    ed.wait("require('mia.chat').state() == 'cancelled'")
    assert not [r for r in server.requests() if r["method"] == "POST"], "nothing was sent to the model"


@pytest.fixture
def everything_http():
    """server-everything over streamable HTTP on a free port: its spec."""
    from conftest import mcp_http_server
    with mcp_http_server(EVERYTHING) as url:
        yield {"url": url, "timeout_ms": 20000}


@needs_server
def test_an_mcp_tool_over_streamable_http(agent, server, everything_http):
    ed = agent({"web": everything_http})
    prompt(ed, 'tool web__echo {"message": "over http"}')
    assert tool_results(server)[-1][-1]["content"] == "Echo: over http"
    assert mcp_lines(ed)[0].startswith("web: ready, ")


FRAGILE = str(ROOT / "tests" / "mcp" / "crashing_server.py")
FILESYSTEM = ROOT / "tests" / "mcp" / "node_modules" / ".bin" / "mcp-server-filesystem"


def fragile(tmp_path, **env):
    import sys
    log = tmp_path / "fragile.log"
    return {"command": [sys.executable, FRAGILE], "timeout_ms": 10000,
            "env": {"FRAGILE_LOG": str(log), **env}}, log


def logged(log):
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def virtual_text(ed):
    """Every virtual text in the chat buffer, as the user sees it."""
    return ed.lua(
        "local out = {} "
        "for _, m in ipairs(vim.api.nvim_buf_get_extmarks(require('mia.chat').buffer(), -1, 0, -1, { details = true })) do "
        "  for _, chunk in ipairs(m[4].virt_text or {}) do out[#out + 1] = chunk[1] end "
        "end return table.concat(out, '\\n')")


def test_progress_shows_in_the_tool_block_and_stop_sends_cancelled(agent, server, tmp_path):
    spec, log = fragile(tmp_path)
    ed = agent({"fragile": spec}, permissions={"rules": [{"tool": "fragile__*", "action": "allow"}]})
    ed.nvim.command("Mia prompt tool fragile__hang {}")
    # The server's second report (its newline folded); the report with a token nobody handed out is not shown.
    ed.wait("select(2, pcall(function() return vim.iter(vim.api.nvim_buf_get_extmarks(require('mia.chat').buffer(), -1, 0, -1, "
            "{ details = true })):any(function(m) return (m[4].virt_text or {})[1] and m[4].virt_text[1][1]:find("
            "'running · 2/4 · halfway there', 1, true) ~= nil end) end)) == true", 15000)
    assert "99" not in virtual_text(ed)
    ed.nvim.input(":Mia stop<CR>")
    ed.wait("require('mia.chat').state() == 'cancelled'")
    hang = next(m["hang"] for m in logged(log) if "hang" in m)
    assert next(m for m in logged(log) if "hang" in m)["progressToken"] is not None

    def cancelled():
        return [m for m in logged(log) if m.get("method") == "notifications/cancelled"]
    for _ in range(100):
        if cancelled():
            break
        ed.lua("vim.wait(50)")
    assert [m["params"]["requestId"] for m in cancelled()] == [hang], logged(log)
    assert "■ cancelled" in virtual_text(ed)


def test_a_changed_tool_list_reaches_the_registry(agent, server, tmp_path):
    spec, log = fragile(tmp_path)
    ed = agent({"fragile": spec}, permissions={"rules": [{"tool": "fragile__*", "action": "allow"}]})
    prompt(ed, "tool fragile__grow {}")
    assert tool_results(server)[-1][-1]["content"] == "grew"
    # The request that called `grow` did not offer `grown` (the one after it may, once the list was read again).
    bodies = [r["body"] for r in server.requests() if r["method"] == "POST" and r["body"]]
    assert "fragile__grown" not in [t["function"]["name"] for t in bodies[-2].get("tools", [])]
    ed.wait("vim.tbl_contains(require('mia.mcp').lines('fragile'), '    fragile__grown')", 10000)
    prompt(ed, "tool fragile__grown {}")
    assert tool_results(server)[-1][-1]["content"].startswith("pid "), tool_results(server)[-1]
    assert "fragile__grown" in offered_tools(server)


def test_mcp_tools_announce_themselves_as_they_come_and_go(agent, server, tmp_path):
    spec, _ = fragile(tmp_path)
    ed = agent({"fragile": spec}, permissions={"rules": [{"tool": "fragile__*", "action": "allow"}]})
    ed.lua("""
      _G.seen = {}
      vim.api.nvim_create_autocmd('User', { pattern = { 'MiaToolRegistered', 'MiaToolDeregistered' },
        callback = function(a) if a.data.source == 'mcp' then table.insert(seen, a.match .. ' ' .. a.data.name) end end })
    """)
    ed.nvim.input(":Mia mcp start<CR>")
    ed.wait("vim.tbl_contains(seen, 'MiaToolRegistered fragile__grow')", 15000)
    assert "MiaToolRegistered fragile__grown" not in ed.lua("return seen")
    # The server grows its list (tools/list_changed): the new tool is announced.
    prompt(ed, "tool fragile__grow {}")
    ed.wait("vim.tbl_contains(seen, 'MiaToolRegistered fragile__grown')", 15000)
    ed.lua("seen = {}")
    ed.nvim.input(":Mia mcp restart fragile<CR>")
    ed.wait("vim.tbl_contains(seen, 'MiaToolRegistered fragile__grow')", 15000)
    seen = ed.lua("return seen")
    assert seen.index("MiaToolDeregistered fragile__grow") < seen.index("MiaToolRegistered fragile__grow"), seen


def test_tools_can_be_renamed_and_bad_names_are_left_out(agent, server, tmp_path):
    spec, _ = fragile(tmp_path, FRAGILE_BAD_NAME="1")
    spec.update(tool_prefix="", tool_names={"pid": "whoami"})
    ed = agent({"fragile": spec}, permissions={"rules": [{"tool": "*", "action": "allow"}]})
    prompt(ed, "tool whoami {}")
    assert tool_results(server)[-1][-1]["content"].startswith("pid ")
    offered = offered_tools(server)
    assert "whoami" in offered and "crash" in offered and "fragile__pid" not in offered, offered
    assert not any("bad" in t for t in offered), offered
    status = ed.lua("return require('mia.mcp').status()")[0]
    assert any(s.startswith("`bad name!`: not a valid tool name") for s in status["skipped"]), status
    shown = ed.lua("return vim.api.nvim_exec2('Mia mcp fragile', { output = true }).output")
    assert "left out (rename them in tool_names):\n    `bad name!`: not a valid tool name" in shown, shown


def test_setup_rejects_a_bad_tool_name_override(editor_factory):
    ed = editor_factory()
    err = ed.lua("return select(2, pcall(require('mia').setup, { mcp = { servers = { x = { command = { 'x' }, "
                 "tool_names = { pid = 'who am i' } } } } }))")
    assert "mcp.servers.x.tool_names" in err and "letters, digits" in err, err


needs_filesystem = pytest.mark.skipif(
    shutil.which("node") is None or not FILESYSTEM.exists(),
    reason="node or the pinned MCP test servers are missing: run scripts/bootstrap (needs node and npm)",
)


@needs_filesystem
def test_the_filesystem_server_works_under_mias_path_rules(agent, server, project, tmp_path):
    # The server may read all of tmp_path; mia's rules confine it to the project, less what a rule denies.
    (project / "notes.txt").write_text("project notes\n")
    (project / "secret").mkdir()
    (project / "secret" / "key.txt").write_text("hunter2\n")
    (tmp_path / "outside.txt").write_text("outside the project\n")
    (project / "link.txt").symlink_to(project / "secret" / "key.txt")
    ed = agent({"fs": {"command": [str(FILESYSTEM), str(tmp_path)], "timeout_ms": 20000}},
               permissions={"rules": [{"tool": "fs__*", "action": "allow"},
                                      {"tool": "*", "pattern": "secret/**", "action": "deny"}]})
    prompt(ed, 'tool fs__read_text_file {"path": "notes.txt"}')
    assert tool_results(server)[-1][-1]["content"] == "project notes\n"
    spellings = [str(project / "secret" / "key.txt"), "secret/key.txt", "./secret//key.txt",
                 "secret/../secret/key.txt", "link.txt"]
    for path in spellings:
        prompt(ed, "tool fs__read_text_file " + json.dumps({"path": path}))
        out = tool_results(server)[-1][-1]["content"]
        assert "hunter2" not in out and "denied" in out, (path, out)
    prompt(ed, "tool fs__read_multiple_files " + json.dumps({"paths": ["notes.txt", "secret/key.txt"]}))
    out = tool_results(server)[-1][-1]["content"]
    assert "hunter2" not in out and "project notes" not in out and "denied" in out, out
    prompt(ed, "tool fs__read_text_file " + json.dumps({"path": str(tmp_path / "outside.txt")}))
    out = tool_results(server)[-1][-1]["content"]
    assert "is outside the project" in out and out != "outside the project\n", out
    prompt(ed, "tool fs__move_file " + json.dumps({"source": "notes.txt", "destination": "../moved.txt"}))
    out = tool_results(server)[-1][-1]["content"]
    assert "is outside the project" in out, out
    assert (project / "notes.txt").exists() and not (tmp_path / "moved.txt").exists()
    prompt(ed, "tool fs__write_file " + json.dumps({"path": "new.txt", "content": "written by the server"}))
    assert (project / "new.txt").read_text() == "written by the server"


@needs_server
@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_the_everything_servers_progress_shows_and_stop_cancels_it(agent, server, transport, request):
    spec = EVERYTHING_SPEC if transport == "stdio" else request.getfixturevalue("everything_http")
    ed = agent({"everything": spec}, permissions={"rules": [{"tool": "everything__*", "action": "allow"}]})
    ed.nvim.command('Mia prompt tool everything__trigger-long-running-operation {"duration": 60, "steps": 60}')
    ed.wait("vim.iter(vim.api.nvim_buf_get_extmarks(require('mia.chat').buffer(), -1, 0, -1, { details = true }))"
            ":any(function(m) local v = m[4].virt_text return v ~= nil and v[1][1]:find('running · %d+/60') ~= nil end)",
            20000)
    ed.nvim.input(":Mia stop<CR>")
    ed.wait("require('mia.chat').state() == 'cancelled'")
    assert "■ cancelled" in virtual_text(ed)


def test_a_stdio_server_and_its_children_end_when_neovim_is_killed(agent, server, tmp_path):
    import sys
    pids = tmp_path / "pids"
    # A wrapper that starts a child of its own (as npx starts node) and says both pids.
    cmd = f"sleep 1000 & echo $$ $! > '{pids}.tmp'; mv '{pids}.tmp' '{pids}'; exec '{sys.executable}' '{FRAGILE}'"
    ed = agent({"fragile": {"command": ["sh", "-c", cmd], "timeout_ms": 10000}},
               permissions={"rules": [{"tool": "fragile__*", "action": "allow"}]})
    prompt(ed, "tool fragile__pid {}")
    wrapper, child = (int(p) for p in pids.read_text().split())
    assert tool_results(server)[-1][-1]["content"] == f"pid {wrapper}"
    assert process_running(wrapper) and process_running(child)
    left = kill_neovim_and_wait_for(ed, [wrapper, child])
    assert wrapper not in left, "the MCP server outlived the Neovim that started it"
    assert child not in left, "the MCP server's child outlived the Neovim that started it"


@needs_server
def test_an_image_result_reaches_the_model_as_an_image(agent, server):
    ed = agent({"everything": EVERYTHING_SPEC},
               permissions={"rules": [{"tool": "everything__*", "action": "allow"}]})
    prompt(ed, "tool everything__get-tiny-image {}")
    bodies = [r["body"] for r in server.requests() if r["method"] == "POST" and r["body"]]
    last = bodies[-1]["messages"]
    tool_at = max(i for i, m in enumerate(last) if m["role"] == "tool")
    assert "[image of type image/png" in last[tool_at]["content"], last[tool_at]
    follow = last[tool_at + 1]
    assert follow["role"] == "user", follow
    urls = [c["image_url"]["url"] for c in follow["content"] if c["type"] == "image_url"]
    assert len(urls) == 1 and urls[0].startswith("data:image/png;base64,iVBOR"), urls


DOCS = EVERYTHING.resolve().parent.parent / "docs" if EVERYTHING.exists() else None
FEATURES_URI = "demo://resource/static/document/features.md"


def user_messages(server):
    """The user messages' text of the last chat request."""
    bodies = [r["body"] for r in server.requests() if r["method"] == "POST" and r["body"]]
    out = []
    for m in bodies[-1]["messages"]:
        if m["role"] == "user":
            c = m["content"]
            out.append(c if isinstance(c, str) else "".join(p.get("text", "") for p in c))
    return out


def completion_words(ed):
    return ed.lua("return vim.tbl_map(function(i) return i.word end, vim.fn.complete_info({ 'items' }).items)")


def wait_for_completion(ed, word):
    ed.wait(f"vim.tbl_contains(vim.tbl_map(function(i) return i.word end, "
            f"vim.fn.complete_info({{ 'items' }}).items), {json.dumps(word)})")


def everything_pids(ed):
    """The pids of server-everything processes that are children of the Neovim under test."""
    import glob
    pids = []
    for f in glob.glob(f"/proc/{ed.pid}/task/*/children"):
        for pid in Path(f).read_text().split():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "mcp-server-everything" in cmd:
                pids.append(int(pid))
    return pids


@needs_server
def test_at_completes_the_servers_resources_and_a_mention_sends_the_resource(agent, server):
    ed = agent({"everything": EVERYTHING_SPEC})
    ed.nvim.command("Mia open")
    # "@" starts the servers (not started yet) and completes once they are ready
    ed.nvim.input("isummarize @")
    wait_for_completion(ed, "@everything:" + FEATURES_URI)
    assert ed.lua("return require('mia.mcp').lines()")[0].startswith("everything: ready, ")
    menu = ed.lua("for _, i in ipairs(vim.fn.complete_info({ 'items' }).items) do "
                  "if i.word:find('features.md', 1, true) then return i.menu end end")
    assert menu == "features.md", menu
    # <C-e> leaves the list; typing more and completing again finds the one resource, <C-y> takes it
    ed.nvim.input("<C-e>everything:demo://resource/static/document/feat<C-x><C-o>")
    ed.wait("#vim.fn.complete_info({ 'items' }).items == 1")
    ed.nvim.input("<C-y>")
    ed.wait("vim.api.nvim_get_current_line():find('features.md', 1, true) ~= nil")
    ed.nvim.input("<Esc>")
    ed.wait("vim.fn.mode() == 'n'")
    assert ed.nvim.current.line == "summarize @everything:" + FEATURES_URI
    ed.nvim.input("<CR>")
    ed.wait("require('mia.chat').state() == 'done'")
    sent = user_messages(server)[-1]
    assert sent.startswith("summarize @everything:" + FEATURES_URI + "\n\n"), sent[:200]
    assert f'<resource server="everything" uri="{FEATURES_URI}" mimeType="text/markdown">\n# Everything Server - Features' in sent
    assert sent.rstrip().endswith("</resource>")
    assert ed.nvim.current.buffer[:] == [""]  # the prompt was sent, so cleared


@needs_server
def test_a_mention_that_cannot_be_read_keeps_the_prompt_and_says_why(agent, server):
    ed = agent({"everything": EVERYTHING_SPEC})
    ed.nvim.command("Mia open")
    ed.nvim.input("iread @everything:demo://no/such/thing please<Esc>")
    ed.wait("vim.fn.mode() == 'n'")
    ed.nvim.input("<CR>")
    ed.wait("vim.api.nvim_exec2('messages', { output = true }).output:find('cannot read @everything:demo://no/such/thing', 1, true) ~= nil")
    assert "(the message was not sent)" in ed.messages()
    assert ed.nvim.current.buffer[:] == ["read @everything:demo://no/such/thing please"]
    assert not [r for r in server.requests() if r["method"] == "POST"]
    assert ed.state() == "idle"


@needs_server
def test_a_prompt_is_a_slash_command_with_its_arguments_as_hint(agent, server):
    ed = agent({"everything": EVERYTHING_SPEC})
    ed.nvim.command("Mia open")
    # "/" starts the servers and completes again once their prompts are known
    ed.nvim.input("i/")
    wait_for_completion(ed, "/everything:args-prompt")
    info = ed.lua("for _, i in ipairs(vim.fn.complete_info({ 'items' }).items) do "
                  "if i.word == '/everything:args-prompt' then return { i.menu, i.info } end end")
    assert info == ["A prompt with two arguments, one required and one optional", "city=<required> state=<optional>"]
    ed.nvim.input("<C-e><Esc>")
    ed.wait("vim.fn.mode() == 'n'")
    # the argument's hint completes after the name
    ed.nvim.input("cc/<C-e>everything:args-prompt <C-x><C-o>")
    ed.wait("#vim.fn.complete_info({ 'items' }).items > 0")
    assert ed.lua("return vim.fn.complete_info({ 'items' }).items[1].abbr") == "city=<required> state=<optional>"
    ed.nvim.input("<C-e><Esc>")
    # a missing required argument is named, and the prompt stays
    ed.nvim.input('cc/<C-e>everything:args-prompt state="New York"<Esc>')
    ed.wait("vim.fn.mode() == 'n'")
    ed.nvim.input("<CR>")
    ed.wait("vim.api.nvim_exec2('messages', { output = true }).output:find('needs the argument `city`', 1, true) ~= nil")
    assert "/everything:args-prompt needs the argument `city` (usage: /everything:args-prompt city=<required> state=<optional>)" in ed.messages()
    assert ed.nvim.current.buffer[:] == ['/everything:args-prompt state="New York"']
    # with it, the prompt's messages are sent to the model
    ed.nvim.input('cccity=Albany state="New York"<Esc>0i/everything:args-prompt <Esc>')
    ed.wait("vim.fn.mode() == 'n'")
    assert ed.nvim.current.line == '/everything:args-prompt city=Albany state="New York"'
    ed.nvim.input("<CR>")
    ed.wait("require('mia.chat').state() == 'done'")
    assert user_messages(server)[-1] == "What's weather in Albany, New York?"
    assert "What's weather in Albany, New York?" in ed.chat_text()


@needs_server
def test_mia_mcp_lists_resources_and_prompts_and_restart_replaces_the_process(agent, server):
    ed = agent({"everything": EVERYTHING_SPEC})
    ed.nvim.command("Mia mcp start")
    ed.wait("require('mia.mcp').lines()[1]:find('ready', 1, true) ~= nil")
    line = mcp_lines(ed)[0]
    assert line.startswith("everything: ready, ") and " resources, " in line and line.endswith(" prompts"), line
    assert "0 resources" not in line and "0 prompts" not in line
    shown = ed.lua("return vim.api.nvim_exec2('Mia mcp everything', { output = true }).output")
    assert "    " + FEATURES_URI + "  features.md" in shown
    assert "    /everything:args-prompt city=<required> state=<optional>" in shown
    assert "    /everything:simple-prompt" in shown
    ed.nvim.command("checkhealth mia")
    section = "\n".join(ed.nvim.current.buffer[:]).split("mia: MCP servers", 1)[1]
    assert "OK " + line in section, section
    ed.nvim.command("bwipe")
    [old] = everything_pids(ed)
    ed.nvim.command("Mia mcp restart everything")
    ed.wait("vim.api.nvim_exec2('messages', { output = true }).output:find('mia: everything: ready', 1, true) ~= nil")
    assert not process_running(old)
    [new] = everything_pids(ed)
    assert new != old
    assert mcp_lines(ed)[0] == line
    # its tools are registered again and work
    prompt(ed, 'tool everything__echo {"message": "after restart"}')
    assert tool_results(server)[-1][-1]["content"] == "Echo: after restart"
    err = ed.lua("local ok, err = pcall(vim.cmd, 'Mia mcp restart nosuch') return err")
    assert "no MCP server named `nosuch`" in err


@needs_server
def test_resources_and_prompts_over_streamable_http(agent, server, everything_http):
    ed = agent({"everything": everything_http})
    ed.nvim.command("Mia mcp start")
    ed.wait("require('mia.mcp').lines()[1]:find('ready', 1, true) ~= nil", 20000)
    shown = ed.lua("return vim.api.nvim_exec2('Mia mcp everything', { output = true }).output")
    assert "    " + FEATURES_URI + "  features.md" in shown and "/everything:args-prompt" in shown, shown
    ed.nvim.command("Mia open")
    ed.nvim.input(f"isummarize @everything:{FEATURES_URI}<Esc>")
    ed.wait("vim.fn.mode() == 'n'")
    ed.nvim.input("<CR>")
    ed.wait("require('mia.chat').state() == 'done'")
    assert f'<resource server="everything" uri="{FEATURES_URI}"' in user_messages(server)[-1]
    ed.nvim.input("cc/everything:args-prompt city=Albany<Esc>")
    ed.wait("vim.fn.mode() == 'n'")
    ed.nvim.input("<CR>")
    ed.wait("#vim.tbl_filter(function(l) return l:find('Albany', 1, true) ~= nil end, "
            "vim.api.nvim_buf_get_lines(require('mia.chat').buffer(), 0, -1, false)) > 0")
    ed.wait("require('mia.chat').state() == 'done'")
    assert user_messages(server)[-1].startswith("What's weather in Albany"), user_messages(server)[-1]
