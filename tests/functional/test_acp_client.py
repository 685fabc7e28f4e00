"""External ACP agents in mia's chat (mia as the ACP client), driven like a
user in a real headless Neovim against real agent processes: the SDK's own
example agent, claude-agent-acp run offline against the scenario server,
and a small terminal-using agent written on the pinned SDK."""

import json
import os
import shutil
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from conftest import LIB, ROOT

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
    assert ed.lua("return vim.fn.getcompletion('Mia mode ', 'cmdline')") == ["careful", "bold"]
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


def _running(pid: int) -> bool:
    """Whether `pid` runs (a zombie has ended: only its parent has not looked)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def test_an_agent_and_its_children_end_when_neovim_is_killed(editor_factory, tmp_path):
    pids = tmp_path / "pids"
    # The agent starts a child of its own (as claude-agent-acp starts its CLI) and says both pids.
    cmd = f"sleep 1000 & echo $$ $! > '{pids}.tmp'; mv '{pids}.tmp' '{pids}'; exec '{NODE}' '{TOOL_AGENT}'"
    ed = agent_editor(editor_factory, {"tools": {"command": ["sh", "-c", cmd], "cwd": str(tmp_path)}})
    ed.nvim.command("Mia agent tools")
    ed.wait("require('mia').modes() ~= nil and require('mia').modes().currentModeId == 'careful'", 30000)
    agent, child = (int(p) for p in pids.read_text().split())
    assert _running(agent) and _running(child)
    # Neovim gets no chance to end them: SIGKILL, as an OOM killer or a crash would.
    os.kill(ed.pid, signal.SIGKILL)
    deadline = time.monotonic() + 15  # a guard against hanging, not a timing assertion
    while (_running(agent) or _running(child)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(agent), "the agent outlived the Neovim that started it"
    assert not _running(child), "the agent's child outlived the Neovim that started it"


HOSTILE_AGENT = FIXTURES / "hostile_agent.mjs"


def hostile_editor(editor_factory, tmp_path):
    ed = agent_editor(editor_factory, {"bad": {"command": [NODE, str(HOSTILE_AGENT)], "cwd": str(tmp_path)}})
    ed.nvim.command("Mia agent bad")
    return ed


def test_an_agent_that_never_ends_its_message_is_stopped_with_a_clear_error(editor_factory, tmp_path):
    ed = hostile_editor(editor_factory, tmp_path)
    type_prompt(ed, "flood")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 60000)
    text = ed.chat_text()
    assert "the agent `bad` exited (stopped by mia: it sent a message longer than 64 MB" in text, text[-2000:]
    # The editor is fine, and the next prompt starts the agent again.
    rss_kb = int(next(line.split()[1] for line in Path(f"/proc/{ed.pid}/status").read_text().splitlines()
                      if line.startswith("VmRSS:")))
    assert rss_kb < 1024 * 1024, f"Neovim holds {rss_kb} kB after an 80 MB flood"
    type_prompt(ed, "still there")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    assert "echo: still there" in ed.chat_text()


def test_an_endless_stderr_line_is_cut_in_the_message(editor_factory, tmp_path):
    ed = hostile_editor(editor_factory, tmp_path)
    type_prompt(ed, "stderr")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 60000)
    text = ed.chat_text()
    assert "the agent `bad` exited (exit status: 5)" in text, text[-2000:]
    assert "e" * 500 + "…" in text and "e" * 501 not in text


def test_lines_that_break_the_protocol_do_not_end_the_turn(editor_factory, tmp_path):
    ed = hostile_editor(editor_factory, tmp_path)
    type_prompt(ed, "garbage")
    ed.wait("require('mia.chat').state() ~= 'streaming'", 30000)
    assert "survived" in ed.chat_text(), ed.chat_text()
