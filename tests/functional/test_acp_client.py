"""External ACP agents in mia's chat (mia as the ACP client), driven like a
user in a real headless Neovim against real agent processes: the SDK's own
example agent, claude-agent-acp run offline against the scenario server,
and a small terminal-using agent written on the pinned SDK."""

import json
import os
import shutil
import sqlite3
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
