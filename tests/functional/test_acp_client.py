"""External ACP agents in mia's chat (mia as the ACP client), driven like a
user in a real headless Neovim against real agent processes: the SDK's own
example agent, claude-agent-acp run offline against the scenario server,
and a small terminal-using agent written on the pinned SDK."""

import json
import os
import re
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from conftest import LIB, ROOT, kill_neovim_and_wait_for, process_running, scenario_setup

NODE = shutil.which("node")
ACP = ROOT / "tests" / "acp" / "node_modules"
EXAMPLE = ACP / "acp-sdk-0.17" / "dist" / "examples" / "agent.js"
CLAUDE = ACP / "@zed-industries" / "claude-agent-acp" / "dist" / "index.js"
FIXTURES = ROOT / "tests" / "acp" / "fixtures"

pytestmark = [
    pytest.mark.skipif(NODE is None, reason="node is not installed: the ACP client tests need it to run the agents"),
    pytest.mark.skipif(not EXAMPLE.exists(), reason="tests/acp/node_modules is missing: run scripts/bootstrap"),
]


def agent_editor(editor_factory, agents, **extra):
    if not LIB.exists():
        pytest.fail(f"{LIB} is missing: build it with `cargo build --release`")
    setup = {"model": "scn/echo", "agents": agents}
    setup.update(extra)
    return editor_factory(setup=setup)


def type_prompt(ed, text):
    """Types `text` in the chat's prompt buffer and sends it with <CR>, as a user does."""
    ed.nvim.command("Mia open")
    ed.nvim.input("i" + text.replace("<", "<lt>") + "<Esc>")
    ed.wait("vim.fn.mode() == 'n' and vim.api.nvim_get_current_line() ~= ''")
    ed.nvim.input("<CR>")


def answer_permission_with(ed, name):
    """vim.ui.select picks the option called `name` and keeps what was shown."""
    ed.lua(
        """
        _G.asked = nil
        local want = ...
        vim.ui.select = function(items, opts, cb)
          _G.asked = { items = items, prompt = opts.prompt }
          for i, it in ipairs(items) do
            if it == want then return cb(it, i) end
          end
          cb(nil, nil)
        end
        """,
        name,
    )


def test_the_sdk_example_agent_streams_tool_blocks_and_gets_the_chosen_option_id(editor_factory):
    ed = agent_editor(editor_factory, {"example": {"command": [NODE, str(EXAMPLE)]}})
    answer_permission_with(ed, "Skip this change")
    ed.lua("_G.invoked = {} vim.api.nvim_create_autocmd('User', { pattern = 'MiaToolInvoked', "
           "callback = function(a) table.insert(invoked, a.data) end })")
    ed.nvim.command("Mia agent example")
    assert ed.lua("return require('mia.agents').current()") == "example"
    type_prompt(ed, "improve the config")
    ed.wait("require('mia.chat').state() == 'done'", 60000)
    text = ed.chat_text()
    assert "## You\n\nimprove the config\n\n## example" in text
    assert "I'll help you with that. Let me start by reading some files" in text
    assert "⚙ **Reading project files** `/project/README.md`" in text
    assert "⚙ **Modifying critical configuration file** `/project/config.json`" in text
    # The agent's own options, in its order, and the question names it.
    asked = ed.lua("return _G.asked")
    assert asked["items"] == ["Allow this change", "Skip this change"]
    assert asked["prompt"] == "example wants to: Modifying critical configuration file"
    # "reject" is the optionId it got: it answers with its reject branch.
    assert "I understand you prefer not to make that change" in text
    assert "Perfect! I've successfully updated" not in text
    status = ed.lua("return require('mia.chat.blocks').status_text('call_1')")
    assert status.startswith("✓"), status
    # The agent's tool calls are announced like mia's own, naming the agent.
    invoked = ed.lua("return invoked")
    assert [i["id"] for i in invoked][:1] == ["call_1"], invoked
    assert all(i["agent"]["name"] == "example" for i in invoked), invoked
    assert invoked[0]["status"] == "done" and invoked[0]["name"] == "Reading project files", invoked


def test_a_dismissed_permission_question_is_cancelled_for_the_agent(editor_factory):
    ed = agent_editor(editor_factory, {"example": {"command": [NODE, str(EXAMPLE)]}})
    answer_permission_with(ed, "no such option")  # the picker is dismissed
    ed.nvim.command("Mia agent example")
    type_prompt(ed, "go")
    ed.wait("require('mia.chat').state() == 'done'", 60000)
    text = ed.chat_text()
    # A cancelled outcome: the example agent ends its turn without either branch.
    assert "Now I understand the project structure" in text
    assert "I understand you prefer not" not in text and "Perfect!" not in text


def test_completion_lists_the_configured_agents(editor_factory):
    ed = agent_editor(editor_factory, {"example": {"command": [NODE, str(EXAMPLE)]}, "other": {"command": ["x"]}})
    got = ed.lua("return vim.fn.getcompletion('Mia agent ', 'cmdline')")
    assert got == ["mia", "example", "other"]


def test_an_agent_config_without_command_is_refused_by_setup(editor_factory):
    ed = editor_factory()
    err = ed.lua("local ok, e = pcall(require('mia').setup, { agents = { x = { env = {} } } }) return e")
    assert "agents.x.command" in err and "must be a list" in err


def claude_agent(server, tmp_path):
    """claude-agent-acp run offline: the scenario server as Anthropic's API, a throwaway HOME."""
    home = tmp_path / "claude-home"
    home.mkdir(exist_ok=True)
    return {
        "command": [NODE, str(CLAUDE)],
        "env": {
            "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{server.port}",
            "ANTHROPIC_API_KEY": "sk-test-anything",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "HOME": str(home),
            "IS_SANDBOX": "1",
        },
        "cwd": str(tmp_path),
    }


def usage_rows(ed):
    db = Path(ed.lua("return require('mia.config').get().data_dir")) / "mia.sqlite3"
    with sqlite3.connect(db) as c:
        return c.execute("select agent, provider, input_tokens, output_tokens, total_usd, cost_known from usage").fetchall()


@pytest.mark.skipif(not CLAUDE.exists(), reason="claude-agent-acp is not installed: run scripts/bootstrap")
def test_claude_agent_acp_streams_from_the_scenario_server_and_its_usage_is_recorded(editor_factory, server, tmp_path):
    ed = agent_editor(editor_factory, {"claude": claude_agent(server, tmp_path)})
    ed.nvim.command("Mia agent claude")
    type_prompt(ed, "echo hello from the scenario server")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 90000)
    assert ed.state() == "done", ed.chat_text() + ed.messages()
    text = ed.chat_text()
    assert "## You\n\necho hello from the scenario server\n\n## claude" in text
    assert "hello from the scenario server" in text.split("## claude", 1)[1]
    rows = usage_rows(ed)
    assert rows and rows[0][0] == "claude" and rows[0][1] == "claude", rows


def test_a_reached_daily_limit_stops_an_agents_turn_before_the_agent_gets_it(editor_factory, server):
    # mia's own answer, priced, spends past the day's hard limit; the
    # external agent's turn is then refused before the agent is asked.
    ed = agent_editor(editor_factory, {"example": {"command": [NODE, str(EXAMPLE)]}},
                      providers={"scn": {"kind": "openai_compatible", "base_url": server.base_url}},
                      pricing={"scn/echo": {"input": 3.0, "output": 15.0}},
                      costs={"daily_limit_usd": 0.000001, "hard_limit": True})
    ed.nvim.command("Mia prompt echo costs money")
    ed.wait("require('mia.chat').state() == 'done'")
    # Were the turn let through, the agent's question is answered, not left open.
    answer_permission_with(ed, "Skip this change")
    ed.nvim.command("Mia agent example")
    type_prompt(ed, "improve the config")
    ed.wait("require('mia.chat').state() == 'error'", 60000)
    text = ed.chat_text()
    assert "**Error** (budget_exceeded)" in text and "costs.daily_limit_usd" in text, text
    assert "I'll help you with that" not in text, text


@pytest.mark.skipif(not CLAUDE.exists(), reason="claude-agent-acp is not installed: run scripts/bootstrap")
def test_claude_agent_acp_cost_past_a_warning_threshold_is_announced_once(editor_factory, server, tmp_path):
    ed = agent_editor(editor_factory, {"claude": claude_agent(server, tmp_path)},
                      costs={"daily_warning_usd": 0.000001})
    ed.lua("_G.warnings = {}; vim.notify = function(m, l) "
           "if l == vim.log.levels.WARN then table.insert(warnings, m) end end")
    ed.nvim.command("Mia agent claude")
    for text in ("echo first", "echo second"):
        type_prompt(ed, text)
        ed.wait("require('mia.chat').state() ~= 'streaming'", 90000)
        assert ed.state() == "done", ed.chat_text() + ed.messages()
    rows = usage_rows(ed)
    assert len(rows) == 2 and all(r[0] == "claude" and r[4] > 0 for r in rows), rows
    warnings = ed.lua("return warnings")
    assert len(warnings) == 1 and "approaching your $50.00 daily limit" in warnings[0], warnings


@pytest.mark.skipif(not CLAUDE.exists(), reason="claude-agent-acp is not installed: run scripts/bootstrap")
def test_claude_agent_acp_tool_call_asks_permission_and_runs_and_stop_cancels(editor_factory, server, tmp_path):
    ed = agent_editor(editor_factory, {"claude": claude_agent(server, tmp_path)})
    answer_permission_with(ed, "Allow")
    ed.nvim.command("Mia agent claude")
    type_prompt(ed, 'tool Bash {"command":"echo from-bash-$((40+2))","description":"print"}')
    ed.wait("require('mia.chat').state() ~= 'streaming'", 90000)
    text = ed.chat_text()
    assert ed.state() == "done", text + ed.messages()
    # Its Bash call drew as a tool block, the question showed its options, and "Allow" ran it.
    assert "⚙ **" in text
    asked = ed.lua("return _G.asked")
    assert asked["items"] == ["Always Allow", "Allow", "Reject"]
    assert "echo from-bash-$((40+2))" in asked["prompt"]
    assert "tool said: from-bash-42" in text
    rows = usage_rows(ed)
    assert len(rows) == 1 and rows[0][:2] == ("claude", "claude") and rows[0][2] > 0 and rows[0][5] == 1, rows
    assert rows[0][4] > 0, rows
    # The session's cost report (what /costs and :MiaCosts read) counts it.
    report = ed.lua("return require('mia').costs({ scope = 'session' })")
    assert abs(report["totals"]["cost_usd"] - rows[0][4]) < 1e-9, report

    # :Mia stop cancels a streaming answer (session/cancel), and the next prompt works.
    type_prompt(ed, "slow 400 20")
    ed.wait("require('mia.chat').buffer() and require('mia').costs and "
            "table.concat(vim.api.nvim_buf_get_lines(require('mia.chat').buffer(), 0, -1, false), '\\n'):find('w00003') ~= nil",
            60000)
    ed.nvim.command("Mia stop")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    assert ed.state() == "cancelled", ed.chat_text()
    assert ed.chat_text().rstrip().endswith("*[cancelled]*")
    assert "w00399" not in ed.chat_text()
    # The agent lives on: the next prompt is answered. (What claude-agent-acp 0.23.1
    # answers right after a cancel is its own: it first drains the interrupted
    # query, "consuming background task result" on its stderr.)
    type_prompt(ed, "echo still here")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 60000)
    assert ed.state() == "done", ed.chat_text()


EVERYTHING = ROOT / "tests" / "mcp" / "node_modules" / ".bin" / "mcp-server-everything"


@pytest.mark.skipif(not CLAUDE.exists() or not EVERYTHING.exists(),
                    reason="claude-agent-acp or the MCP test servers are not installed: run scripts/bootstrap")
def test_claude_agent_acp_gets_the_configured_mcp_server_and_its_model_calls_the_tool(editor_factory, server, tmp_path):
    ed = agent_editor(
        editor_factory,
        {"claude": claude_agent(server, tmp_path)},
        mcp={"servers": {"everything": {"command": [str(EVERYTHING), "stdio"]}}},
    )
    answer_permission_with(ed, "Allow")
    ed.nvim.command("Mia agent claude")
    type_prompt(ed, 'tool mcp__everything__echo {"message":"hello through claude"}')
    ed.wait("require('mia.chat').state() ~= 'streaming'", 90000)
    text = ed.chat_text()
    assert ed.state() == "done", text + ed.messages()
    # claude-agent-acp started the server mia passed and offered its tool to the model...
    offered = [
        {t["name"] for t in r["body"].get("tools", [])}
        for r in server.requests()
        if r["method"] == "POST" and r["body"] and "messages" in r["body"]
    ]
    assert any("mcp__everything__echo" in o for o in offered), offered
    # ...whose call reached the server and came back.
    assert "tool said: Echo: hello through claude" in text, text + ed.messages()


TOOL_AGENT = FIXTURES / "tool_agent.mjs"


def tool_agent(tmp_path):
    return {"command": [NODE, str(TOOL_AGENT)], "cwd": str(tmp_path)}


def test_an_agent_terminal_is_a_neovim_terminal_buffer_and_the_agent_gets_its_cut_output(editor_factory, tmp_path):
    ed = agent_editor(editor_factory, {"tools": tool_agent(tmp_path)})
    ed.nvim.command("Mia agent tools")
    type_prompt(ed, "terminal printf 'line-%s\\n' $(seq 1 30); exit 7")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    text = ed.chat_text()
    assert ed.state() == "done", text + ed.messages()
    # 30 lines of 8 bytes: the agent gets the last 64 bytes, cut at the start.
    answer = text.split("## tools", 1)[1]
    assert "exit=7 truncated=true output=" in answer
    got = answer.split("output=", 1)[1]
    assert got.rstrip().endswith("line-29\nline-30"), got
    assert "line-1\n" not in got
    # The user watched it in a terminal buffer that holds the whole output.
    term = ed.lua("""
      for _, b in ipairs(vim.api.nvim_list_bufs()) do
        if vim.api.nvim_buf_get_name(b):find('mia://terminal/tools/', 1, true) then
          return { vim.bo[b].buftype, table.concat(vim.api.nvim_buf_get_lines(b, 0, -1, false), '\\n'), #vim.fn.win_findbuf(b) }
        end
      end
    """)
    assert term[0] == "terminal"
    assert "line-1\n" in term[1] and "line-30" in term[1]
    assert term[2] == 1, "shown in a window under the chat"


def test_fs_read_gives_the_unsaved_buffer_and_write_goes_through_review(editor_factory, tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("one\ntwo\nthree\nfour\n")
    ed = agent_editor(editor_factory, {"tools": tool_agent(tmp_path)})
    ed.nvim.command(f"edit {f}")
    ed.nvim.command("call setline(2, 'TWO unsaved')")
    ed.nvim.command("Mia agent tools")
    type_prompt(ed, f"read {f}")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    assert "read=TWO unsaved\nthree\n" in ed.chat_text()
    # A write outside the project is refused as mia's own tools are.
    type_prompt(ed, "write /etc/mia-not-here.txt x")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    assert "write failed:" in ed.chat_text() and "outside" in ed.chat_text()
    # A write in the project shows mia's diff review; rejecting it is an error for the agent.
    ed.lua("vim.ui.input = function(opts, cb) cb('not now') end")
    new = tmp_path / "new.txt"
    type_prompt(ed, f"write {new} hello there")
    ed.wait("vim.tbl_count(vim.tbl_filter(function(w) return vim.api.nvim_win_get_config(w).relative ~= '' end, vim.api.nvim_list_wins())) > 0", 30000)
    ed.nvim.input("r")  # the review float's reject key
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    assert not new.exists()
    after = ed.chat_text().split(f"write {new}", 1)[1]
    assert "write failed:" in after and "not now" in after, after


def test_an_agent_that_reports_no_usage_has_a_footer_that_says_so_not_zeros(editor_factory, tmp_path):
    ed = agent_editor(editor_factory, {"tools": tool_agent(tmp_path)})
    ed.nvim.command("Mia agent tools")
    type_prompt(ed, "hello there")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    text = ed.chat_text(footers=True)
    assert "echo: hello there" in text
    assert text.rstrip().endswith("── tools · usage not reported ──"), text
    assert " 0 in" not in text and "cost unknown" not in text, text


def test_an_agent_reading_a_missing_file_gets_acps_resource_not_found(editor_factory, tmp_path):
    ed = agent_editor(editor_factory, {"tools": tool_agent(tmp_path)})
    ed.nvim.command("Mia agent tools")
    type_prompt(ed, f"read {tmp_path / 'missing.txt'}")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    after = ed.chat_text().split("read ", 1)[1]
    assert "read failed: Resource not found: " in after and "missing.txt (code -32002)" in after, after


def test_an_agent_reading_a_pipe_in_the_project_gets_an_error_at_once(editor_factory, tmp_path):
    """A FIFO in the project: opening it to read would wait for a writer
    that never comes, and the agent's turn with it. The agent is told the
    read failed, and the chat goes on."""
    os.mkfifo(tmp_path / "pipe")
    ed = agent_editor(editor_factory, {"tools": tool_agent(tmp_path)})
    ed.nvim.command("Mia agent tools")
    type_prompt(ed, "read pipe")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    after = ed.chat_text().rsplit("read pipe", 1)[1]
    assert "read failed:" in after and "not a regular file" in after, after
    assert ed.state() == "done"


def test_the_users_deny_rules_hold_for_an_agents_file_reads_and_writes_in_every_spelling(editor_factory, tmp_path):
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "key.txt").write_text("a\nTOP-SECRET\n")
    (tmp_path / "open.txt").write_text("a\nfine to read\n")
    (tmp_path / "link").symlink_to(tmp_path / "secrets")
    rules = [{"tool": "*", "pattern": "secrets/**", "action": "deny"}]
    ed = agent_editor(editor_factory, {"tools": tool_agent(tmp_path)}, permissions={"rules": rules})
    ed.nvim.command("Mia agent tools")
    for spelling in [tmp_path / "secrets" / "key.txt", "secrets/key.txt", "./secrets//key.txt",
                     "open/../secrets/key.txt", tmp_path / "link" / "key.txt"]:
        type_prompt(ed, f"read {spelling}")
        ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
        after = ed.chat_text().rsplit(f"read {spelling}", 1)[1]
        assert "read failed:" in after and "denied by a permission rule for read_file" in after, (spelling, after)
    assert "TOP-SECRET" not in ed.chat_text()
    type_prompt(ed, "write secrets/new.txt x")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    assert "denied by a permission rule for write_file" in ed.chat_text().rsplit("write secrets/new.txt", 1)[1]
    assert not (tmp_path / "secrets" / "new.txt").exists()
    # What no rule covers is read as before.
    type_prompt(ed, "read open.txt")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    assert "read=fine to read" in ed.chat_text()


def test_a_dying_agent_shows_its_stderr_and_the_next_prompt_restarts_it(editor_factory, tmp_path):
    ed = agent_editor(editor_factory, {"tools": tool_agent(tmp_path)})
    ed.nvim.command("Mia agent tools")
    type_prompt(ed, "die")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    assert ed.state() == "error"
    text = ed.chat_text()
    assert "the agent `tools` exited (exit status: 3)" in text, text
    assert "tool agent: fatal error 42" in text and "tool agent: about to fail" in text
    assert "Send a prompt again to restart it" in text
    type_prompt(ed, "hello again")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    assert ed.state() == "done"
    assert "echo: hello again" in ed.chat_text()


def test_the_agent_modes_appear_in_mia_mode_and_set_mode_reaches_it(editor_factory, tmp_path):
    ed = agent_editor(editor_factory, {"tools": tool_agent(tmp_path)})
    ed.nvim.command("Mia agent tools")
    ed.wait("require('mia').modes().currentModeId == 'careful'", 30000)
    assert ed.lua("return vim.fn.getcompletion('Mia mode ', 'cmdline')") == ["careful", "bold", "model", "effort"]
    ed.nvim.command("Mia mode bold")
    ed.wait("require('mia').modes().currentModeId == 'bold'", 30000)


@pytest.mark.skipif(not CLAUDE.exists(), reason="claude-agent-acp is not installed: run scripts/bootstrap")
def test_checkhealth_starts_each_agent_and_reports_name_version_and_login(editor_factory, server, tmp_path):
    ed = agent_editor(editor_factory, {
        "claude": claude_agent(server, tmp_path),
        "example": {"command": [NODE, str(EXAMPLE)]},
        "missing": {"command": ["/nonexistent/agent-binary"]},
    })
    ed.nvim.command("checkhealth mia")
    report = "\n".join(ed.nvim.current.buffer[:])
    section = report.split("external agents (ACP)", 1)[1]
    assert "claude (`" in section and "Claude Agent (@zed-industries/claude-agent-acp) 0.23.1, protocol 1; login: none needed" in section, section
    assert "0.23.1, protocol 1; login: none needed; past sessions: list, load" in section, section
    assert "example (`" in section and "protocol 1" in section
    assert "missing (`/nonexistent/agent-binary`): mia: cannot start the agent `missing`" in section


def test_an_agent_with_one_login_method_is_authenticated_and_one_with_two_says_how(editor_factory, tmp_path):
    one = dict(tool_agent(tmp_path), env={"TOOL_AGENT_AUTH": "token"})
    two = dict(tool_agent(tmp_path), env={"TOOL_AGENT_AUTH": "oauth,apikey"})
    ed = agent_editor(editor_factory, {"one": one, "two": two})
    ed.nvim.command("Mia agent one")
    type_prompt(ed, "hi")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    assert "echo: hi (logged in with token)" in ed.chat_text()
    ed.nvim.command("Mia agent two")
    type_prompt(ed, "hi")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    assert ed.state() == "error"
    text = ed.chat_text().split("## two", 1)[1]
    assert "the agent `two` needs you to log in" in text
    assert "`oauth` (Log in with oauth), `apikey` (Log in with apikey)" in text


def test_the_agent_slash_commands_complete_with_their_hint_and_go_to_the_agent(editor_factory, tmp_path):
    ed = agent_editor(editor_factory, {"tools": tool_agent(tmp_path)})
    ed.nvim.command("Mia agent tools")
    ed.wait("vim.tbl_contains(vim.tbl_map(function(c) return c.name end, require('mia.slash').available()), 'deploy')",
            30000)
    start, items = ed.lua("return { require('mia.slash').complete('/dep') }")
    assert start == 0 and items[0]["word"] == "/deploy" and items[0]["menu"] == "Deploy the project"
    _, hint = ed.lua("return { require('mia.slash').complete('/deploy ') }")
    assert hint[0]["abbr"] == "environment"
    names = ed.lua("return vim.tbl_map(function(c) return c.name end, require('mia.slash').available())")
    assert "costs" in names and "compact" not in names and "model" not in names
    type_prompt(ed, "/deploy prod")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    assert "echo: /deploy prod" in ed.chat_text()
    # Back on mia's own agent, its commands are gone.
    ed.nvim.command("Mia agent mia")
    names = ed.lua("return vim.tbl_map(function(c) return c.name end, require('mia.slash').available())")
    assert "deploy" not in names and "model" in names


def test_a_slow_starting_agent_never_blocks_the_editor_and_its_startup_shows_in_the_chat(editor_factory, tmp_path):
    slow = {"command": ["sh", "-c", f"sleep 2; exec '{NODE}' '{TOOL_AGENT}'"], "cwd": str(tmp_path)}
    ed = agent_editor(editor_factory, {"slow": slow})
    ed.nvim.command("Mia agent slow")  # returns at once: the editor answers the next request
    assert ed.lua("return 1 + 1") == 2
    ed.wait("(require('mia.chat').status_text() or ''):find('starting the agent `slow`', 1, true) ~= nil", 5000)
    type_prompt(ed, "hi")  # sent while it still starts: waits for it in the core
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    assert "echo: hi" in ed.chat_text()
    assert ed.lua("return require('mia.chat').status_text()") is None


def test_an_agent_dying_between_turns_is_announced_with_its_stderr(editor_factory, tmp_path):
    ed = agent_editor(editor_factory, {"tools": tool_agent(tmp_path)})
    ed.nvim.command("Mia agent tools")
    ed.wait("require('mia').modes().currentModeId == 'careful'", 30000)  # started
    ed.lua("""
      _G.notes = {}
      vim.notify = function(msg) table.insert(_G.notes, msg) end
    """)
    # Kill exactly the agent this Neovim started: its child running tool_agent.mjs.
    children = ed.lua("return vim.split(vim.trim(vim.fn.system({ 'pgrep', '-P', tostring(vim.fn.getpid()) })), '\\n')")
    agent = [c for c in children if c and "tool_agent.mjs" in Path(f"/proc/{c}/cmdline").read_bytes().decode(errors="replace")]
    assert len(agent) == 1, children
    os.kill(int(agent[0]), 9)
    ed.wait("#_G.notes > 0", 10000)
    note = ed.lua("return _G.notes[1]")
    assert "the agent `tools` exited (signal: 9 (SIGKILL))" in note and "next prompt starts it again" in note, note
    type_prompt(ed, "back")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    assert "echo: back" in ed.chat_text()


def test_an_agent_and_its_children_end_when_neovim_is_killed(editor_factory, tmp_path):
    pids = tmp_path / "pids"
    # The agent starts a child of its own (as claude-agent-acp starts its CLI) and says both pids.
    cmd = f"sleep 1000 & echo $$ $! > '{pids}.tmp'; mv '{pids}.tmp' '{pids}'; exec '{NODE}' '{TOOL_AGENT}'"
    ed = agent_editor(editor_factory, {"tools": {"command": ["sh", "-c", cmd], "cwd": str(tmp_path)}})
    ed.nvim.command("Mia agent tools")
    ed.wait("require('mia').modes() ~= nil and require('mia').modes().currentModeId == 'careful'", 30000)
    agent, child = (int(p) for p in pids.read_text().split())
    assert process_running(agent) and process_running(child)
    left = kill_neovim_and_wait_for(ed, [agent, child])
    assert agent not in left, "the agent outlived the Neovim that started it"
    assert child not in left, "the agent's child outlived the Neovim that started it"


HOSTILE_AGENT = FIXTURES / "hostile_agent.mjs"


def hostile_turn(editor_factory, tmp_path, prompt):
    """A Neovim whose chat talks to the hostile agent, after one prompt: (editor, chat text)."""
    ed = agent_editor(editor_factory, {"bad": {"command": [NODE, str(HOSTILE_AGENT)], "cwd": str(tmp_path)}})
    ed.nvim.command("Mia agent bad")
    type_prompt(ed, prompt)
    ed.wait("require('mia.chat').state() ~= 'streaming'", 60000)
    return ed, ed.chat_text()


def test_an_agent_that_never_ends_its_message_is_stopped_with_a_clear_error(editor_factory, tmp_path):
    ed, text = hostile_turn(editor_factory, tmp_path, "flood")
    assert "the agent `bad` exited (stopped by mia: it sent a message longer than 64 MB" in text, text[-2000:]
    # The editor is fine, and the next prompt starts the agent again.
    rss_kb = int(next(line.split()[1] for line in Path(f"/proc/{ed.pid}/status").read_text().splitlines()
                      if line.startswith("VmRSS:")))
    assert rss_kb < 1024 * 1024, f"Neovim holds {rss_kb} kB after an 80 MB flood"
    type_prompt(ed, "still there")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    assert "echo: still there" in ed.chat_text()


def test_an_endless_stderr_line_is_cut_in_the_message(editor_factory, tmp_path):
    _, text = hostile_turn(editor_factory, tmp_path, "stderr")
    assert "the agent `bad` exited (exit status: 5)" in text, text[-2000:]
    assert "e" * 500 + "…" in text and "e" * 501 not in text


def test_lines_that_break_the_protocol_do_not_end_the_turn(editor_factory, tmp_path):
    _, text = hostile_turn(editor_factory, tmp_path, "garbage")
    assert "survived" in text, text


def test_an_agent_posing_as_mias_live_figures_cannot_break_or_reorder_the_answer(editor_factory, tmp_path):
    """A usage_update with `_meta.mia.live` takes the path of mia's own
    live figures (text after it joins the text before it): nonsense,
    deeply nested figures neither reorder nor lose the text, and raise no
    error."""
    ed, text = hostile_turn(editor_factory, tmp_path, "livefake")
    assert "alpha beta gamma" in text, text[-2000:]
    assert ed.state() == "done", text[-2000:]
    assert "failed" not in ed.messages(), ed.messages()


def test_an_agents_negative_cost_is_not_recorded_and_cannot_reopen_a_reached_limit(editor_factory, server, tmp_path):
    ed = agent_editor(editor_factory, {"bad": {"command": [NODE, str(HOSTILE_AGENT)], "cwd": str(tmp_path)}},
                      providers={"scn": {"kind": "openai_compatible", "base_url": server.base_url}},
                      pricing={"scn/echo": {"input": 3.0, "output": 15.0}},
                      costs={"daily_limit_usd": 0.000001, "hard_limit": True})
    ed.nvim.command("Mia agent bad")
    type_prompt(ed, "cost -1000")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 60000)
    assert "costed" in ed.chat_text(), ed.chat_text()
    assert all(r[4] >= 0 for r in usage_rows(ed)), usage_rows(ed)
    # mia's own answer reaches the day's limit; the agent's "refund" does not
    # lower the day's spend, so the next one is refused.
    ed.nvim.command("Mia agent mia")
    ed.nvim.command("Mia prompt echo costs money")
    ed.wait("require('mia.chat').state() == 'done'")
    ed.nvim.command("Mia prompt echo again")
    ed.wait("require('mia.chat').state() ~= 'streaming'")
    assert ed.state() == "error" and "costs.daily_limit_usd" in ed.chat_text(), ed.chat_text()[-1500:]


def test_an_agents_absurd_cost_is_not_recorded_and_is_named_in_one_warning(editor_factory, server, tmp_path):
    ed = agent_editor(editor_factory, {"bad": {"command": [NODE, str(HOSTILE_AGENT)], "cwd": str(tmp_path)}},
                      providers={"scn": {"kind": "openai_compatible", "base_url": server.base_url}},
                      costs={"daily_limit_usd": 5, "hard_limit": True})
    record_notes(ed)
    ed.nvim.command("Mia agent bad")
    # 1e308 and then 0 and 1e308 again would be two 1e308 turns: their sum is
    # infinite, and either one keeps the day's limit refusing.
    for amount in ("1e308", "0", "1e308", "2"):
        type_prompt(ed, f"cost {amount}")
        ed.wait("require('mia.chat').state() ~= 'streaming'", 60000)
    assert [r[4] for r in usage_rows(ed)] == [0.0, 0.0, 2.0], usage_rows(ed)
    warned = [n["msg"] for n in ed.lua("return _G.notes") if "session cost over $1000000" in n["msg"]]
    assert len(warned) == 1 and "agent bad" in warned[0], ed.lua("return _G.notes")
    # The day's spend is $2: mia's own answers are not refused.
    ed.nvim.command("Mia agent mia")
    ed.nvim.command("Mia prompt echo still allowed")
    ed.wait("require('mia.chat').state() ~= 'streaming'")
    assert ed.state() == "done", ed.chat_text()[-1500:]


def record_notes(ed):
    ed.lua("""
      _G.notes = {}
      vim.notify = function(msg, level) table.insert(_G.notes, { msg = msg, level = level }) end
    """)


def record_picker(ed, want=None):
    """vim.ui.select keeps what it showed (raw items and their lines) and picks
    the first line containing `want` (none: the picker is dismissed)."""
    ed.lua(
        """
        _G.shown, _G.items = nil, nil
        local want = ...
        vim.ui.select = function(items, opts, cb)
          _G.items = items
          local lines = {}
          for i, it in ipairs(items) do lines[i] = opts.format_item(it) end
          _G.shown = lines
          for i, line in ipairs(lines) do
            if want ~= vim.NIL and want ~= nil and line:find(want, 1, true) then
              -- Picked from Neovim's own loop, as a user's pick is.
              return vim.schedule(function() cb(items[i], i) end)
            end
          end
          cb(nil, nil)
        end
        """,
        want,
    )


def started(ed, name):
    ed.wait(f"(require('mia.agents').info('{name}') or {{}}).modes ~= nil", 30000)


def test_mia_sessions_lists_an_agents_sessions_beside_mias_and_a_picked_one_is_replayed_and_continued(
        editor_factory, server, tmp_path):
    ed = editor_factory(setup=scenario_setup(server, agents={"tools": tool_agent(tmp_path)}))
    ed.nvim.command(f"cd {tmp_path}")
    # The agent runs, but the chat talks to mia's own agent.
    ed.nvim.command("Mia agent tools")
    started(ed, "tools")
    ed.nvim.command("Mia agent mia")
    ed.nvim.command("Mia prompt echo mine")
    ed.wait("require('mia.chat').state() == 'done'")
    record_picker(ed, "Fixture session 3")
    ed.nvim.command("Mia sessions")
    ed.wait("_G.shown ~= nil", 30000)
    shown = ed.lua("return _G.shown")
    # mia's own session first (newest), then the agent's five of this cwd,
    # fetched two per page; the one it keeps elsewhere is not asked for.
    assert re.fullmatch(r"echo mine · \d+m ago · 2 messages · \$\S+", shown[0]), shown
    assert len(shown) == 6, shown
    for i, line in enumerate(shown[1:], start=1):
        assert re.fullmatch(rf"tools · Fixture session {i} · \d+m ago", line), shown
    # The pick switches the chat to the agent, which replays the session.
    ed.wait("require('mia.chat').state() == 'idle' and "
            "table.concat(vim.api.nvim_buf_get_lines(require('mia.chat').buffer(), 0, -1, false), '\\n'):find('second answer') ~= nil",
            30000)
    assert ed.lua("return require('mia.agents').current()") == "tools"
    text = ed.chat_text()
    assert "echo mine" not in text, "the chat shows only the loaded session"
    # Its two user chunks are one message, drawn under the agent's name; the tool call is a block.
    assert text.startswith("## You\n\nfirst question of fixture-3\n\n## tools\n\nfirst answer of fixture-3"), text
    assert "⚙ **Read notes.txt**" in text
    assert "## You\n\nsecond question\n\n## tools\n\nsecond answer" in text
    # The next prompt continues the loaded session.
    type_prompt(ed, "and now")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    assert "echo: and now [in fixture-3]" in ed.chat_text(), ed.chat_text() + ed.messages()
    # session/load's answer brought the session's settings.
    assert [o["currentValue"] for o in ed.lua("return require('mia').config_options()")] == ["smart", "high"]


def test_an_endless_agent_is_cut_at_ten_pages_and_slow_or_failing_agents_are_named_in_one_warning(
        editor_factory, tmp_path):
    def agent(listing):
        return dict(tool_agent(tmp_path), env={"TOOL_AGENT_LIST": listing})
    ed = agent_editor(editor_factory, {
        "endless": agent("endless"), "slow": agent("slow"), "broken": agent("fail"), "idle": tool_agent(tmp_path),
    })
    ed.nvim.command(f"cd {tmp_path}")
    for name in ("slow", "broken", "endless"):  # running; the chat talks to `endless`
        ed.nvim.command(f"Mia agent {name}")
        started(ed, name)
    ed.lua("require('mia.sessions').agent_timeout_ms = 1000")
    record_notes(ed)
    record_picker(ed)
    ed.nvim.command("Mia sessions")
    assert ed.lua("return 1 + 1") == 2, "the editor answers while the agents are asked"
    ed.wait("_G.shown ~= nil", 30000)
    ids = [it["sessionId"] for it in ed.lua("return _G.items")]
    assert ids == [f"endless-{i}" for i in range(20)], ids
    assert ed.lua("return _G.shown[1]") == "endless · (untitled)"
    warnings = [n for n in ed.lua("return _G.notes") if n["level"] == 3]
    assert len(warnings) == 1, ed.lua("return _G.notes")
    w = warnings[0]["msg"]
    assert w.startswith("mia: could not list the sessions of "), w
    assert "`slow` (no answer to session/list within 1 s)" in w, w
    assert "`broken` (" in w and "the session index is corrupt" in w, w
    assert "idle" not in w
    # An agent that does not run is not started to be asked.
    assert ed.lua("return require('mia.agents').info('idle')") is None


def test_an_agent_without_load_session_says_so_and_one_without_list_is_not_asked(editor_factory, tmp_path):
    ed = agent_editor(editor_factory, {
        "listonly": dict(tool_agent(tmp_path), env={"TOOL_AGENT_CAPS": "list"}),
        "none": dict(tool_agent(tmp_path), env={"TOOL_AGENT_CAPS": "none", "TOOL_AGENT_LIST": "fail"}),
    })
    ed.nvim.command("Mia agent none")
    started(ed, "none")
    ed.nvim.command("Mia agent listonly")  # not started yet: :Mia sessions starts it
    record_notes(ed)
    record_picker(ed, "Fixture session 1")
    ed.nvim.command("Mia sessions")
    ed.wait("_G.shown ~= nil", 30000)
    assert len(ed.lua("return _G.shown")) == 5 and all(s.startswith("listonly · ") for s in ed.lua("return _G.shown"))
    ed.wait("#vim.tbl_filter(function(n) return n.level == vim.log.levels.ERROR end, _G.notes) > 0", 30000)
    errors = [n["msg"] for n in ed.lua("return _G.notes") if n["level"] == 4]
    assert errors == ["mia: the agent `listonly` cannot load past sessions: its `initialize` does not offer "
                      "`loadSession`. Start a new chat with it instead"], ed.lua("return _G.notes")
    assert not any(n["level"] == 3 for n in ed.lua("return _G.notes")), "`none` was never asked"
    # The chat works on with a new session.
    type_prompt(ed, "still fine")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    assert "echo: still fine" in ed.chat_text() and "[in " not in ed.chat_text()


def test_the_agent_settings_show_in_mia_mode_complete_and_change_with_clear_errors(editor_factory, tmp_path):
    ed = agent_editor(editor_factory, {"tools": tool_agent(tmp_path)})
    ed.nvim.command("Mia agent tools")
    started(ed, "tools")
    assert ed.lua("return vim.fn.getcompletion('Mia mode ', 'cmdline')") == ["careful", "bold", "model", "effort"]
    assert ed.lua("return vim.fn.getcompletion('Mia mode effort ', 'cmdline')") == ["low", "high"]
    assert ed.lua("return vim.fn.getcompletion('Mia mode effort h', 'cmdline')") == ["high"]
    assert ed.lua("return vim.fn.getcompletion('Mia mode bold ', 'cmdline')") == []
    _, items = ed.lua("return { require('mia.slash').complete('/mode model ') }")
    assert [i["word"] for i in items] == ["model fast", "model smart"]
    ed.nvim.command("Mia mode")
    msgs = ed.messages()
    assert "mode: careful  (careful, bold)" in msgs and "model = fast  (Model: fast, smart)" in msgs
    assert "effort = low  (Effort: low, high)" in msgs, msgs
    # The agent changes a setting itself: config_option_update keeps the new value.
    type_prompt(ed, "config")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    assert "config changed" in ed.chat_text()
    assert ed.lua("return require('mia').config_options()[1].currentValue") == "smart"
    record_notes(ed)
    ed.nvim.command("Mia mode model fast")
    ed.wait("require('mia').config_options()[1].currentValue == 'fast'", 30000)
    ed.wait("#_G.notes > 0")
    assert ed.lua("return _G.notes[1].msg") == "mia: tools's Model is now fast"
    type_prompt(ed, "whoami")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    assert "model=fast effort=low" in ed.chat_text(), "the agent itself has the new value"
    ed.lua("_G.notes = {}")
    ed.nvim.command("Mia mode model turbo")
    ed.nvim.command("Mia mode speed fast")
    ed.nvim.command("Mia mode nosuch")
    assert [n["msg"] for n in ed.lua("return _G.notes")] == [
        "mia: `turbo` is not a value of tools's setting `model`. Values: fast, smart",
        "mia: the agent `tools` has no setting `speed`. Its settings: model, effort",
        "mia: the agent `tools` has no mode `nosuch`. Its modes: careful, bold. "
        "Its settings (:Mia mode {setting} {value}): model, effort",
    ]


@pytest.mark.skipif(not CLAUDE.exists(), reason="claude-agent-acp is not installed: run scripts/bootstrap")
def test_claude_agent_acp_sessions_are_listed_and_a_picked_one_is_replayed_and_continued(
        editor_factory, server, tmp_path):
    claude = claude_agent(server, tmp_path)
    first = agent_editor(editor_factory, {"claude": claude})
    first.nvim.command("Mia agent claude")
    type_prompt(first, "echo hello from the first run")
    first.wait("require('mia.chat').state() ~= 'streaming'", 90000)
    assert first.state() == "done", first.chat_text() + first.messages()
    # Its CLI writes the transcript it lists from a moment after the turn ends: ask again until it is there.
    for _ in range(100):
        listed = first.lua("return require('mia').sessions.list({ agent = 'claude' })")["sessions"]
        if listed:
            break
        time.sleep(0.1)
    assert [(s["agent"], s["title"], s["cwd"]) for s in listed] == [
        ("claude", "echo hello from the first run", str(tmp_path))], listed
    first.close()

    # A new Neovim: :Mia sessions starts the chat's agent, lists its session, and the pick loads it.
    second = editor_factory(name="second", setup={"model": "scn/echo", "agents": {"claude": claude}})
    second.nvim.command("Mia agent claude")
    record_picker(second, "claude · echo hello from the first run")
    second.nvim.command("Mia sessions")
    second.wait("_G.shown ~= nil", 90000)
    shown = second.lua("return _G.shown")
    assert len(shown) == 1 and re.match(r"claude · echo hello from the first run · \d+m ago", shown[0]), shown
    # The replay draws as it arrives: wait for its last part, the agent's answer.
    second.wait("require('mia.chat').state() == 'idle' and "
                "table.concat(vim.api.nvim_buf_get_lines(require('mia.chat').buffer(), 0, -1, false), '\\n')"
                ":find('## claude\\n\\necho hello from the first run', 1, true) ~= nil", 60000)
    text = second.chat_text()
    assert "echo hello from the first run\n\n## claude\n\necho hello from the first run" in text, text
    type_prompt(second, "echo and once more")
    second.wait("require('mia.chat').state() ~= 'streaming'", 90000)
    assert second.state() == "done", second.chat_text() + second.messages()
    assert "and once more" in second.chat_text().split("echo and once more", 1)[1]
    # The agent continued the loaded session: the model got the first run's turn too.
    asked = [r for r in server.requests() if "echo and once more" in json.dumps(r.get("body"))]
    assert asked and "echo hello from the first run" in json.dumps(asked[-1]["body"]["messages"]), asked[-1:]


@pytest.mark.skipif(not CLAUDE.exists(), reason="claude-agent-acp is not installed: run scripts/bootstrap")
def test_claude_agent_acp_settings_show_in_mia_mode_and_change_through_set_config_option(editor_factory, server, tmp_path):
    ed = agent_editor(editor_factory, {"claude": claude_agent(server, tmp_path)})
    ed.nvim.command("Mia agent claude")
    ed.wait("#require('mia').config_options() > 0", 90000)
    ids = ed.lua("return vim.tbl_map(function(o) return o.id end, require('mia').config_options())")
    assert "mode" in ids, ids
    values = ed.lua("return vim.fn.getcompletion('Mia mode mode ', 'cmdline')")
    assert "plan" in values and "default" in values, values
    ed.nvim.command("Mia mode")
    assert "mode = default  (Mode: default, acceptEdits, plan" in ed.messages(), ed.messages()
    record_notes(ed)
    ed.nvim.command("Mia mode mode plan")
    ed.wait("#_G.notes > 0", 30000)
    assert ed.lua("return _G.notes[1].msg") == "mia: claude's Mode is now plan", ed.lua("return _G.notes")
    mode = ed.lua("return vim.tbl_filter(function(o) return o.id == 'mode' end, require('mia').config_options())[1]")
    assert mode["currentValue"] == "plan"
    # It also said so as a mode change (current_mode_update).
    ed.wait("require('mia').modes().currentModeId == 'plan'", 30000)


def test_the_configured_mcp_servers_reach_the_agents_sessions_and_http_only_where_offered(editor_factory, tmp_path):
    servers = {
        "fs": {"command": ["/opt/mcp/fs-server", "stdio"], "env": {"FS_TOKEN": "fs-token-value"}},
        "remote": {"url": "https://example.test/mcp", "headers": {"Authorization": "Bearer remote-value"}},
    }
    ed = agent_editor(
        editor_factory,
        {
            "tools": tool_agent(tmp_path),
            "httpok": dict(tool_agent(tmp_path), env={"TOOL_AGENT_MCP_HTTP": "1"}),
            "plain": dict(tool_agent(tmp_path), mcp=False),
        },
        mcp={"servers": servers},
    )
    stdio = {"name": "fs", "command": "/opt/mcp/fs-server", "args": ["stdio"],
             "env": [{"name": "FS_TOKEN", "value": "fs-token-value"}]}
    http = {"type": "http", "name": "remote", "url": "https://example.test/mcp",
            "headers": [{"name": "Authorization", "value": "Bearer remote-value"}]}

    def got(name):
        ed.nvim.command(f"Mia agent {name}")
        type_prompt(ed, "mcp")
        ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
        assert ed.state() == "done", ed.chat_text() + ed.messages()
        return json.loads(ed.chat_text().rstrip().rsplit("mcp=", 1)[1])

    # An agent without mcpCapabilities.http gets the stdio server only, and one warning says why.
    assert got("tools") == [stdio]
    warning = "MCP servers not passed to the agent `tools`: `remote` (a streamable-HTTP server"
    assert ed.messages().count(warning) == 1, ed.messages()
    assert "remote-value" not in ed.messages() and "fs-token-value" not in ed.messages()
    # session/load carries the same servers (the agent refuses others), and the warning is not repeated.
    ed.lua("require('mia.agents').load('tools', 'fixture-3', { cwd = ... })", str(tmp_path))
    ed.wait("require('mia.chat').state() == 'idle' and "
            "table.concat(vim.api.nvim_buf_get_lines(require('mia.chat').buffer(), 0, -1, false), '\\n'):find('second answer') ~= nil",
            30000)
    type_prompt(ed, "mcp")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    assert json.loads(ed.chat_text().rstrip().rsplit("mcp=", 1)[1]) == [stdio], ed.chat_text() + ed.messages()
    assert ed.messages().count(warning) == 1, ed.messages()
    # One that offers http gets both; `mcp = false` gets none.
    assert got("httpok") == [stdio, http]
    assert "agent `httpok`" not in ed.messages()
    assert got("plain") == []
    ed.nvim.command("checkhealth mia")
    section = "\n".join(ed.nvim.current.buffer[:]).split("mia: external agents (ACP)", 1)[1]
    assert "httpok: MCP servers passed: fs, remote\n" in section, section
    assert ("tools: MCP servers passed: fs (left out: remote: HTTP, and it does not offer mcpCapabilities.http)"
            in section), section
    assert "plain: passes no MCP servers (agents.plain.mcp = false)" in section, section


def test_setup_refuses_an_agent_mcp_option_that_is_not_a_boolean(editor_factory):
    ed = editor_factory()
    err = ed.lua("local ok, e = pcall(require('mia').setup, { agents = { x = { command = { 'a' }, mcp = 'no' } } }) return e")
    assert "agents.x.mcp" in err and "must be a boolean" in err
